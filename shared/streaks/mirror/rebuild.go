package mirror

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rallyhq/rally/shared/ranking"
	"github.com/rallyhq/rally/shared/streaks"
)

// Rebuild reloads the boards from live, which calls its argument with
// every streak live at now in pages, in one go; the rebuild job goes
// through BeginRebuild and may span invocations.
func (m *Mirror) Rebuild(ctx context.Context, now time.Time, live func(fn func([]streaks.State) error) error) error {
	for {
		r, err := m.BeginRebuild(ctx, now)
		if err != nil {
			return err
		}
		if err := live(func(page []streaks.State) error { return r.Add(ctx, page) }); err != nil {
			_ = r.Abort(context.WithoutCancel(ctx))
			return fmt.Errorf("rebuild streak boards: %w", err)
		}
		if err := r.Commit(ctx); err != nil || !r.Again() {
			return err
		}
	}
}

// boardsRebuild reloads the global board and every listed region's
// (regionsKey) from the start; the engine builds the new content aside
// and swaps it in on commit, and writes arriving meanwhile reach both
// copies, versions deciding. A listed region with no live streak left is
// emptied. A region met that was not listed (Redis lost the list) is
// loaded from where it appears, and listed: its board may then miss a
// write it took before its load began, for a player already read, so
// the rebuild goes round once more (Again), every region listed.
//
// Deadlines are re-added page by page rather than after the commit, so a
// rebuild never holds every live streak in memory. That is safe: a
// deadline only ever removes its own version at 2v+1, whenever it runs.
type boardsRebuild struct {
	m       *Mirror
	now     time.Time
	loaders map[string]*ranking.Loader
	order   []string
	late    bool
}

// rebuildState is a rebuild's position between invocations: when it
// counts as now, and each board's load, in the order they began.
type rebuildState struct {
	Now     time.Time                    `json:"now"`
	Regions []string                     `json:"regions"`
	Loads   map[string]ranking.LoadState `json:"loads"`
	Late    bool                         `json:"late,omitempty"`
}

// BeginRebuild starts reloading every streak board from the streaks live
// at now.
func (m *Mirror) BeginRebuild(ctx context.Context, now time.Time) (streaks.BoardsRebuild, error) {
	expected, err := m.Rank.Total(ctx, Board(""))
	if err != nil {
		return nil, fmt.Errorf("rebuild streak boards: %w", err)
	}
	regions, err := m.Redis.SMembers(ctx, regionsKey).Result()
	if err != nil {
		return nil, fmt.Errorf("rebuild streak boards: %w", err)
	}
	slices.Sort(regions)
	r := &boardsRebuild{m: m, now: now, loaders: map[string]*ranking.Loader{}}
	for i, region := range append([]string{""}, regions...) {
		size := 0
		if i == 0 {
			size = int(expected)
		}
		l, err := m.Rank.BeginLoad(ctx, Board(region), size)
		if err != nil {
			_ = r.Abort(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("rebuild streak boards: %w", err)
		}
		r.loaders[region] = l
		r.order = append(r.order, region)
	}
	return r, nil
}

// ResumeRebuild continues a rebuild from what its Save returned.
func (m *Mirror) ResumeRebuild(state string) (streaks.BoardsRebuild, error) {
	var st rebuildState
	if err := json.Unmarshal([]byte(state), &st); err != nil {
		return nil, fmt.Errorf("resume the streak boards' rebuild: %w", err)
	}
	r := &boardsRebuild{m: m, now: st.Now, loaders: map[string]*ranking.Loader{}, order: st.Regions, late: st.Late}
	for _, region := range st.Regions {
		l, err := m.Rank.ResumeLoad(Board(region), st.Loads[region])
		if err != nil {
			return nil, fmt.Errorf("resume the streak boards' rebuild: %w", err)
		}
		r.loaders[region] = l
	}
	return r, nil
}

func (r *boardsRebuild) Now() time.Time { return r.now }

func (r *boardsRebuild) Again() bool { return r.late }

func (r *boardsRebuild) Add(ctx context.Context, page []streaks.State) error {
	boards := map[string][]ranking.Item{}
	var deadlines []redis.Z
	for _, st := range page {
		if st.Removed || st.Current <= 0 || !st.LiveAt(r.now) {
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
		l, ok := r.loaders[region]
		if !ok {
			if err := r.m.Redis.SAdd(ctx, regionsKey, region).Err(); err != nil {
				return err
			}
			var err error
			if l, err = r.m.Rank.BeginLoad(ctx, Board(region), 0); err != nil {
				return err
			}
			r.loaders[region] = l
			r.order = append(r.order, region)
			r.late = true
		}
		if err := l.Add(ctx, items...); err != nil {
			return err
		}
	}
	if len(deadlines) == 0 {
		return nil
	}
	return r.m.Redis.ZAdd(ctx, deadlinesKey, deadlines...).Err()
}

func (r *boardsRebuild) Save(ctx context.Context) (string, error) {
	st := rebuildState{Now: r.now, Regions: r.order, Loads: map[string]ranking.LoadState{}, Late: r.late}
	for region, l := range r.loaders {
		if err := l.Flush(ctx); err != nil {
			return "", err
		}
		st.Loads[region] = l.State()
	}
	raw, err := json.Marshal(st)
	return string(raw), err
}

func (r *boardsRebuild) Commit(ctx context.Context) error {
	var errs []error
	for _, region := range r.order {
		if err := r.loaders[region].Commit(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		_ = r.Abort(context.WithoutCancel(ctx))
		return fmt.Errorf("rebuild streak boards: %w", err)
	}
	return nil
}

func (r *boardsRebuild) Abort(ctx context.Context) error {
	var errs []error
	for _, l := range r.loaders {
		errs = append(errs, l.Abort(ctx)) // a no-op once committed
	}
	return errors.Join(errs...)
}

// Superseded tells whether a rebuild failed because another one (or an
// erasure's Forget) took over a board meanwhile.
func (m *Mirror) Superseded(err error) bool { return errors.Is(err, ranking.ErrLoadSuperseded) }
