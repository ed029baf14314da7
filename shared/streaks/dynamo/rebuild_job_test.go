package dynamo_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/shared/cachegen"
	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/jobs"
	"github.com/rallyhq/rally/shared/schema"
	"github.com/rallyhq/rally/shared/streaks"
	"github.com/rallyhq/rally/shared/streaks/internal/streakmodel"
	"github.com/rallyhq/rally/shared/streaks/mirror"
)

// slowLive makes every page of live streaks take a while once it was
// handled, so a rebuild of a few hundred outlasts a short invocation.
type slowLive struct {
	streaks.JobStore
	perPage time.Duration
}

func (s slowLive) LiveAfter(ctx context.Context, now time.Time, after string, fn func([]streaks.State) error) error {
	return s.JobStore.LiveAfter(ctx, now, after, func(page []streaks.State) error {
		err := fn(page)
		time.Sleep(s.perPage) // the rest of the work of a bigger page
		return err
	})
}

// A rebuild of the streak boards longer than one invocation continues
// from its checkpoint in the next: the job takes several runs; a streak
// committed while it runs, for a player it had already read (the
// processor writes it to Redis), is kept; the regions it meets on the
// way (nobody had listed them) make it go round once more; and the
// boards end exactly the brute-force ranking of the live streaks,
// globally and in every region.
func TestAStreakRebuildContinuesAcrossInvocations(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	base := time.Date(year, 3, 28, 22, 0, 0, 0, time.UTC)
	states := seedStreaks(t, r, 400, base)
	ctx := context.Background()

	srv := testenv.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	gen := &cachegen.Tracker{DB: r.db, Table: r.names.Of(schema.Counters), Redis: rdb, Scope: mirror.Scope, CheckEvery: time.Nanosecond}
	if err := gen.Advance(ctx, 0); err != nil {
		t.Fatal(err)
	}
	m := mirror.New(rdb, gen)
	// A page outlasts the 1 s an invocation of 2 s leaves a job, on any
	// machine: each page is read in an invocation of its own.
	j := &streaks.Jobs{Store: slowLive{JobStore: r.store, perPage: 1100 * time.Millisecond}, Cache: m, Clock: clock.Fixed(base)}
	runner := &jobs.Runner{
		Store: &jobs.Store{DB: r.db, Table: r.names.Of(schema.Jobs)},
		Tasks: j.Tasks(), Clock: clock.Fixed(base), Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Owner: "test",
	}
	job, err := jobs.Start(ctx, runner.Store, jobs.Spec{Kind: jobs.Rebuild, Target: jobs.Streaks}, base)
	if err != nil {
		t.Fatal(err)
	}
	// Sorts before every seeded player: its page is read first.
	latecomer := streaks.State{UserID: "AAA-late", Current: 9, Longest: 9, LastDate: streakmodel.Date(base, ""), ReachedAt: base,
		Region: "eu", Version: 1, UpdatedAt: base}
	for runs := 0; job.State == jobs.Running; runs++ {
		if runs > 30 {
			t.Fatalf("no end after %d invocations: %+v", runs, job)
		}
		ictx, cancel := context.WithTimeout(ctx, 2*time.Second) // half of it is kept in reserve
		err := runner.Work(ictx, job.ID)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if runs == 0 {
			// A new streak is committed, and the processor applies it.
			if err := r.store.Commit(ctx, streaks.Commit{
				Key: "late", Hash: "late", Prev: streaks.State{UserID: latecomer.UserID}, Next: latecomer,
				Event: streaks.Event{ID: "late", UserID: latecomer.UserID, Type: streaks.DailyOpen, Source: streaks.Web,
					OccurredAt: base, Date: latecomer.LastDate, Points: 10},
				Day:      streaks.Day{Date: latecomer.LastDate, Points: 10, Events: 1, ByType: map[streaks.EventType]int64{streaks.DailyOpen: 10}},
				Response: []byte("{}"),
			}); err != nil {
				t.Fatal(err)
			}
			if err := m.Put(ctx, latecomer); err != nil {
				t.Fatal(err)
			}
		}
		if job, err = runner.Store.Get(ctx, job.ID); err != nil {
			t.Fatal(err)
		}
		t.Logf("after run %d: %s, %d loaded, %d checked, error %q, cursor %.80s", runs, job.State, job.Progress.Done, job.Checked, job.Error, job.Cursor)
	}
	states = append(states, latecomer)
	// The pass that went round again is not counted twice.
	live := int64(len(bruteTop(states, "", len(states), base)))
	if job.State != jobs.Done || job.Runs < 3 || job.Progress.Done != live || job.Checked != live {
		t.Fatalf("job %s after %d runs (%d loaded, %d checked), want done after several with each of the %d live streaks once",
			job.State, job.Runs, job.Progress.Done, job.Checked, live)
	}
	for _, region := range []string{"", "eu", "na", "apac"} {
		got, _, err := m.Top(ctx, region, 500, base)
		if err != nil {
			t.Fatal(err)
		}
		equal(t, fmt.Sprintf("board %q after a rebuild over %d runs", region, job.Runs), got, bruteTop(states, region, 500, base))
	}
}
