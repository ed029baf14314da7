package leaderboards

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/jobs"
)

// JobCache is what the jobs use of the Redis boards: rebuilds that may
// span invocations, and what Redis holds, trusted or not.
type JobCache interface {
	BeginRebuild(ctx context.Context, d Definition, period string, expected int64) (Rebuilding, error)
	ResumeRebuild(d Definition, period, state string) (Rebuilding, error)
	Stored(ctx context.Context, d Definition, period string, players []string) ([]Entry, error)
	Size(ctx context.Context, d Definition, period string) (int64, error)
	// Rebuild reloads a board period in one go from scan.
	Rebuild(ctx context.Context, d Definition, period string, expected int64, scan func(fn func([]Score) error) error) error
	// Superseded tells whether err says another rebuild took the board.
	Superseded(err error) bool
	// Rebalance makes at most one move of a partitioned board period's
	// partition bounds and reports whether it made one.
	Rebalance(ctx context.Context, d Definition, period string) (bool, error)
}

// Rebuilding is one board period's rebuild under way.
type Rebuilding interface {
	Add(ctx context.Context, scores ...Score) error
	// Save sends what was added and returns the state to resume from.
	Save(ctx context.Context) (string, error)
	Commit(ctx context.Context) error
	Abort(ctx context.Context) error
}

// JobScores is what the jobs read and recompute of Scores.
type JobScores interface {
	Members(ctx context.Context, board, period string) (int64, error)
	ScanPage(ctx context.Context, board, period, after string) ([]Score, string, error)
	Scan(ctx context.Context, board, period string, fn func([]Score) error) error
	CountScores(ctx context.Context, board, period string) (int64, error)
	SetMembers(ctx context.Context, board, period string, n int64) error
	// Views lists the regions with a view in a regional board's period;
	// AddViews lists more.
	Views(ctx context.Context, board, period string) ([]string, error)
	AddViews(ctx context.Context, board, period string, regions []string) error
	// HistogramTotal is how many scores a board period's histogram counts
	// (kept is false when no histograms are kept); RecomputeHistogram rebuilds the histogram from the scores and says
	// how many of its values were wrong.
	HistogramTotal(ctx context.Context, board, period string) (total int64, kept bool, err error)
	RecomputeHistogram(ctx context.Context, board, period string) (int64, error)
}

// Jobs are the leaderboards' tasks: rebuild the Redis boards, reconcile
// them with Scores, and recompute each period's member count.
type Jobs struct {
	Defs   Definitions
	Scores JobScores
	Cache  JobCache
	Clock  clock.Clock
}

// Tasks registers the leaderboard target of every kind.
func (j *Jobs) Tasks() jobs.Tasks {
	return jobs.Tasks{
		{Kind: jobs.Rebuild, Target: jobs.Leaderboard}:   jobs.Named("leaderboards-rebuild", j.run(j.rebuild)),
		{Kind: jobs.Reconcile, Target: jobs.Leaderboard}: jobs.Named("leaderboards-reconcile", j.run(j.reconcile)),
		{Kind: jobs.Recompute, Target: jobs.Leaderboard}: jobs.Named("leaderboards-recompute", j.run(j.recompute)),
	}
}

// boardCursor is a leaderboard job's position: the board periods it
// covers (fixed when it starts), the one under way, the last player
// read in it and, for a rebuild, the loader's state.
type boardCursor struct {
	Plan  []BoardPeriod `json:"plan"`
	I     int           `json:"i"`
	After string        `json:"after,omitempty"`
	Load  string        `json:"load,omitempty"`
	// Read counts the scores read in the board period under way; Drifted
	// the values a reconcile found drifted in it.
	Read    int64 `json:"read,omitempty"`
	Drifted int64 `json:"drifted,omitempty"`
}

// step works on one board period from c; it returns with c at the next
// one when done with it.
type step func(ctx context.Context, d Definition, c *boardCursor, w *jobs.Work) error

