package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/jobs"
	"github.com/rallyhq/rally/shared/schema"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// counting is a task over items 0..n-1 that takes one item per step and
// records every item it was handed, so a test can see each done once.
type counting struct {
	n     int
	step  time.Duration
	mu    sync.Mutex
	seen  map[int]int
	fails atomic.Int32 // the next runs that fail
}

func (c *counting) Run(ctx context.Context, _ jobs.Spec, cursor string, w *jobs.Work) (string, bool, error) {
	if c.fails.Load() > 0 {
		c.fails.Add(-1)
		return cursor, false, errors.New("redis went away")
	}
	i := 0
	if cursor != "" {
		i, _ = strconv.Atoi(cursor)
	}
	w.Progress.Total = int64(c.n)
	for ; i < c.n; i++ {
		if ctx.Err() != nil {
			return strconv.Itoa(i), false, nil
		}
		time.Sleep(c.step) // the work of one item
		c.mu.Lock()
		c.seen[i]++
		c.mu.Unlock()
		w.Progress.Done = int64(i + 1)
		if err := w.Checkpoint(ctx, strconv.Itoa(i+1)); err != nil {
			return "", false, err
		}
	}
	return "", true, nil
}

// startRebuild starts a rebuild of the counters at now.
func startRebuild(t *testing.T, r *jobs.Runner, now time.Time) jobs.Job {
	t.Helper()
	j, err := jobs.Start(context.Background(), r.Store, jobs.Spec{Kind: jobs.Rebuild, Target: jobs.Counters}, now)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func newRunner(t *testing.T, task jobs.Task, owner string, clk clock.Clock) *jobs.Runner {
	t.Helper()
	db, names, _ := testenv.DynamoDB(t)
	return &jobs.Runner{
		Store: &jobs.Store{DB: db, Table: names.Of(schema.Jobs)},
		Tasks: jobs.Tasks{{Kind: jobs.Rebuild, Target: jobs.Counters}: task},
		Clock: clk, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Owner: owner,
	}
}

// A job longer than an invocation continues from its checkpoint in the
// next one: every item is done exactly once, over several runs.
func TestAJobContinuesFromItsCheckpointAcrossInvocations(t *testing.T) {
	task := &counting{n: 200, step: 10 * time.Millisecond, seen: map[int]int{}}
	r := newRunner(t, task, "a", clock.System{})
	ctx := context.Background()
	j := startRebuild(t, r, time.Now())
	for invocations := 0; j.State == jobs.Running; invocations++ {
		if invocations > 20 {
			t.Fatalf("no end after %d invocations: %+v", invocations, j)
		}
		ictx, cancel := context.WithTimeout(ctx, 2*time.Second) // half of it is kept in reserve
		if err := r.Work(ictx, j.ID); err != nil {
			t.Fatal(err)
		}
		cancel()
		var err error
		if j, err = r.Store.Get(ctx, j.ID); err != nil {
			t.Fatal(err)
		}
		if j.State == jobs.Running && (j.Progress.Done == 0 || j.Progress.Total != 200) {
			t.Fatalf("no progress to see after a run: %+v", j.Progress)
		}
	}
	if j.State != jobs.Done || j.Runs < 2 || j.FinishedAt.IsZero() {
		t.Fatalf("job %s after %d runs", j.State, j.Runs)
	}
	for i := range task.n {
		if task.seen[i] != 1 {
			t.Fatalf("item %d done %d times", i, task.seen[i])
		}
	}
}

// Two runners handed the same job at once: one works on it, the other
// leaves it alone, and nothing is done twice.
func TestTwoRunnersNeverWorkOnOneJob(t *testing.T) {
	task := &counting{n: 30, step: 5 * time.Millisecond, seen: map[int]int{}}
	a := newRunner(t, task, "a", clock.System{})
	b := &jobs.Runner{Store: a.Store, Tasks: a.Tasks, Clock: a.Clock, Log: a.Log, Owner: "b"}
	ctx := context.Background()
	j := startRebuild(t, a, time.Now())
	var wg sync.WaitGroup
	for _, r := range []*jobs.Runner{a, b} {
		wg.Go(func() {
			if err := r.Work(ctx, j.ID); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	j, err := a.Store.Get(ctx, j.ID)
	if err != nil || j.State != jobs.Done || j.Runs != 1 {
		t.Fatalf("job after two runners: %+v %v", j, err)
	}
	for i := range task.n {
		if task.seen[i] != 1 {
			t.Fatalf("item %d done %d times", i, task.seen[i])
		}
	}
}

// A failing run is retried after RetryAfter (the schedule takes it up),
// and after MaxFailures in a row the job is FAILED with the error.
func TestAFailingJobIsRetriedThenFailed(t *testing.T) {
	clk := &clock.Settable{}
	clk.Set(time.Now())
	task := &counting{n: 3, seen: map[int]int{}}
	task.fails.Store(1)
	r := newRunner(t, task, "a", clk)
	ctx := context.Background()
	j := startRebuild(t, r, clk.Now())
	if err := r.Work(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	if err := r.Tick(ctx); err != nil { // too early: held back
		t.Fatal(err)
	}
	if j, _ = r.Store.Get(ctx, j.ID); j.State != jobs.Running || j.Runs != 1 || j.Error == "" {
		t.Fatalf("after a failed run: %+v", j)
	}
	clk.Advance(jobs.RetryAfter)
	if err := r.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	if j, _ = r.Store.Get(ctx, j.ID); j.State != jobs.Done || j.Error != "" {
		t.Fatalf("after the retry: %+v", j)
	}

	task.fails.Store(jobs.MaxFailures)
	j = startRebuild(t, r, clk.Now())
	for range jobs.MaxFailures {
		if err := r.Work(ctx, j.ID); err != nil {
			t.Fatal(err)
		}
		clk.Advance(jobs.RetryAfter)
	}
	if j, _ = r.Store.Get(ctx, j.ID); j.State != jobs.Failed || j.Error != "redis went away" || j.Runs != jobs.MaxFailures {
		t.Fatalf("after %d failed runs: %+v", jobs.MaxFailures, j)
	}
}

// failsAfter is a task over n items that fails once, after it has done
// them all but before it could checkpoint (checkpoints come every few
// seconds): the retry starts over from the last checkpoint.
type failsAfter struct {
	n      int
	failed bool
}

func (f *failsAfter) Run(ctx context.Context, _ jobs.Spec, cursor string, w *jobs.Work) (string, bool, error) {
	w.Progress.Total = int64(f.n)
	for i := 0; i < f.n; i++ {
		w.Progress.Done++
		w.Findings.Checked++
		if err := w.Checkpoint(ctx, strconv.Itoa(i+1)); err != nil {
			return "", false, err
		}
	}
	if !f.failed {
		f.failed = true
		return cursor, false, errors.New("redis went away")
	}
	return "", true, nil
}

// The progress a failed run made after its last checkpoint is not kept:
// the retry does that work again from the checkpoint, and the job ends
// with done equal to the total, not beyond it, and each value checked
// once.
func TestAFailedRunsProgressGoesBackToItsCheckpoint(t *testing.T) {
	clk := &clock.Settable{}
	clk.Set(time.Now())
	task := &failsAfter{n: 40}
	r := newRunner(t, task, "a", clk)
	ctx := context.Background()
	j := startRebuild(t, r, clk.Now())
	if err := r.Work(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	if j, _ = r.Store.Get(ctx, j.ID); j.State != jobs.Running || j.Progress.Done != 0 || j.Checked != 0 {
		t.Fatalf("after a run that failed before its first checkpoint: %+v, %d checked", j.Progress, j.Checked)
	}
	clk.Advance(jobs.RetryAfter)
	if err := r.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	if j, _ = r.Store.Get(ctx, j.ID); j.State != jobs.Done || j.Progress.Done != 40 || j.Progress.Total != 40 || j.Checked != 40 {
		t.Fatalf("after the retry: %s, progress %+v, %d checked; want done 40 of 40, 40 checked", j.State, j.Progress, j.Checked)
	}
}

// cutShort checkpoints at half its items, does the rest, and then, on its
// first run, is cut short by the deadline in the middle of a call (it
// returns the call's error, not a cursor).
type cutShort struct {
	n       int
	handed  []string // the cursor each run was handed
	started []int64  // the progress each run started from
}

func (c *cutShort) Run(ctx context.Context, _ jobs.Spec, cursor string, w *jobs.Work) (string, bool, error) {
	c.handed = append(c.handed, cursor)
	c.started = append(c.started, w.Progress.Done)
	w.Progress.Total = int64(c.n)
	from, _ := strconv.Atoi(cursor)
	for i := from; i < c.n; i++ {
		w.Progress.Done++
		if i+1 == c.n/2 {
			for !w.Due() { // the checkpoint saves every CheckpointEvery
				time.Sleep(10 * time.Millisecond)
			}
			if err := w.Checkpoint(ctx, strconv.Itoa(i+1)); err != nil {
				return "", false, err
			}
		}
	}
	if len(c.handed) == 1 {
		<-ctx.Done()
		return "", false, fmt.Errorf("write the last page: %w", ctx.Err())
	}
	return "", true, nil
}

// A run cut short by its deadline in the middle of a call goes back to
// its last checkpoint: the next run is handed that cursor with the
// progress saved with it, at once, and the job ends with each item done
// once.
func TestARunCutShortGoesBackToItsCheckpoint(t *testing.T) {
	task := &cutShort{n: 40}
	r := newRunner(t, task, "a", clock.System{})
	ctx := context.Background()
	j := startRebuild(t, r, time.Now())
	for run := 0; j.State == jobs.Running && run < 3; run++ {
		// 5 s leaves the run a budget of 3 s: room for the checkpoint.
		ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := r.Work(ictx, j.ID)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if j, err = r.Store.Get(ctx, j.ID); err != nil {
			t.Fatal(err)
		}
	}
	if len(task.handed) != 2 || task.handed[1] != "20" || task.started[1] != 20 {
		t.Fatalf("runs were handed cursors %q with progress %v; want the second handed the checkpoint, 20 at 20", task.handed, task.started)
	}
	if j.State != jobs.Done || j.Progress.Done != 40 || j.Error != "" {
		t.Fatalf("after the cut-short run and the next: %s, progress %+v, error %q; want done 40 of 40", j.State, j.Progress, j.Error)
	}
}
