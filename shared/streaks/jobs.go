package streaks

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/jobs"
)

// JobCache is what the jobs read of the Redis streak boards.
type JobCache interface {
	Rebuild(ctx context.Context, now time.Time, live func(fn func([]State) error) error) error
	// BeginRebuild starts a rebuild of every board from the streaks live
	// at now; ResumeRebuild continues one from its saved state.
	BeginRebuild(ctx context.Context, now time.Time) (BoardsRebuild, error)
	ResumeRebuild(state string) (BoardsRebuild, error)
	// Superseded tells whether err says another rebuild (or an erasure)
	// took a board over.
	Superseded(err error) bool
	// Sweep takes off the boards the streaks that broke by now.
	Sweep(ctx context.Context, now time.Time) (int, error)
	// Stored returns the streaks a board holds for users; Size its size.
	Stored(ctx context.Context, region string, users []string) (map[string]int64, error)
	Size(ctx context.Context, region string) (int64, error)
}

// JobStore is what the jobs read and recompute of Streaks.
type JobStore interface {
	Live(ctx context.Context, now time.Time, fn func([]State) error) error
	// LiveAfter is Live from the first user id after after.
	LiveAfter(ctx context.Context, now time.Time, after string, fn func([]State) error) error
	// Reindex rewrites the board index entries (live and regional keys) of
	// a page of streaks from their state, from after; it returns how many
	// it read and rewrote, and where to continue ("" after the last page).
	Reindex(ctx context.Context, after string) (read, rewritten int, next string, err error)
}

// Jobs are the streaks' tasks: rebuild the Redis boards from the live
// streaks, reconcile them with Streaks, and recompute the boards' index
// entries in Streaks from each player's state.
type Jobs struct {
	Store JobStore
	Cache JobCache
	Clock clock.Clock
}

// Tasks registers the streaks target of every kind.
func (j *Jobs) Tasks() jobs.Tasks {
	return jobs.Tasks{
		{Kind: jobs.Rebuild, Target: jobs.Streaks}:   jobs.Named("streaks-rebuild", j.rebuild),
		{Kind: jobs.Reconcile, Target: jobs.Streaks}: jobs.Named("streaks-reconcile", j.reconcile),
		{Kind: jobs.Recompute, Target: jobs.Streaks}: jobs.Named("streaks-recompute", j.recompute),
	}
}

// rebuildCursor is a streak rebuild's position between invocations: the
// last user loaded and the boards' loads.
type rebuildCursor struct {
	After string `json:"after,omitempty"`
	Load  string `json:"load"`
}

// rebuild reloads every streak board from the streaks live when it began,
// a page at a time, checkpointing the boards' loads so the next
// invocation continues it; the new boards go live at once when the last
// page is in.
func (j *Jobs) rebuild(ctx context.Context, _ jobs.Spec, cursor string, w *jobs.Work) (string, bool, error) {
	var c rebuildCursor
	var r BoardsRebuild
	var err error
	if cursor == "" {
		r, err = j.Cache.BeginRebuild(ctx, j.Clock.Now())
	} else if err = json.Unmarshal([]byte(cursor), &c); err == nil {
		r, err = j.Cache.ResumeRebuild(c.Load)
	}
	if err != nil {
		return "", false, fmt.Errorf("streaks rebuild: %w", err)
	}
	save := func(ctx context.Context) (string, error) {
		state, err := r.Save(ctx)
		if err != nil {
			return "", err
		}
		c.Load = state
		raw, err := json.Marshal(c)
		return string(raw), err
	}
	err = j.Store.LiveAfter(ctx, r.Now(), c.After, func(page []State) error {
		if err := r.Add(ctx, page); err != nil {
			return err
		}
		c.After = page[len(page)-1].UserID
		w.Progress.Done += int64(len(page))
		w.Findings.Checked += int64(len(page))
		if w.Due() {
			at, err := save(ctx)
			if err != nil {
				return err
			}
			if err := w.Checkpoint(ctx, at); err != nil {
				return err
			}
		}
		return ctx.Err()
	})
	if err == nil {
		// The swap is short and must not stop half done (a commit cut
		// short cannot be resumed): it runs in the invocation's reserve.
		err = r.Commit(context.WithoutCancel(ctx))
	}
	// startOver forgets what this pass loaded: the next reads it again.
	startOver := func() (string, bool, error) {
		w.Findings.Checked -= w.Progress.Done
		w.Progress.Done = 0
		return "", false, nil
	}
	switch {
	case err == nil && r.Again():
		// A region began late: once more, every region from the start.
		return startOver()
	case err == nil:
		return "", true, nil
	case j.Cache.Superseded(err):
		// Another rebuild (or an erasure) took a board: start over.
		_ = r.Abort(context.WithoutCancel(ctx))
		return startOver()
	case ctx.Err() != nil:
		at, serr := save(context.WithoutCancel(ctx))
		if serr != nil {
			return "", false, serr
		}
		return at, false, nil
	}
	return "", false, err
}

