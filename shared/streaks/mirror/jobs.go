package mirror

import (
	"context"
	"fmt"
	"time"

	"github.com/rallyhq/rally/shared/streaks"
)

var _ streaks.JobCache = (*Mirror)(nil)

// Stored returns the streaks the boards hold for users (the global one,
// or a region's), and the board's size, trusted or not (a reconcile
// checks it). Streaks that broke by now are swept off first.
func (m *Mirror) Stored(ctx context.Context, region string, users []string, now time.Time) (map[string]int64, int64, error) {
	if _, err := m.Sweep(ctx, now); err != nil {
		return nil, 0, err
	}
	b := Board(region)
	es, err := m.Rank.Among(ctx, b, users)
	if err != nil {
		return nil, 0, fmt.Errorf("read streak board %q: %w", region, err)
	}
	out := make(map[string]int64, len(es))
	for _, e := range es {
		out[e.ID] = e.Score
	}
	total, err := m.Rank.Total(ctx, b)
	if err != nil {
		return nil, 0, fmt.Errorf("read streak board %q: %w", region, err)
	}
	return out, total, nil
}
