package mirror

import (
	"context"
	"fmt"

	"github.com/rallyhq/rally/shared/streaks"
)

var _ streaks.JobCache = (*Mirror)(nil)

// Stored returns the streaks a board (the global one, or a region's)
// holds for users, trusted or not (a reconcile checks it).
func (m *Mirror) Stored(ctx context.Context, region string, users []string) (map[string]int64, error) {
	es, err := m.Rank.Among(ctx, Board(region), users)
	if err != nil {
		return nil, fmt.Errorf("read streak board %q: %w", region, err)
	}
	out := make(map[string]int64, len(es))
	for _, e := range es {
		out[e.ID] = e.Score
	}
	return out, nil
}

// Size is how many streaks a board holds, trusted or not.
func (m *Mirror) Size(ctx context.Context, region string) (int64, error) {
	return m.Rank.Total(ctx, Board(region))
}