// run makes a task of a step: it walks the board periods of the spec.
func (j *Jobs) run(st step) jobs.RunFunc {
	return func(ctx context.Context, spec jobs.Spec, cursor string, w *jobs.Work) (string, bool, error) {
		return j.walk(ctx, spec, cursor, w, st)
	}
}

func (j *Jobs) walk(ctx context.Context, spec jobs.Spec, cursor string, w *jobs.Work, st step) (string, bool, error) {
	var c boardCursor
	if cursor == "" {
		plan, total, err := j.plan(ctx, spec)
		if err != nil {
			return "", false, err
		}
		c.Plan, w.Progress = plan, jobs.Progress{Total: total}
	} else if err := json.Unmarshal([]byte(cursor), &c); err != nil {
		return "", false, fmt.Errorf("leaderboard job cursor: %w", err)
	}
	defs := WithViews(j.Defs)
	for c.I < len(c.Plan) {
		bp := c.Plan[c.I]
		d, err := defs.Get(ctx, bp.Board)
		if err != nil {
			return "", false, err
		}
		if err := st(ctx, d, &c, w); err != nil {
			if outOfTime(ctx, err) {
				return encode(c), false, nil
			}
			return "", false, err
		}
	}
	return "", true, nil
}

func encode(c boardCursor) string {
	raw, _ := json.Marshal(c)
	return string(raw)
}

// plan lists the board periods a spec covers: the one named, or the
// current and previous period of one board or of every board; with each
// period of a regional board, its views.
func (j *Jobs) plan(ctx context.Context, spec jobs.Spec) ([]BoardPeriod, int64, error) {
	var defs []Definition
	if spec.ID != "" {
		d, err := j.Defs.Get(ctx, spec.ID)
		if err != nil {
			return nil, 0, err
		}
		defs = []Definition{d}
	} else {
		all, err := j.Defs.List(ctx)
		if err != nil {
			return nil, 0, err
		}
		defs = all
	}
	slices.SortFunc(defs, func(a, b Definition) int { return strings.Compare(a.ID, b.ID) })
	now := j.Clock.Now()
	var plan []BoardPeriod
	var total int64
	for _, d := range defs {
		periods := []string{spec.Period}
		if spec.Period == "" {
			periods = []string{d.PeriodAt(now)}
			if d.Reset != Never {
				periods = append(periods, d.PreviousPeriod(now))
			}
		}
		for _, p := range periods {
			bps := []BoardPeriod{{Board: d.ID, Period: p}}
			if d.Regional {
				regions, err := j.Scores.Views(ctx, d.ID, p)
				if err != nil {
					return nil, 0, err
				}
				for _, r := range regions {
					bps = append(bps, BoardPeriod{Board: ViewID(d.ID, r), Period: p})
				}
			}
			for _, bp := range bps {
				n, err := j.Scores.Members(ctx, bp.Board, bp.Period)
				if err != nil {
					return nil, 0, err
				}
				plan = append(plan, bp)
				total += n
			}
		}
	}
	return plan, total, nil
}

// errOutOfTime says a job step stopped short of its deadline: the next
// page would not have been read in time.
var errOutOfTime = errors.New("leaderboard job: the invocation's time is spent")

// outOfTime tells whether a step stopped for want of time (the job
// continues in the next invocation) rather than failed.
func outOfTime(ctx context.Context, err error) bool {
	return ctx.Err() != nil || errors.Is(err, errOutOfTime)
}

