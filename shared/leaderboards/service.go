package leaderboards

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/errs"
	"github.com/rallyhq/rally/shared/freshness"
	"github.com/rallyhq/rally/shared/hotcache"
	"github.com/rallyhq/rally/shared/obs"
)

// Service applies the leaderboard rules over the stores and the cache.
type Service struct {
	Defs    Definitions
	Scores  Scores
	Players Players
	Cache   Cache
	Clock   clock.Clock
	Log     *slog.Logger
	// Metrics counts the reads the caches served (the hot caches, Redis)
	// and those that fell through to DynamoDB, which are degraded.
	Metrics *obs.Metrics

	// Archive holds the final standings of closed periods, which reads of
	// them are served from; nil when none are kept.
	Archive Archive

	// Freshness says how fresh reads from Redis are: as of the newest
	// change the leaderboard processor applied.
	Freshness freshness.Reads

	// Hot boards: top windows and much-viewed ranks are reused for a
	// moment, and concurrent misses share one Redis call.
	tops    *hotcache.Cache[Top]
	ranks   *hotcache.Cache[Standing]
	friends *hotcache.Cache[Standing]
	defs    *hotcache.Cache[Definition]

	// heads are the archive heads this process has read: a head, once
	// written, never changes.
	heads sync.Map
	// headsKept counts them, up to maxHeads (then the map starts over).
	headsKept atomic.Int64
}

// HotFor is how long a read result is reused in process.
const HotFor = 250 * time.Millisecond

// NewService returns a service with its hot caches.
func NewService(defs Definitions, scores Scores, players Players, cache Cache, c clock.Clock, log *slog.Logger) *Service {
	return &Service{
		Defs: defs, Scores: scores, Players: players, Cache: cache, Clock: c, Log: log,
		tops:    hotcache.New[Top](HotFor),
		ranks:   hotcache.New[Standing](HotFor),
		friends: hotcache.New[Standing](HotFor),
		defs:    hotcache.New[Definition](time.Second),
	}
}

// Board is a definition with what a reader sees of it now.
type Board struct {
	Definition
	CurrentPeriod string
	Total         int64
	Degraded      bool
}

// Top is a top-N read.
type Top struct {
	Period   string
	Entries  []Entry
	Names    map[string]string
	Total    int64
	AsOf     time.Time
	Degraded bool
}

// Standing is a player's place on a board or among friends.
type Standing struct {
	Period     string
	Self       Entry
	Total      int64
	Percentile float64
	Neighbors  []Entry
	AsOf       time.Time
	Degraded   bool
	// Approximate is set when, without Redis, a big board's rank was
	// estimated: the true rank lies within Self.Rank ± RankError.
	Approximate bool
	RankError   int64
}

// Result is the outcome of a submission as the game server sees it.
type Result struct {
	Submitted
	Period string
	// Rank is the player's rank after the submission, when Redis could
	// tell it.
	Rank *int
}

// PutDefinition creates or updates a board.
func (s *Service) PutDefinition(ctx context.Context, d Definition) (Definition, bool, error) {
	d.UpdatedAt = s.Clock.Now()
	out, created, err := s.Defs.Put(ctx, d)
	if err == nil {
		s.defs.Drop(d.ID)
	}
	return out, created, err
}

// List returns a page of the definitions f selects, after the board
// named after; next names where the following page starts ("" at the
// end).
func (s *Service) List(ctx context.Context, f Filter, after string, limit int) (defs []Definition, next string, err error) {
	return s.Defs.Page(ctx, f, after, limit)
}

// definition reads a board's definition, reusing it for a second.
func (s *Service) definition(ctx context.Context, id string) (Definition, error) {
	d, _, err := s.defs.Get(ctx, id, func(ctx context.Context) (Definition, error) { return s.Defs.Get(ctx, id) })
	return d, err
}

// Period resolves the period a reader asks for ("" means the current one).
func (s *Service) period(d Definition, asked string) (string, error) {
	if asked == "" {
		return d.PeriodAt(s.Clock.Now()), nil
	}
	return asked, d.CheckPeriod(asked)
}

