package leaderboards

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/rallyhq/rally/shared/api"
	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/errs"
	"github.com/rallyhq/rally/shared/imports"
	"github.com/rallyhq/rally/shared/jobs"
)

// ScoreLine is an import file's score line: a match submitted to a board
// (docs/IMPORT.md). Without match_id the line's own id is the match's;
// without reached_at the import's start is; without period the period
// of reached_at is.
type ScoreLine struct {
	Type          string     `json:"type"`
	LeaderboardID *string    `json:"leaderboard_id"`
	PlayerID      *string    `json:"player_id"`
	Score         *int64     `json:"score"`
	Period        string     `json:"period,omitempty"`
	ReachedAt     *time.Time `json:"reached_at,omitempty"`
	MatchID       string     `json:"match_id,omitempty"`
}

// LineScore is the line type of scores.
const LineScore = "score"

// ScoreRef names one player's score in one board period.
type ScoreRef struct{ Board, Period, Player string }

// MatchRef names one recorded match (matches are recorded per board and
// player, whatever the period).
type MatchRef struct{ Board, Player, MatchID string }

// Held is what the Scores store holds of a chunk of an import: the
// scores, the matches recorded and the players banned among those asked.
type Held struct {
	Scores   map[ScoreRef]Score
	Recorded map[MatchRef]bool
	Banned   map[string]bool
	// Closed are the board periods closed to matches (their final
	// standings archived, or being archived).
	Closed map[BoardPeriod]bool
}

// Imported is a score an import changed: the new score, the one it had
// before (nil when it had none) and how many matches changed it (its
// version moves by as many, as if each had been submitted).
type Imported struct {
	Score
	Previous *Score
	Changes  int64
}

// Recorded is a match an import applied and the score it left.
type Recorded struct {
	Submission
	Applied    int64
	RecordedAt time.Time
}

// ImportChunk names a chunk of an import for good: its job (see
// jobs.Work.Job) and its first line.
type ImportChunk struct {
	Job  string
	Line int64
}

// ScoreImports is what an import needs of the Scores store: a chunk's
// state read in batches, and its new state written in batches.
type ScoreImports interface {
	Held(ctx context.Context, scores []ScoreRef, matches []MatchRef, players []string) (Held, error)
	// Import writes a chunk's new state in three steps, each only once
	// the one before is written, and returns the scores as written
	// (versions included):
	//  1. the new members of each board period, counted once per chunk:
	//     a chunk applied again after a run cut short (which finds some
	//     of its players written, and would count short) adds nothing;
	//  2. the scores (with their board's order, for the rank keys);
	//  3. the matches: a match recorded is a match whose score is
	//     written, which is what makes a chunk cut short while writing
	//     safe to apply again.
	// The writes are not conditional: a live submission for the same
	// player at the same moment may be lost (see docs/IMPORT.md).
	Import(ctx context.Context, chunk ImportChunk, orders map[string]Order, scores []Imported, members map[BoardPeriod]int64, matches []Recorded) ([]Score, error)
	// ForgetImport removes what Import kept on a board period to count a
	// job's chunks once; the job catches up only when no chunk of it is
	// left to apply.
	ForgetImport(ctx context.Context, bp BoardPeriod, job string) error
}

// Importer loads the score lines of an import file as if each had been
// submitted with POST /v1/leaderboards/{id}/scores: under the board's
// policy (Apply), a match id applied once, the same items written.
type Importer struct {
	Defs   Definitions
	Scores ScoreImports
	// Boards receive, once a chunk is written, the score of every player
	// it named: the ones it changed and the ones it found (a run cut
	// short may have written those without reaching Redis), versioned
	// like the processor's writes. A board is whole in Redis when the
	// file is in, however far the processor got.
	Boards Sync
	// Jobs catch the touched boards up when Redis or a count is found
	// short: the board rebuilt and its members recounted in one pass.
	Jobs  *Jobs
	Clock clock.Clock
}

var _ imports.Importer = (*Importer)(nil)