// reload rebuilds the boards from the streaks live at now, telling loaded
// how many each page held.
func (j *Jobs) reload(ctx context.Context, now time.Time, loaded func(n int)) error {
	return j.Cache.Rebuild(ctx, now, func(fn func([]State) error) error {
		return j.Store.Live(ctx, now, func(page []State) error {
			loaded(len(page))
			return fn(page)
		})
	})
}

// reconcile compares every live streak with the global board and its
// region's, and each board's size with the live streaks; when anything
// drifted, it rebuilds the boards.
func (j *Jobs) reconcile(ctx context.Context, _ jobs.Spec, _ string, w *jobs.Work) (string, bool, error) {
	now := j.Clock.Now()
	// Broken streaks leave the boards on a sweep; a reconcile compares
	// what a read would see.
	if _, err := j.Cache.Sweep(ctx, now); err != nil {
		return "", false, err
	}
	live := map[string]int64{}
	drifted := int64(0)
	err := j.Store.Live(ctx, now, func(page []State) error {
		byRegion := map[string][]State{"": page}
		for _, st := range page {
			if st.Region != "" {
				byRegion[st.Region] = append(byRegion[st.Region], st)
			}
		}
		for region, states := range byRegion {
			users := make([]string, len(states))
			for i, st := range states {
				users[i] = st.UserID
			}
			held, err := j.Cache.Stored(ctx, region, users)
			if err != nil {
				return err
			}
			for _, st := range states {
				w.Findings.Checked++
				if got, ok := held[st.UserID]; !ok || got != st.Current {
					w.Findings.Found("streak_board", fmt.Sprintf("board %q: %s has %d in redis, %d in dynamodb", boardName(region), st.UserID, got, st.Current), false)
					drifted++
				}
			}
			live[region] += int64(len(states))
		}
		w.Progress.Done += int64(len(page))
		return nil
	})
	if err != nil {
		return "", false, err
	}
	regions := make([]string, 0, len(live))
	for r := range live {
		regions = append(regions, r)
	}
	slices.Sort(regions)
	for _, region := range regions {
		total, err := j.Cache.Size(ctx, region)
		if err != nil {
			return "", false, err
		}
		if total > live[region] {
			w.Findings.Found("streak_board", fmt.Sprintf("board %q: redis holds %d streaks, %d are live", boardName(region), total, live[region]), false)
			drifted++
		}
	}
	if drifted == 0 {
		return "", true, nil
	}
	if err := j.reload(ctx, now, func(int) {}); err != nil {
		return "", false, err
	}
	w.Findings.Repaired += drifted
	return "", true, nil
}

func boardName(region string) string {
	if region == "" {
		return "global"
	}
	return region
}

// recompute rewrites the boards' index entries in Streaks from each
// player's state, a page at a time.
func (j *Jobs) recompute(ctx context.Context, _ jobs.Spec, cursor string, w *jobs.Work) (string, bool, error) {
	for {
		if ctx.Err() != nil {
			return cursor, false, nil
		}
		read, rewritten, next, err := j.Store.Reindex(ctx, cursor)
		if err != nil {
			return "", false, err
		}
		w.Findings.Checked += int64(read)
		w.Progress.Done += int64(read)
		for range rewritten {
			w.Findings.Found("streak_index", "a streak's board index entry was off its state", true)
		}
		if next == "" {
			return "", true, nil
		}
		cursor = next
		if err := w.Checkpoint(ctx, cursor); err != nil {
			return "", false, err
		}
	}
}
