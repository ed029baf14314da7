package mirror

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rallyhq/rally/shared/ranking"
	"github.com/rallyhq/rally/shared/streaks"
)

// Rebuild reloads the boards from live, which calls its argument with
// every streak live at now in pages. The global board is loaded from the
// start and each region's as it first appears; the engine builds the new
// content aside and swaps it in on commit, and writes arriving meanwhile
// reach both copies, versions deciding. A region with no live streak left
// keeps its board: the sweep empties it.
//
// Deadlines are re-added page by page rather than after the commit, so a
// rebuild never holds every live streak in memory. That is safe: a
// deadline only ever removes its own version at 2v+1, whenever it runs.
func (m *Mirror) Rebuild(ctx context.Context, now time.Time, live func(fn func([]streaks.State) error) error) error {
	expected, err := m.Rank.Total(ctx, Board(""))
	if err != nil {
		return fmt.Errorf("rebuild streak boards: %w", err)
	}
	global, err := m.Rank.BeginLoad(ctx, Board(""), int(expected))
	if err != nil {
		return fmt.Errorf("rebuild streak boards: %w", err)
	}
	loaders := map[string]*ranking.Loader{"": global}
	order := []string{""}
	abort := func() {
		for _, l := range loaders {
			_ = l.Abort(context.WithoutCancel(ctx)) // a no-op once committed
		}
	}
	err = live(func(page []streaks.State) error {
		boards := map[string][]ranking.Item{}
		var deadlines []redis.Z
		for _, st := range page {
			if st.Removed || st.Current <= 0 || !st.LiveAt(now) {
				continue
			}
			it := ranking.Item{ID: st.UserID, Score: st.Current, ReachedAt: st.ReachedAt, Version: entryVersion(st.Version)}
			boards[""] = append(boards[""], it)
			if st.Region != "" {
				boards[st.Region] = append(boards[st.Region], it)
			}
			if d, ok := deadline(st); ok {
				deadlines = append(deadlines, d)
			}
		}
		for region, items := range boards {
			l, ok := loaders[region]
			if !ok {
				var err error
				if l, err = m.Rank.BeginLoad(ctx, Board(region), 0); err != nil {
					return err
				}
				loaders[region] = l
				order = append(order, region)
			}
			if err := l.Add(ctx, items...); err != nil {
				return err
			}
		}
		if len(deadlines) == 0 {
			return nil
		}
		return m.Redis.ZAdd(ctx, deadlinesKey, deadlines...).Err()
	})
	if err != nil {
		abort()
		return fmt.Errorf("rebuild streak boards: %w", err)
	}
	var errs []error
	for _, region := range order {
		if err := loaders[region].Commit(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		abort()
		return fmt.Errorf("rebuild streak boards: %w", err)
	}
	return nil
}
