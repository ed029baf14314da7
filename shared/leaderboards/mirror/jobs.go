package mirror

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/rallyhq/rally/shared/leaderboards"
	"github.com/rallyhq/rally/shared/ranking"
)

var _ leaderboards.JobCache = (*Mirror)(nil)

// rebuilding is a board period's rebuild under way, through the ranking
// engine's loader.
type rebuilding struct {
	l     *ranking.Loader
	items []ranking.Item
}

// BeginRebuild starts rebuilding a board period from DynamoDB; expected
// is its member count.
func (m *Mirror) BeginRebuild(ctx context.Context, d leaderboards.Definition, period string, expected int64) (leaderboards.Rebuilding, error) {
	l, err := m.Rank.BeginLoad(ctx, Board(d, period), int(expected))
	if err != nil {
		return nil, fmt.Errorf("rebuild %s#%s: %w", d.ID, period, err)
	}
	return &rebuilding{l: l}, nil
}

// ResumeRebuild continues a rebuild from what Save returned.
func (m *Mirror) ResumeRebuild(d leaderboards.Definition, period, state string) (leaderboards.Rebuilding, error) {
	var st ranking.LoadState
	if err := json.Unmarshal([]byte(state), &st); err != nil {
		return nil, fmt.Errorf("resume rebuild of %s#%s: %w", d.ID, period, err)
	}
	l, err := m.Rank.ResumeLoad(Board(d, period), st)
	if err != nil {
		return nil, err
	}
	return &rebuilding{l: l}, nil
}

func (r *rebuilding) Add(ctx context.Context, scores ...leaderboards.Score) error {
	r.items = r.items[:0]
	for _, s := range scores {
		r.items = append(r.items, item(s))
	}
	return r.l.Add(ctx, r.items...)
}

func (r *rebuilding) Save(ctx context.Context) (string, error) {
	if err := r.l.Flush(ctx); err != nil {
		return "", err
	}
	raw, err := json.Marshal(r.l.State())
	return string(raw), err
}

func (r *rebuilding) Commit(ctx context.Context) error { return r.l.Commit(ctx) }

func (r *rebuilding) Abort(ctx context.Context) error { return r.l.Abort(ctx) }

// Stored returns what Redis holds for the given players of a board
// period, trusted or not (a reconcile checks it).
func (m *Mirror) Stored(ctx context.Context, d leaderboards.Definition, period string, players []string) ([]leaderboards.Entry, error) {
	es, err := m.Rank.Among(ctx, Board(d, period), players)
	if err != nil {
		return nil, err
	}
	return entries(es), nil
}

// Size is how many players Redis holds on a board period, trusted or not.
func (m *Mirror) Size(ctx context.Context, d leaderboards.Definition, period string) (int64, error) {
	return m.Rank.Total(ctx, Board(d, period))
}

// Superseded tells whether a rebuild failed because another one (or an
// erasure's Forget) took over the board meanwhile.
func (m *Mirror) Superseded(err error) bool { return errors.Is(err, ranking.ErrLoadSuperseded) }

// ExpireAt makes a closed board period leave Redis at a time: its keys
// expire then (writes that straggle in keep the deadline), or go now when
// that time has passed by now.
func (m *Mirror) ExpireAt(ctx context.Context, d leaderboards.Definition, period string, at, now time.Time) error {
	b := Board(d, period)
	if ttl := at.Sub(now); ttl >= time.Millisecond {
		return m.Rank.Expire(ctx, b, ttl)
	}
	return m.Rank.Delete(ctx, b)
}