// Name implements imports.Importer.
func (*Importer) Name() string { return "leaderboards" }

// Types implements imports.Importer.
func (*Importer) Types() []string { return []string{LineScore} }

// scoreLine is a line that passed validation.
type scoreLine struct {
	no     int64
	d      Definition
	period string
	m      Match
}

func (l scoreLine) ref() ScoreRef { return ScoreRef{l.d.ID, l.period, l.m.PlayerID} }

// Import implements imports.Importer: the chunk's current scores,
// recorded matches and bans are read at once, every line applied in
// memory in file order, and the new state written at once.
func (im *Importer) Import(ctx context.Context, b imports.Batch) ([]imports.Rejection, []string, error) {
	lines, rejected, err := im.decode(ctx, b)
	if err != nil {
		return nil, nil, err
	}
	if len(lines) == 0 {
		return rejected, nil, nil
	}
	var refs []ScoreRef
	var matches []MatchRef
	var players []string
	groups := map[ScoreRef][]scoreLine{}
	for _, l := range lines {
		ref := l.ref()
		if _, ok := groups[ref]; !ok {
			refs = append(refs, ref)
			players = append(players, l.m.PlayerID)
		}
		groups[ref] = append(groups[ref], l)
		matches = append(matches, MatchRef{l.d.ID, l.m.PlayerID, l.m.MatchID})
	}
	held, err := im.Scores.Held(ctx, refs, matches, players)
	if err != nil {
		return nil, nil, err
	}
	now := clock.Now(im.Clock).UTC().Truncate(time.Millisecond)
	orders := map[string]Order{}
	members := map[BoardPeriod]int64{}
	var scores []Imported
	var recorded []Recorded
	var touched []string
	// named is every score the chunk leaves on a board, by board period:
	// the ones it found (replaced below by those it changes).
	named := map[BoardPeriod]map[string]Score{}
	for _, ref := range refs {
		group := groups[ref]
		d := group[0].d
		// Named, changed or not: a run cut short may have written it.
		touched = append(touched, d.ID+"/"+ref.Period)
		if held.Banned[ref.Player] {
			for _, l := range group {
				rejected = append(rejected, imports.Rejection{Line: l.no, Reason: fmt.Sprintf("player %s is banned from leaderboards", ref.Player)})
			}
			continue
		}
		bp := BoardPeriod{d.ID, ref.Period}
		if held.Closed[bp] {
			for _, l := range group {
				rejected = append(rejected, imports.Rejection{Line: l.no, Reason: fmt.Sprintf("period %s of leaderboard %s is closed: its final standings are archived", ref.Period, d.ID)})
			}
			continue
		}
		if named[bp] == nil {
			named[bp] = map[string]Score{}
		}
		var cur *Score
		if sc, ok := held.Scores[ref]; ok {
			cur = &sc
			named[bp][ref.Player] = sc
		}
		out, refused := applyGroup(d, cur, group, held.Recorded, now)
		rejected = append(rejected, refused...)
		recorded = append(recorded, out.recorded...)
		if out.changes == 0 {
			continue
		}
		orders[d.ID] = d.Order
		scores = append(scores, Imported{Score: out.score, Previous: cur, Changes: out.changes})
		if cur == nil {
			members[bp]++
		}
	}
	written, err := im.Scores.Import(ctx, ImportChunk{Job: b.Job, Line: b.Lines[0].No}, orders, scores, members, recorded)
	if err != nil {
		return nil, nil, err
	}
	for _, sc := range written {
		named[BoardPeriod{sc.Board, sc.Period}][sc.PlayerID] = sc
	}
	if err := im.mirror(ctx, lines, named); err != nil {
		return nil, nil, err
	}
	return rejected, touched, nil
}