// read resolves what a read asks for: the board, or its view of region,
// and the period (resolved in place).
func (s *Service) read(ctx context.Context, id, region string, period *string) (Definition, error) {
	d, err := s.definition(ctx, id)
	if err != nil {
		return Definition{}, err
	}
	if *period, err = s.period(d, *period); err != nil {
		return Definition{}, err
	}
	return regionView(d, region)
}

// Board returns a definition with its current period and size: the
// size of its view of region, when one is given.
func (s *Service) Board(ctx context.Context, id, region string) (Board, error) {
	d, err := s.definition(ctx, id)
	if err != nil {
		return Board{}, err
	}
	b := Board{Definition: d, CurrentPeriod: d.PeriodAt(s.Clock.Now())}
	if d, err = regionView(d, region); err != nil {
		return Board{}, err
	}
	total, err := s.Cache.Total(ctx, d, b.CurrentPeriod)
	if err != nil || total == 0 {
		s.Metrics.CacheReads(0, 1)
		durable, derr := s.Scores.Members(ctx, d.ID, b.CurrentPeriod)
		if derr != nil {
			return Board{}, derr
		}
		b.Degraded = err != nil || durable != total
		total = durable
	} else {
		s.Metrics.CacheReads(1, 0)
	}
	b.Total = total
	return b, nil
}

// countRead counts one read of a board's entries: served by a cache (the
// hot cache, Redis) or, degraded, by DynamoDB.
func (s *Service) countRead(degraded bool) {
	if degraded {
		s.Metrics.CacheReads(0, 1)
	} else {
		s.Metrics.CacheReads(1, 0)
	}
}

// Submit applies a match to a board: recorded exactly once, applied under
// the board's policy, then written to Redis so the player sees their rank.
// On a regional board the score also goes to the view of the player's
// region as their profile says it now.
func (s *Service) Submit(ctx context.Context, boardID string, m Match) (Result, error) {
	// A match past the replay horizon is refused before anything is read.
	now := s.Clock.Now()
	if m.OccurredAt.IsZero() {
		m.OccurredAt = now
	}
	m.OccurredAt = truncMillis(m.OccurredAt)
	if now.Sub(m.OccurredAt) > ReplayHorizon {
		return Result{}, errs.TooOld.New("the match occurred on %s: a match id is kept %d days, so a match that old is refused rather than risk counting it twice",
			m.OccurredAt.UTC().Format(time.DateOnly), int(EventRetention.Hours()/24))
	}
	d, err := s.Defs.Get(ctx, boardID) // fresh: a FROZEN board refuses at once
	if err != nil {
		return Result{}, err
	}
	if d.Status != Active {
		return Result{}, errs.New(errs.Conflict, "leaderboard %s is %s and accepts no scores", d.ID, d.Status)
	}
	m.Region = ""
	if d.Regional {
		profiles, err := s.Players.Profiles(ctx, []string{m.PlayerID})
		if err != nil {
			return Result{}, err
		}
		m.Region = profiles[m.PlayerID].Region
	}
	period := d.PeriodAt(m.OccurredAt)
	m.Late = period != d.PeriodAt(now)
	sub, err := s.Scores.Submit(ctx, d, period, m, func(cur *Score) (Score, bool, error) {
		next, changed, err := Apply(d, cur, m)
		next.Board, next.Period, next.UpdatedAt = d.ID, period, now
		return next, changed, err
	})
	if err != nil {
		return Result{}, err
	}
	res := Result{Submitted: sub, Period: period}
	if sub.Current.Period != "" {
		// A retried match reports the period it was applied in.
		res.Period = sub.Current.Period
	}
	trusted := s.Cache.Trusted(ctx) == nil
	if sub.Applied && sub.Changed {
		rank, _, err := s.Cache.Upsert(ctx, d, sub.Current)
		if err != nil {
			s.Log.WarnContext(ctx, "score not written to redis; the stream will", "board", d.ID, "error", err.Error())
		} else if trusted {
			res.Rank = &rank
		}
		if r := sub.Current.Region; d.Regional && r != "" {
			// The view the player is in now, at once; the view they left
			// drops them when the stream brings its deletion.
			v := sub.Current
			v.Board, v.Region = ViewID(d.ID, r), ""
			if _, _, err := s.Cache.Upsert(ctx, d.View(r), v); err != nil {
				s.Log.WarnContext(ctx, "regional score not written to redis; the stream will", "board", d.ID, "error", err.Error())
			}
		}
		return res, nil
	}
	if trusted {
		if self, _, _, _, err := s.Cache.Around(ctx, d, res.Period, m.PlayerID, 0); err == nil {
			res.Rank = &self.Rank
		}
	}
	return res, nil
}

