// Package mirror keeps leaderboards in Redis through the ranking engine:
// one board per leaderboard period, written with the version DynamoDB gave
// each score (so the submit path, the stream and rebuilds may race in any
// order), and read in one round trip per query. Reads refuse to answer while
// the cache generation says Redis may be behind, so callers fall back to
// DynamoDB.
package mirror

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rallyhq/rally/shared/cachegen"
	freshmirror "github.com/rallyhq/rally/shared/freshness/mirror"
	"github.com/rallyhq/rally/shared/leaderboards"
	"github.com/rallyhq/rally/shared/ranking"
	"github.com/rallyhq/rally/shared/routes"
)

// Scope is the cache generation scope of leaderboards.
const Scope = cachegen.ScopeLeaderboards

// ErrStale means Redis cannot be trusted for leaderboards right now.
var ErrStale = errors.New("leaderboards mirror: redis may be behind dynamodb")

// Mirror is the Redis side of leaderboards.
type Mirror struct {
	Rank *ranking.Engine
	Gen  *cachegen.Tracker
	// PartitionAt is the size past which a board period defined without
	// partitions is converted to partitions (DefaultPartitionAt when 0).
	PartitionAt int64
	// Log hears a partitioned board's rebalance that failed (it resumes
	// at the next one); nil discards.
	Log *slog.Logger

	rebalanced sync.Map // board -> time.Time of its last rebalance here
}

// A partitioned board is rebalanced by the processor that writes it, at
// most every rebalanceEvery per process, for at most rebalanceBudget: a
// move cut short resumes from its checkpoint at the next one.
const (
	rebalanceEvery  = 30 * time.Second
	rebalanceBudget = 5 * time.Second
)

// New returns a mirror over rdb, trusted only while gen says so.
func New(rdb redis.UniversalClient, gen *cachegen.Tracker) *Mirror {
	return &Mirror{Rank: ranking.New(rdb), Gen: gen}
}

// DefaultPartitionAt is the size past which a board period defined
// without partitions becomes partitioned: a few hundred MB of one shard.
const DefaultPartitionAt = 5_000_000

// Board is the ranking-engine board of a leaderboard period. Every period
// has its own hash tag, so busy boards spread over the cluster. A board
// defined without partitions picks its own shape (ranking.Board's
// PartitionAt); only Rebalance acts on the threshold, which the Mirror
// sets.
func Board(d leaderboards.Definition, period string) ranking.Board {
	b := ranking.Board{Tag: "lb:" + d.ID + "#" + period, Name: "scores", Order: ranking.Desc, Ties: ranking.Earliest, Partitions: d.Partitions}
	if d.Partitions == 0 {
		b.PartitionAt = DefaultPartitionAt
	}
	if d.Order == leaderboards.Asc {
		b.Order = ranking.Asc
	}
	if d.TieBreak == leaderboards.Shared {
		b.Ties = ranking.Shared
	}
	return b
}

func item(s leaderboards.Score) ranking.Item {
	return ranking.Item{ID: s.PlayerID, Score: s.Score, ReachedAt: s.ReachedAt, Version: s.Version, Removed: s.Removed}
}

var _ leaderboards.Cache = (*Mirror)(nil)

func entry(e ranking.Entry) leaderboards.Entry {
	return leaderboards.Entry{Rank: e.Rank, PlayerID: e.ID, Score: e.Score, ReachedAt: e.ReachedAt}
}

func entries(es []ranking.Entry) []leaderboards.Entry {
	out := make([]leaderboards.Entry, len(es))
	for i, e := range es {
		out[i] = entry(e)
	}
	return out
}

// watermarkKey holds the leaderboard processor's watermark, which every
// board read fetches in its own round trip: their as_of.
var watermarkKey = freshmirror.Key(routes.LeaderboardProcessor.Function)

// newestChange reads a fetched watermark; zero when Redis had none.
func newestChange(raw string) time.Time {
	w, _ := freshmirror.Parse(raw)
	return w.NewestChange
}

// Trusted reports whether reads may be served from Redis.
func (m *Mirror) Trusted(ctx context.Context) error {
	if !m.Gen.Fresh(ctx) {
		return ErrStale
	}
	return nil
}

// Upsert writes a player's score (if its version is newer) and returns
// their rank and the board's size, in one round trip.
func (m *Mirror) Upsert(ctx context.Context, d leaderboards.Definition, s leaderboards.Score) (int, int64, error) {
	res, err := m.Rank.Upsert(ctx, Board(d, s.Period), item(s))
	if err != nil {
		return 0, 0, fmt.Errorf("mirror %s#%s/%s: %w", d.ID, s.Period, s.PlayerID, err)
	}
	return res.Rank, res.Total, nil
}

// Apply writes many scores of one board period (processors), versioned. A
// Removed score comes only from a deleted item (erasure): the player is
// forgotten, entry, lookup and version alike, since a tombstone would keep
// their id in Redis.
func (m *Mirror) Apply(ctx context.Context, d leaderboards.Definition, period string, scores []leaderboards.Score) error {
	b := Board(d, period)
	items := make([]ranking.Item, 0, len(scores))
	for _, s := range scores {
		if !s.Removed {
			items = append(items, item(s))
			continue
		}
		if err := m.Rank.Forget(ctx, b, s.PlayerID); err != nil {
			return fmt.Errorf("erase %s from %s#%s: %w", s.PlayerID, d.ID, period, err)
		}
	}
	if len(items) == 0 {
		return nil
	}
	if _, err := m.Rank.UpsertMany(ctx, b, items); err != nil {
		return fmt.Errorf("mirror %d scores of %s#%s: %w", len(items), d.ID, period, err)
	}
	m.rebalance(ctx, b)
	return nil
}