// mirror writes a chunk's scores to the Redis boards, one call per board
// period. A chunk whose scores do not reach Redis fails, and is applied
// again: its scores, in DynamoDB by then, are found and written again.
func (im *Importer) mirror(ctx context.Context, lines []scoreLine, named map[BoardPeriod]map[string]Score) error {
	defs := map[string]Definition{}
	for _, l := range lines {
		defs[l.d.ID] = l.d
	}
	for bp, byPlayer := range named {
		if len(byPlayer) == 0 {
			continue
		}
		scores := slices.Collect(maps.Values(byPlayer))
		if err := im.Boards.Apply(ctx, defs[bp.Board], bp.Period, scores); err != nil {
			return fmt.Errorf("import scores of %s#%s to redis: %w", bp.Board, bp.Period, err)
		}
	}
	return nil
}

// applied is what a group of lines (one player's score in one board
// period) came to: the score, how many lines changed it, and the matches
// to record.
type applied struct {
	score    Score
	changes  int64
	recorded []Recorded
}

// applyGroup applies one player's lines in file order on top of cur, as
// the submit path would one after the other: a recorded match (or one
// repeated in the group) applies nothing; a line the policy refuses
// (a total beyond ±2^53) is rejected.
//
// One case is the import's own: cur was written by this very chunk in a
// run cut short before all its matches were recorded (the matches are
// written after the scores). Its last match is then one of the group's:
// the whole group is in the score already, and only the matches not yet
// recorded are. (A file that repeats, in the same chunk as new lines for
// the same score, the match id that last changed it is read the same
// way: its new lines are skipped. Match ids are meant to be unique.)
func applyGroup(d Definition, cur *Score, group []scoreLine, recorded map[MatchRef]bool, now time.Time) (applied, []imports.Rejection) {
	var out applied
	var rejected []imports.Rejection
	record := func(l scoreLine, after int64) {
		out.recorded = append(out.recorded, Recorded{
			Submission: Submission{Board: d.ID, Period: l.period, Match: l.m}, Applied: after, RecordedAt: now,
		})
	}
	if cur != nil && slices.ContainsFunc(group, func(l scoreLine) bool { return l.m.MatchID == cur.LastMatchID }) {
		for _, l := range group {
			if !recorded[MatchRef{d.ID, l.m.PlayerID, l.m.MatchID}] {
				record(l, cur.Score)
			}
		}
		return out, nil
	}
	for _, l := range group {
		ref := MatchRef{d.ID, l.m.PlayerID, l.m.MatchID}
		if recorded[ref] {
			continue
		}
		next, changed, err := Apply(d, cur, l.m)
		if err != nil {
			rejected = append(rejected, imports.Rejection{Line: l.no, Reason: errMessage(err)})
			continue
		}
		// A match repeated further on (in this group or, as matches are
		// recorded per board and player, in another period) applies
		// nothing.
		recorded[ref] = true
		if changed {
			next.Board, next.Period, next.UpdatedAt = d.ID, l.period, now
			next.ReachedAt = truncMillis(next.ReachedAt)
			out.score, out.changes = next, out.changes+1
			cur = &out.score
		}
		record(l, cur.Score)
	}
	return out, rejected
}