// RemovePlayer takes a player's score (a cheater's) off a board: in one
// period, or in every period when period is "", with its regional view.
// Redis forgets it at once, so everyone ranked below moves up; the
// matches stay recorded, so resending one does not bring it back.
func (s *Service) RemovePlayer(ctx context.Context, id, player, period string) error {
	d, err := s.Defs.Get(ctx, id)
	if err != nil {
		return err
	}
	if period != "" {
		if err := d.CheckPeriod(period); err != nil {
			return err
		}
	}
	removed, err := s.Scores.RemovePlayer(ctx, d, player, period)
	if err != nil {
		return err
	}
	defs := map[string]Definition{d.ID: d}
	for _, bp := range removed {
		s.mirror(ctx, defs, bp.Board, bp.Period, Score{PlayerID: player, Removed: true})
	}
	return nil
}

// Ban hides a player from every board and refuses their submissions (403)
// until Unban; their scores are kept. Redis forgets them at once, so
// everyone ranked below moves up.
func (s *Service) Ban(ctx context.Context, player string) (time.Time, error) {
	defs, err := s.boards(ctx)
	if err != nil {
		return time.Time{}, err
	}
	since, hidden, err := s.Scores.Ban(ctx, player, slices.Collect(maps.Keys(defs)))
	if err != nil {
		return time.Time{}, err
	}
	for _, bp := range hidden {
		s.mirror(ctx, defs, bp.Board, bp.Period, Score{PlayerID: player, Removed: true})
	}
	return since, nil
}

// Unban lifts a ban: the player's scores are back where they rank.
func (s *Service) Unban(ctx context.Context, player string) error {
	defs, err := s.boards(ctx)
	if err != nil {
		return err
	}
	restored, err := s.Scores.Unban(ctx, player, slices.Collect(maps.Keys(defs)), func(board string) Order { return defs[board].Order })
	if err != nil {
		return err
	}
	for _, sc := range restored {
		s.mirror(ctx, defs, sc.Board, sc.Period, sc)
	}
	return nil
}

// boards reads every definition by id.
func (s *Service) boards(ctx context.Context) (map[string]Definition, error) {
	all, err := s.Defs.List(ctx)
	if err != nil {
		return nil, err
	}
	defs := make(map[string]Definition, len(all))
	for _, d := range all {
		defs[d.ID] = d
	}
	return defs, nil
}

// mirror writes a change of one board period (or view) to Redis at once;
// the stream brings it there too when Redis cannot take it now.
func (s *Service) mirror(ctx context.Context, defs map[string]Definition, board, period string, sc Score) {
	d, ok := resolve(defs, board)
	if !ok {
		return
	}
	if err := s.Cache.Apply(ctx, d, period, []Score{sc}); err != nil {
		s.Log.WarnContext(ctx, "board change not written to redis; the stream will", "board", board, "period", period, "error", err.Error())
	}
}