// pages reads a board period's scores from c.After, a page ahead of the
// caller (the next page is fetched while fn handles this one), until the
// last page or an error. Once fn took a page, c moves past it and then
// saved is called (a checkpoint), so a page is handled again only if fn
// did not finish it. A page that would not be read before ctx's deadline
// (by the time the last one took) is not begun: it returns errOutOfTime.
func (j *Jobs) pages(ctx context.Context, bp BoardPeriod, c *boardCursor, fn func([]Score) error, saved func() error) error {
	type page struct {
		scores []Score
		next   string
		took   time.Duration
		err    error
	}
	fetch := func(after string) <-chan page {
		ch := make(chan page, 1)
		go func() {
			start := time.Now()
			s, next, err := j.Scores.ScanPage(ctx, bp.Board, bp.Period, after)
			ch <- page{s, next, time.Since(start), err}
		}()
		return ch
	}
	fits := func(took time.Duration) bool {
		dl, ok := ctx.Deadline()
		return !ok || time.Until(dl) > took+took/2
	}
	pending := fetch(c.After)
	for {
		p := <-pending
		if p.err != nil {
			return p.err
		}
		more := p.next != "" && fits(p.took)
		if more {
			pending = fetch(p.next)
		}
		err := fn(p.scores)
		if err == nil {
			c.After, c.Read = p.next, c.Read+int64(len(p.scores))
			err = saved()
		}
		switch {
		case err == nil && p.next != "" && !more:
			err = errOutOfTime
		case err == nil && p.next != "":
			err = ctx.Err()
		}
		if err != nil || p.next == "" {
			if more {
				<-pending
			}
			return err
		}
	}
}

// next moves c to the next board period.
func (c *boardCursor) next() { *c = boardCursor{Plan: c.Plan, I: c.I + 1} }

// rebuild reloads a board period into Redis from Scores, checkpointing the
// loader so the next invocation continues it; the new content goes live
// at once when the last page is in.
func (j *Jobs) rebuild(ctx context.Context, d Definition, c *boardCursor, w *jobs.Work) error {
	bp := c.Plan[c.I]
	var l Rebuilding
	var err error
	if c.Load == "" {
		n, err := j.Scores.Members(ctx, bp.Board, bp.Period)
		if err != nil {
			return err
		}
		if l, err = j.Cache.BeginRebuild(ctx, d, bp.Period, n); err != nil {
			return err
		}
		c.After, c.Read = "", 0
	} else if l, err = j.Cache.ResumeRebuild(d, bp.Period, c.Load); err != nil {
		return err
	}
	err = j.pages(ctx, bp, c, func(scores []Score) error {
		if err := l.Add(ctx, scores...); err != nil {
			return err
		}
		w.Progress.Done += int64(len(scores))
		w.Findings.Checked += int64(len(scores))
		return nil
	}, func() error {
		if !w.Due() {
			return nil
		}
		state, err := l.Save(ctx)
		if err != nil {
			return err
		}
		c.Load = state
		return w.Checkpoint(ctx, encode(*c))
	})
	if err == nil {
		// The swap is short and must not stop half done (a commit cut
		// short cannot be resumed): it runs in the invocation's reserve.
		err = l.Commit(context.WithoutCancel(ctx))
	}
	switch {
	case err == nil:
		c.next()
		return nil
	case j.Cache.Superseded(err):
		// Another rebuild (or an erasure) took the board: start it over.
		w.Progress.Done -= c.Read
		w.Findings.Checked -= c.Read
		c.Load, c.After, c.Read = "", "", 0
		return nil
	case outOfTime(ctx, err):
		state, serr := l.Save(context.WithoutCancel(ctx))
		if serr != nil {
			return serr
		}
		c.Load = state
		return err
	}
	return err
}