// decode validates a batch's lines as the submit route validates a
// request, and reads the boards they name. A line that would be refused
// there is refused here.
func (im *Importer) decode(ctx context.Context, b imports.Batch) ([]scoreLine, []imports.Rejection, error) {
	defs := map[string]*Definition{}
	var out []scoreLine
	var rejected []imports.Rejection
	for _, raw := range b.Lines {
		reject := func(reason string) { rejected = append(rejected, imports.Rejection{Line: raw.No, Reason: reason}) }
		var in ScoreLine
		if err := api.DecodeJSON(raw.Raw, &in); err != nil {
			reject(errMessage(err))
			continue
		}
		var f errs.Fields
		switch {
		case in.LeaderboardID == nil:
			f.Add("leaderboard_id", "is required")
		default:
			api.CheckID(&f, "leaderboard_id", *in.LeaderboardID)
		}
		switch {
		case in.PlayerID == nil:
			f.Add("player_id", "is required")
		default:
			api.CheckID(&f, "player_id", *in.PlayerID)
		}
		if in.Score == nil {
			f.Add("score", "is required")
		} else if *in.Score > MaxScore || *in.Score < -MaxScore {
			f.Add("score", "must be an integer within ±2^53")
		}
		if in.MatchID != "" {
			api.CheckID(&f, "match_id", in.MatchID)
		}
		if in.ReachedAt != nil && (in.ReachedAt.Before(time.Unix(0, 0)) || in.ReachedAt.After(b.At.Add(24*time.Hour))) {
			f.Add("reached_at", "must be after 1970 and not in the future")
		}
		if err := f.Err(); err != nil {
			reject(errMessage(err))
			continue
		}
		d, ok := defs[*in.LeaderboardID]
		if !ok {
			got, err := im.Defs.Get(ctx, *in.LeaderboardID)
			switch {
			case errs.Is(err, errs.NotFound):
			case err != nil:
				return nil, nil, err
			default:
				d = &got
			}
			defs[*in.LeaderboardID] = d
		}
		if d == nil {
			reject(fmt.Sprintf("leaderboard_id: no leaderboard %s", *in.LeaderboardID))
			continue
		}
		l, reason := im.line(*d, in, raw, b.At)
		if reason != "" {
			reject(reason)
			continue
		}
		out = append(out, l)
	}
	return out, rejected, nil
}

// line makes a match of a valid line for board d, or says why it cannot
// be applied there.
func (im *Importer) line(d Definition, in ScoreLine, raw imports.Line, at time.Time) (scoreLine, string) {
	switch {
	case d.Status != Active:
		return scoreLine{}, fmt.Sprintf("leaderboard %s is %s and accepts no scores", d.ID, d.Status)
	case d.Regional:
		// A regional score also goes to the view of the player's region,
		// read from their profile as it is applied: submit those through
		// the API.
		return scoreLine{}, fmt.Sprintf("leaderboard %s is regional: its scores are not imported", d.ID)
	}
	m := Match{PlayerID: *in.PlayerID, MatchID: in.MatchID, Score: *in.Score, OccurredAt: at}
	if m.MatchID == "" {
		m.MatchID = raw.ID
	}
	if in.ReachedAt != nil {
		m.OccurredAt = *in.ReachedAt
	}
	m.OccurredAt = truncMillis(m.OccurredAt)
	period := d.PeriodAt(m.OccurredAt)
	if in.Period != "" {
		if err := d.CheckPeriod(in.Period); err != nil {
			return scoreLine{}, errMessage(err)
		}
		if in.Period != period {
			if in.ReachedAt != nil {
				return scoreLine{}, fmt.Sprintf("period: %s is not the period of reached_at (%s)", in.Period, period)
			}
			return scoreLine{}, fmt.Sprintf("period: %s is not the current period (%s): give reached_at within it", in.Period, period)
		}
	}
	return scoreLine{no: raw.No, d: d, period: period, m: m}, ""
}

// errMessage is what a rejected line's example says of err.
func errMessage(err error) string {
	if e, ok := err.(*errs.Error); ok {
		return e.Detail
	}
	return err.Error()
}

// CatchUp implements imports.Importer. Each chunk counted its new
// members once and wrote its scores to Redis, so a board period the
// import named is caught up when Redis holds as many players as its
// member count says: two reads, not a read of every score. One where they
// differ (Redis lost data meanwhile, say) is rebuilt in one pass over its
// scores that also recounts its members. The histograms are the
// processor's, from the stream, as for submissions.
func (im *Importer) CatchUp(ctx context.Context, touched []string, w *jobs.Work) error {
	for _, t := range touched {
		board, period, _ := strings.Cut(t, "/")
		bp := BoardPeriod{board, period}
		if err := im.Scores.ForgetImport(ctx, bp, w.Job); err != nil {
			return err
		}
		d, err := im.Defs.Get(ctx, board)
		if errs.Is(err, errs.NotFound) {
			continue // deleted since
		}
		if err != nil {
			return err
		}
		if err := im.Jobs.makeWhole(ctx, d, period, w); err != nil {
			return err
		}
	}
	return nil
}