// Top returns n entries of a period from rank from (1-based) on: the best
// n from 1, a deeper page past it; of a region's view when region is
// given. n is clamped to the board's MaxN; how deep a page starts is not.
func (s *Service) Top(ctx context.Context, id, region, period string, from, n int) (Top, error) {
	d, err := s.read(ctx, id, region, &period)
	if err != nil {
		return Top{}, err
	}
	n = min(n, d.MaxN)
	t, _, err := s.tops.Get(ctx, fmt.Sprintf("%s|%s|%d|%d", d.ID, period, from, n), func(ctx context.Context) (Top, error) { return s.top(ctx, d, period, from, n) })
	if err == nil {
		s.countRead(t.Degraded)
	}
	return t, err
}

// A read from Redis is as of the leaderboard processor's newest applied
// change. A read served from the Scores table itself (Redis down, or
// missing the board) is as of the read: Scores is the truth the processor
// mirrors, it lags nothing (its score-ordered index follows within a
// moment), so no processor watermark applies to it.
func (s *Service) top(ctx context.Context, d Definition, period string, from, n int) (Top, error) {
	if h, archived, err := s.archived(ctx, d, period); err != nil || archived {
		if err != nil {
			return Top{}, err
		}
		return s.archivedTop(ctx, d, period, h, from, n)
	}
	t := Top{Period: period}
	entries, total, asOf, err := s.Cache.Top(ctx, d, period, from, n)
	members := int64(-1) // not read yet
	if err == nil && total == 0 {
		// An empty board in Redis may be one Redis lost: ask DynamoDB.
		if m, merr := s.Scores.Members(ctx, d.ID, period); merr == nil && m > 0 {
			members, err = m, errMissing
		}
	}
	if err != nil {
		t.Degraded, t.AsOf = true, s.Clock.Now()
		if members < 0 {
			if members, err = s.Scores.Members(ctx, d.ID, period); err != nil {
				return Top{}, err
			}
		}
		// The index is read down to the page's end: a page past the last
		// rank reads nothing more.
		total, entries = members, []Entry{}
		if int64(from-1) < total {
			if entries, err = s.Scores.Top(ctx, d, period, from, n); err != nil {
				return Top{}, err
			}
		}
	} else {
		t.AsOf = s.Freshness.AsOf(ctx, asOf)
	}
	t.Entries, t.Total = entries, total
	t.Names = s.names(ctx, entries)
	return t, nil
}

var (
	errMissing  = errors.New("board missing from redis")
	errArchived = errors.New("period archived")
)

// names looks up display names; without them a board still answers.
func (s *Service) names(ctx context.Context, entries []Entry) map[string]string {
	if len(entries) == 0 {
		return nil
	}
	ids := make([]string, len(entries))
	for i, e := range entries {
		ids[i] = e.PlayerID
	}
	profiles, err := s.Players.Profiles(ctx, ids)
	if err != nil {
		s.Log.WarnContext(ctx, "display names unavailable", "error", err.Error())
		return nil
	}
	names := make(map[string]string, len(profiles))
	for id, p := range profiles {
		if p.DisplayName != "" {
			names[id] = p.DisplayName
		}
	}
	return names
}

// Rank returns a player's rank, percentile and k neighbours on each side,
// on the board or its view of region.
func (s *Service) Rank(ctx context.Context, id, region, period, player string, k int) (Standing, error) {
	d, err := s.read(ctx, id, region, &period)
	if err != nil {
		return Standing{}, err
	}
	st, _, err := s.ranks.Get(ctx, fmt.Sprintf("%s|%s|%s|%d", d.ID, period, player, k), func(ctx context.Context) (Standing, error) {
		return s.rank(ctx, d, period, player, k)
	})
	if err == nil {
		s.countRead(st.Degraded)
	}
	return st, err
}