// Rebalance makes at most one move of a partitioned board period's
// partition bounds (jobs.go's reconcile runs it until none is needed).
func (m *Mirror) Rebalance(ctx context.Context, d leaderboards.Definition, period string) (bool, error) {
	return m.Rank.Rebalance(ctx, m.threshold(Board(d, period)))
}

// threshold gives a board that picks its shape the Mirror's threshold.
func (m *Mirror) threshold(b ranking.Board) ranking.Board {
	if b.PartitionAt > 0 && m.PartitionAt > 0 {
		b.PartitionAt = m.PartitionAt
	}
	return b
}

// rebalance moves a partitioned board's bounds toward its share, or
// converts a board that outgrew one sorted set, when it was not done here
// lately (see ranking.Engine.Rebalance). A failure loses nothing: the
// move or conversion resumes at the next rebalance.
func (m *Mirror) rebalance(ctx context.Context, b ranking.Board) {
	if b.Partitions == 0 && b.PartitionAt == 0 {
		return
	}
	b = m.threshold(b)
	now := time.Now()
	if last, ok := m.rebalanced.Load(b.String()); ok && now.Sub(last.(time.Time)) < rebalanceEvery {
		return
	}
	m.rebalanced.Store(b.String(), now)
	ctx, cancel := context.WithTimeout(ctx, rebalanceBudget)
	defer cancel()
	if _, err := m.Rank.Rebalance(ctx, b); err != nil && m.Log != nil {
		m.Log.WarnContext(ctx, "rebalance of a partitioned board stopped; it resumes at the next", "board", b.String(), "error", err)
	}
}

// Top returns n entries from rank from (1-based) on, the board's size and
// the as_of, in one round trip.
func (m *Mirror) Top(ctx context.Context, d leaderboards.Definition, period string, from, n int) ([]leaderboards.Entry, int64, time.Time, error) {
	if err := m.Trusted(ctx); err != nil {
		return nil, 0, time.Time{}, err
	}
	var mark string
	es, total, err := m.Rank.Page(ctx, Board(d, period), from, n, ranking.Also(watermarkKey, &mark))
	if err != nil {
		return nil, 0, time.Time{}, err
	}
	return entries(es), total, newestChange(mark), nil
}

// Around returns the player's entry, the window of k on each side, the
// board's size and the as_of, in one round trip.
func (m *Mirror) Around(ctx context.Context, d leaderboards.Definition, period, player string, k int) (leaderboards.Entry, []leaderboards.Entry, int64, time.Time, error) {
	if err := m.Trusted(ctx); err != nil {
		return leaderboards.Entry{}, nil, 0, time.Time{}, err
	}
	var mark string
	self, window, total, err := m.Rank.Around(ctx, Board(d, period), player, k, ranking.Also(watermarkKey, &mark))
	if errors.Is(err, ranking.ErrNotRanked) {
		return leaderboards.Entry{}, nil, total, newestChange(mark), leaderboards.ErrNotRanked
	}
	if err != nil {
		return leaderboards.Entry{}, nil, 0, time.Time{}, err
	}
	return entry(self), entries(window), total, newestChange(mark), nil
}

// Among ranks the given players among themselves (those with a score) and
// returns the as_of, in one round trip.
func (m *Mirror) Among(ctx context.Context, d leaderboards.Definition, period string, players []string) ([]leaderboards.Entry, time.Time, error) {
	if err := m.Trusted(ctx); err != nil {
		return nil, time.Time{}, err
	}
	var mark string
	es, err := m.Rank.Among(ctx, Board(d, period), players, ranking.Also(watermarkKey, &mark))
	if err != nil {
		return nil, time.Time{}, err
	}
	return entries(es), newestChange(mark), nil
}

// Total is the board's size.
func (m *Mirror) Total(ctx context.Context, d leaderboards.Definition, period string) (int64, error) {
	if err := m.Trusted(ctx); err != nil {
		return 0, err
	}
	return m.Rank.Total(ctx, Board(d, period))
}

// Rebuild reloads a board period from DynamoDB. The engine builds the new
// content aside and swaps it in at once; writes arriving meanwhile reach
// both copies and versions decide, so the stream catching up is harmless.
func (m *Mirror) Rebuild(ctx context.Context, d leaderboards.Definition, period string, expected int64, scan func(fn func([]leaderboards.Score) error) error) error {
	l, err := m.Rank.BeginLoad(ctx, Board(d, period), int(expected))
	if err != nil {
		return fmt.Errorf("rebuild %s#%s: %w", d.ID, period, err)
	}
	err = scan(func(scores []leaderboards.Score) error {
		items := make([]ranking.Item, len(scores))
		for i, s := range scores {
			items[i] = item(s)
		}
		return l.Add(ctx, items...)
	})
	if err != nil {
		_ = l.Abort(context.WithoutCancel(ctx))
		return fmt.Errorf("rebuild %s#%s: %w", d.ID, period, err)
	}
	if err := l.Commit(ctx); err != nil {
		return fmt.Errorf("rebuild %s#%s: %w", d.ID, period, err)
	}
	return nil
}