// reconcile compares every score of a board period with what Redis holds
// and Redis's size with the scores', and rebuilds the board period when
// anything drifted.
func (j *Jobs) reconcile(ctx context.Context, d Definition, c *boardCursor, w *jobs.Work) error {
	bp := c.Plan[c.I]
	err := j.pages(ctx, bp, c, func(scores []Score) error {
		ids := make([]string, len(scores))
		for i, s := range scores {
			ids[i] = s.PlayerID
		}
		stored, err := j.Cache.Stored(ctx, d, bp.Period, ids)
		if err != nil {
			return err
		}
		held := make(map[string]Entry, len(stored))
		for _, e := range stored {
			held[e.PlayerID] = e
		}
		for _, s := range scores {
			w.Findings.Checked++
			e, ok := held[s.PlayerID]
			switch {
			case !ok:
				w.Findings.Found("board", fmt.Sprintf("%s#%s: %s missing from redis (score %d)", bp.Board, bp.Period, s.PlayerID, s.Score), false)
				c.Drifted++
			case e.Score != s.Score:
				w.Findings.Found("board", fmt.Sprintf("%s#%s: %s has %d in redis, %d in dynamodb", bp.Board, bp.Period, s.PlayerID, e.Score, s.Score), false)
				c.Drifted++
			}
		}
		w.Progress.Done += int64(len(scores))
		return nil
	}, func() error { return w.Checkpoint(ctx, encode(*c)) })
	if err != nil {
		return err
	}
	total, err := j.Cache.Size(ctx, d, bp.Period)
	if err != nil {
		return err
	}
	if total > c.Read {
		w.Findings.Found("board", fmt.Sprintf("%s#%s: redis holds %d players, dynamodb %d", bp.Board, bp.Period, total, c.Read), false)
		c.Drifted++
	}
	// The histogram: its total against the scores read (one query).
	counted, kept, err := j.Scores.HistogramTotal(ctx, bp.Board, bp.Period)
	if err != nil {
		return err
	}
	if kept && counted != c.Read {
		w.Findings.Found("histogram", fmt.Sprintf("%s#%s: the histogram counts %d players, dynamodb holds %d", bp.Board, bp.Period, counted, c.Read), false)
		if _, err := j.Scores.RecomputeHistogram(ctx, bp.Board, bp.Period); err != nil {
			return err
		}
		w.Findings.Repaired++
	}
	if c.Drifted > 0 {
		if err := j.rebuildWhole(ctx, d, bp.Period); err != nil {
			return err
		}
		w.Findings.Repaired += c.Drifted
	}
	if err := j.rebalance(ctx, d, bp.Period); err != nil {
		return err
	}
	c.next()
	return nil
}

// rebalance moves a partitioned board period's partition bounds until
// each holds about its share, and converts to partitions a board defined
// without them that outgrew one sorted set (a move or conversion cut
// short by the deadline resumes at the next run; see
// ranking.Engine.Rebalance).
func (j *Jobs) rebalance(ctx context.Context, d Definition, period string) error {
	limit := 4 * d.Partitions
	if d.Partitions == 0 {
		limit = 4 * MaxPartitions // a conversion, then its splits
	}
	for moves := 0; moves < limit; moves++ {
		moved, err := j.Cache.Rebalance(ctx, d, period)
		if err != nil || !moved {
			return err
		}
	}
	return nil
}

// rebuildWhole rebuilds one board period in one go (a reconcile's
// repair, a processor's refresh of a dirty one).
func (j *Jobs) rebuildWhole(ctx context.Context, d Definition, period string) error {
	n, err := j.Scores.Members(ctx, d.ID, period)
	if err != nil {
		return err
	}
	return j.Cache.Rebuild(ctx, d, period, n, func(fn func([]Score) error) error {
		return j.Scores.Scan(ctx, d.ID, period, fn)
	})
}

// makeWhole checks that Redis holds as many players of a board period as
// its member count says, and when it does not, rebuilds the board and
// recounts the members in one pass (rebuildCounting).
func (j *Jobs) makeWhole(ctx context.Context, d Definition, period string, w *jobs.Work) error {
	stored, err := j.Scores.Members(ctx, d.ID, period)
	if err != nil {
		return err
	}
	held, err := j.Cache.Size(ctx, d, period)
	if err != nil {
		return err
	}
	w.Findings.Checked++
	if held == stored {
		return nil
	}
	w.Findings.Found("board", fmt.Sprintf("%s#%s: redis holds %d players, the member count says %d", d.ID, period, held, stored), true)
	return j.rebuildCounting(ctx, d, period, stored, w)
}

