package mirror

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/rallyhq/rally/shared/ranking"
	"github.com/rallyhq/rally/shared/reactions"
)

var _ reactions.JobMirror = (*Mirror)(nil)

// Stored returns what Redis holds for targets, trusted or not (a
// reconcile checks it): their cached counts (a count not cached is
// absent) and their scores on the all-time trending board.
func (m *Mirror) Stored(ctx context.Context, targets []reactions.Target) (map[reactions.Target]reactions.Count, map[reactions.Target]int64, error) {
	counts := map[reactions.Target]reactions.Count{}
	allTime := map[reactions.Target]int64{}
	if len(targets) == 0 {
		return counts, allTime, nil
	}
	pipe := m.Redis.Pipeline()
	gets := make([]*redis.StringCmd, len(targets))
	for i, t := range targets {
		gets[i] = pipe.Get(ctx, countKey(t))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, nil, fmt.Errorf("read cached counts: %w", err)
	}
	byKind := map[reactions.Kind][]string{}
	for i, t := range targets {
		if s, err := gets[i].Result(); err == nil {
			if c, ok := parseCount(s); ok {
				counts[t] = c
			}
		}
		byKind[t.Kind] = append(byKind[t.Kind], t.ID)
	}
	for kind, ids := range byKind {
		es, err := m.Rank.Among(ctx, AllTimeBoard(kind), ids)
		if err != nil {
			return nil, nil, fmt.Errorf("read all-time %s scores: %w", kind, err)
		}
		for _, e := range es {
			allTime[reactions.Target{Kind: kind, ID: e.ID}] = e.Score
		}
	}
	return counts, allTime, nil
}

// Reset replaces what Redis holds for the tallies' targets (count and
// all-time score) with the tallies, whatever version Redis has: a value
// that drifted under a version as new as DynamoDB's would otherwise stay.
func (m *Mirror) Reset(ctx context.Context, tallies []reactions.Tally) error {
	for _, t := range tallies {
		if err := m.Redis.Del(ctx, countKey(t.Target)).Err(); err != nil {
			return fmt.Errorf("reset count of %s: %w", t.Target, err)
		}
		if err := m.Rank.Forget(ctx, AllTimeBoard(t.Target.Kind), t.Target.ID); err != nil && !errors.Is(err, ranking.ErrLoadSuperseded) {
			return fmt.Errorf("reset all-time score of %s: %w", t.Target, err)
		}
	}
	return m.Apply(ctx, tallies, nil)
}