// As of: as for top.
func (s *Service) rank(ctx context.Context, d Definition, period, player string, k int) (Standing, error) {
	if h, archived, err := s.archived(ctx, d, period); err != nil || archived {
		if err != nil {
			return Standing{}, err
		}
		return s.archivedRank(ctx, d, period, h, player, k)
	}
	st := Standing{Period: period}
	self, window, total, asOf, err := s.Cache.Around(ctx, d, period, player, k)
	if errors.Is(err, ErrNotRanked) {
		// Unranked in Redis: truly, or a board Redis lost?
		if got, gerr := s.Scores.Get(ctx, d.ID, period, []string{player}); gerr == nil && len(got) == 0 {
			return Standing{}, notRanked(player, d.ID, period)
		}
		err = errMissing
	}
	if err != nil {
		st.Degraded, st.AsOf = true, s.Clock.Now()
		pl, err := s.Scores.Around(ctx, d, period, player, k)
		if errors.Is(err, ErrNotRanked) {
			return Standing{}, notRanked(player, d.ID, period)
		}
		if err != nil {
			return Standing{}, err
		}
		self, window, total = pl.Self, pl.Window, pl.Total
		st.Approximate, st.RankError = pl.Approximate, pl.RankError
	} else {
		st.AsOf = s.Freshness.AsOf(ctx, asOf)
	}
	st.Self, st.Neighbors, st.Total = self, window, total
	st.Percentile = Percentile(self.Rank, total)
	return st, nil
}

func notRanked(player, board, period string) error {
	return errs.New(errs.NotFound, "player %s has no score on %s in period %s", player, board, period)
}

// FriendsRank ranks a player among their friends who have a score, on
// the board or its view of region.
func (s *Service) FriendsRank(ctx context.Context, id, region, period, player string, k int) (Standing, error) {
	d, err := s.read(ctx, id, region, &period)
	if err != nil {
		return Standing{}, err
	}
	st, _, err := s.friends.Get(ctx, fmt.Sprintf("%s|%s|%s|%d", d.ID, period, player, k), func(ctx context.Context) (Standing, error) {
		return s.friendsRank(ctx, d, period, player, k)
	})
	if err == nil {
		s.countRead(st.Degraded)
	}
	return st, err
}

func (s *Service) friendsRank(ctx context.Context, d Definition, period, player string, k int) (Standing, error) {
	friends, err := s.Players.Friends(ctx, player)
	if err != nil {
		return Standing{}, err
	}
	ids := append([]string{player}, friends...)
	_, archived, err := s.archived(ctx, d, period)
	if err != nil {
		return Standing{}, err
	}
	// As of: as for top. An archived period ranks the friends' scores,
	// which it closed with, without Redis.
	st := Standing{Period: period}
	var ranked []Entry
	var asOf time.Time
	if archived {
		err = errArchived
	} else {
		ranked, asOf, err = s.Cache.Among(ctx, d, period, ids)
	}
	if err == nil && !contains(ranked, player) {
		// The player is not in Redis: unranked, or a board Redis lost.
		if got, gerr := s.Scores.Get(ctx, d.ID, period, []string{player}); gerr == nil && len(got) == 0 {
			return Standing{}, notRanked(player, d.ID, period)
		}
		err = errMissing
	}
	if err != nil {
		st.Degraded, st.AsOf = !archived, s.Clock.Now()
		if archived {
			st.AsOf = d.PeriodEnd(period)
		}
		scores, err := s.Scores.Get(ctx, d.ID, period, ids)
		if err != nil {
			return Standing{}, err
		}
		ranked = make([]Entry, len(scores))
		for i, sc := range scores {
			ranked[i] = entryOf(sc)
		}
		Rank(d.Order, d.TieBreak, ranked, 0, 0)
		if !contains(ranked, player) {
			return Standing{}, notRanked(player, d.ID, period)
		}
	} else {
		st.AsOf = s.Freshness.AsOf(ctx, asOf)
	}
	at := 0
	for i, e := range ranked {
		if e.PlayerID == player {
			at = i
		}
	}
	st.Self = ranked[at]
	st.Total = int64(len(ranked))
	st.Percentile = Percentile(st.Self.Rank, st.Total)
	st.Neighbors = ranked[max(0, at-k):min(len(ranked), at+k+1)]
	return st, nil
}

func contains(entries []Entry, player string) bool {
	for _, e := range entries {
		if e.PlayerID == player {
			return true
		}
	}
	return false
}