// rebuildCounting rebuilds one board period in one go and rewrites its
// member count (stored, before) from the scores the rebuild read: one
// read of them for both.
func (j *Jobs) rebuildCounting(ctx context.Context, d Definition, period string, stored int64, w *jobs.Work) error {
	var counted int64
	err := j.Cache.Rebuild(ctx, d, period, stored, func(fn func([]Score) error) error {
		return j.Scores.Scan(ctx, d.ID, period, func(scores []Score) error {
			counted += int64(len(scores))
			return fn(scores)
		})
	})
	if err != nil {
		return err
	}
	if counted != stored {
		if err := j.Scores.SetMembers(ctx, d.ID, period, counted); err != nil {
			return err
		}
		w.Findings.Found("member_count", fmt.Sprintf("%s#%s: %d members stored, %d scores", d.ID, period, stored, counted), true)
	}
	return nil
}

// recompute counts a board period's scores and rewrites its member count
// (the board's total) when it differs. A regional board's period also
// lists again the views its scores are in, and recomputes theirs: the
// views the plan found are those the meta item still listed.
func (j *Jobs) recompute(ctx context.Context, d Definition, c *boardCursor, w *jobs.Work) error {
	bp := c.Plan[c.I]
	counted, err := j.recount(ctx, bp, w)
	if err != nil {
		return err
	}
	if _, _, view := SplitView(bp.Board); d.Regional && !view {
		regions := map[string]bool{}
		err := j.Scores.Scan(ctx, bp.Board, bp.Period, func(scores []Score) error {
			for _, s := range scores {
				if s.Region != "" {
					regions[s.Region] = true
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		listed := slices.Sorted(maps.Keys(regions))
		if err := j.Scores.AddViews(ctx, bp.Board, bp.Period, listed); err != nil {
			return err
		}
		for _, r := range listed {
			if _, err := j.recount(ctx, BoardPeriod{Board: ViewID(d.ID, r), Period: bp.Period}, w); err != nil {
				return err
			}
		}
	}
	w.Progress.Done += counted
	c.next()
	return w.Checkpoint(ctx, encode(*c))
}

// recount rewrites a board period's member count and its histogram from
// its scores when they differ, and returns the count.
func (j *Jobs) recount(ctx context.Context, bp BoardPeriod, w *jobs.Work) (int64, error) {
	counted, err := j.recountMembers(ctx, bp, w)
	if err != nil {
		return 0, err
	}
	rewritten, err := j.Scores.RecomputeHistogram(ctx, bp.Board, bp.Period)
	if err != nil {
		return 0, err
	}
	if rewritten > 0 {
		w.Findings.Found("histogram", fmt.Sprintf("%s#%s: %d histogram values rewritten", bp.Board, bp.Period, rewritten), true)
	}
	return counted, nil
}

// recountMembers rewrites a board period's member count from its scores
// when it differs, and returns the count.
func (j *Jobs) recountMembers(ctx context.Context, bp BoardPeriod, w *jobs.Work) (int64, error) {
	counted, err := j.Scores.CountScores(ctx, bp.Board, bp.Period)
	if err != nil {
		return 0, err
	}
	stored, err := j.Scores.Members(ctx, bp.Board, bp.Period)
	if err != nil {
		return 0, err
	}
	w.Findings.Checked++
	if counted != stored {
		if err := j.Scores.SetMembers(ctx, bp.Board, bp.Period, counted); err != nil {
			return 0, err
		}
		w.Findings.Found("member_count", fmt.Sprintf("%s#%s: %d members stored, %d scores", bp.Board, bp.Period, stored, counted), true)
	}
	return counted, nil
}
