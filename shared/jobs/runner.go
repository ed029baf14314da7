package jobs

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/errs"
	"github.com/rallyhq/rally/shared/obs"
	"github.com/rallyhq/rally/shared/schema"
)

// Metric names the runner emits.
const (
	// MetricDrift counts values a reconcile found drifted, per kind of
	// value (dimension Kind).
	MetricDrift = "Drift"
	// MetricOldestRunningJobAge is the age of the oldest running job, in
	// seconds, on every scheduled run.
	MetricOldestRunningJobAge = "OldestRunningJobAgeSeconds"
)

// Runner limits.
const (
	// MaxFailures is how many runs in a row may fail before a job is
	// FAILED.
	MaxFailures = 5
	// RetryAfter holds a failed run's job back before the next attempt
	// (the schedule takes it up).
	RetryAfter = time.Minute
	// CheckpointEvery is how often a running task's position and progress
	// are saved.
	CheckpointEvery = 2 * time.Second
	// DefaultBudget bounds a run whose context has no deadline.
	DefaultBudget = 45 * time.Second
	// leaseMargin outlasts the invocation, so a lease is never taken
	// from a runner still at work.
	leaseMargin = 30 * time.Second
)

// Runner works on jobs. It is the job runner's stream processor: the Jobs
// stream hands it each job the moment it is created and again after each
// checkpoint it releases, and the schedule (a run with no records) takes
// up jobs whose runner died, holds back retries, and starts the scheduled
// reconcile.
type Runner struct {
	Store   *Store
	Tasks   Tasks
	Clock   clock.Clock
	Log     *slog.Logger
	Metrics *obs.Metrics
	// Owner names this runner in leases (one per process).
	Owner string
	// ReconcileEvery is how often the schedule starts a reconcile of
	// everything; 0 never.
	ReconcileEvery time.Duration
	// Due lists the jobs a feature asks the schedule to start now (a
	// leaderboard period's close); each job's ID names its work, so a job
	// asked for again, on this tick or a later one, is started once.
	Due []func(ctx context.Context, now time.Time) ([]Job, error)
}

// Process runs the jobs a batch of Jobs stream records names, or, with no
// records, does the scheduled work.
func (r *Runner) Process(ctx context.Context, records []events.DynamoDBEventRecord) error {
	if len(records) == 0 {
		return r.Tick(ctx)
	}
	var ids []string
	seen := map[string]bool{}
	for _, rec := range records {
		id := rec.Change.Keys[schema.AttrJobID].String()
		if rec.EventName == string(events.DynamoDBOperationTypeRemove) || id == "" || seen[id] {
			continue
		}
		seen[id] = true
		ids = append(ids, id)
	}
	for _, id := range ids {
		if ctx.Err() != nil {
			return nil
		}
		if err := r.Work(ctx, id); err != nil {
			return err
		}
	}
	return nil
}

// Tick resumes the running jobs nobody holds, reports the oldest one's
// age, and starts the scheduled reconcile when it is due.
func (r *Runner) Tick(ctx context.Context) error {
	now := r.Clock.Now()
	running, err := r.Store.Running(ctx)
	if err != nil {
		return err
	}
	oldest := time.Duration(0)
	if len(running) > 0 {
		oldest = now.Sub(running[0].StartedAt)
	}
	r.Metrics.Emit(MetricOldestRunningJobAge, max(oldest, 0).Seconds(), obs.Seconds, nil)
	if err := r.schedule(ctx, now); err != nil {
		return err
	}
	for _, j := range running {
		if ctx.Err() != nil {
			return nil
		}
		if err := r.Work(ctx, j.ID); err != nil {
			return err
		}
	}
	return nil
}

// schedule starts a reconcile of everything when the last one started
// ReconcileEvery ago or more. Its ID names the period, so two schedules
// racing start one.
func (r *Runner) schedule(ctx context.Context, now time.Time) error {
	for _, due := range r.Due {
		asked, err := due(ctx, now)
		if err != nil {
			return err
		}
		for _, j := range asked {
			j.State, j.StartedAt, j.Findings.Examples = Running, now, []string{}
			created, err := r.Store.Create(ctx, j)
			if err != nil {
				return err
			}
			if created {
				r.Log.InfoContext(ctx, "scheduled job started", "job_id", j.ID, "kind", j.Kind)
			}
		}
	}
	if r.ReconcileEvery <= 0 {
		return nil
	}
	last, found, err := r.Store.Latest(ctx, Reconcile)
	if err != nil || (found && now.Sub(last.StartedAt) < r.ReconcileEvery) {
		return err
	}
	j := Job{
		ID:   "reconcile-" + now.Truncate(r.ReconcileEvery).UTC().Format("20060102T150405Z"),
		Spec: Spec{Kind: Reconcile, Target: All}, State: Running, StartedAt: now,
	}
	created, err := r.Store.Create(ctx, j)
	if created {
		r.Log.InfoContext(ctx, "scheduled reconcile started", "job_id", j.ID)
	}
	return err
}

// Start creates a job of spec; the Jobs stream hands it to a runner.
func Start(ctx context.Context, s *Store, spec Spec, now time.Time) (Job, error) {
	j := Job{ID: NewID(), Spec: spec, State: Running, StartedAt: now, Findings: Findings{Examples: []string{}}}
	if _, err := s.Create(ctx, j); err != nil {
		return Job{}, err
	}
	return j, nil
}

// Work runs a job until it is done or the invocation's budget is spent,
// if no other runner holds it. Only a failure to reach the Jobs table is
// returned: a task's failure is recorded on the job and retried later,
// and after MaxFailures in a row the job is FAILED.
func (r *Runner) Work(ctx context.Context, id string) error {
	now := r.Clock.Now()
	budget, cancel := clock.Budget(ctx, DefaultBudget)
	defer cancel()
	until := leaseUntil(ctx, now)
	j, ok, err := r.Store.Acquire(ctx, id, r.Owner, until, now)
	if err != nil || !ok {
		return err
	}
	steps := r.Tasks.steps(j.Spec)
	if len(steps) == 0 {
		return r.finish(ctx, j, errs.New(errs.Invalid, "no task does %s of %s", j.Kind, j.Target))
	}
	w := &Work{Progress: j.Progress, Findings: &j.Findings, Job: j.ID, every: CheckpointEvery, saved: time.Now()}
	// checkpointed is the progress (and the count of values checked)
	// saved with the cursor: a run that fails or is cut short by an error
	// goes back to it, since the next goes back to the cursor. What it found drifted, and repaired,
	// it keeps: a repaired value is not found again.
	checkpointed, checked := j.Progress, j.Checked
	w.save = func(ctx context.Context, cursor string) error {
		j.Cursor, j.Progress = cursor, w.Progress
		checkpointed, checked = w.Progress, j.Checked
		return r.Store.Save(ctx, j, r.Owner, until, time.Time{})
	}
	log := r.Log.With("job_id", j.ID, "kind", j.Kind, "target", j.Target)
	for j.Step < len(steps) {
		next, done, err := steps[j.Step].Run(budget, j.Spec, j.Cursor, w)
		j.Progress = w.Progress
		switch {
		case errors.Is(err, ErrLeaseLost):
			log.WarnContext(ctx, "job taken by another runner")
			return nil
		case err != nil && budget.Err() == nil:
			j.failures++
			j.Error = err.Error()
			j.Progress, j.Checked = checkpointed, checked
			if j.failures >= MaxFailures || errs.Is(err, errs.Invalid) || errs.Is(err, errs.NotFound) {
				return r.finish(ctx, j, err)
			}
			log.WarnContext(ctx, "job run failed; retrying later", "error", err.Error(), "failures", j.failures)
			return r.release(ctx, j, r.Clock.Now().Add(RetryAfter))
		case err != nil:
			// Cut short by the deadline mid-call: what it did since its
			// last checkpoint is done again from there, at once (the
			// release's stream record continues it); not a failure.
			j.Progress, j.Checked = checkpointed, checked
			log.InfoContext(ctx, "job cut short; continuing from its checkpoint", "step", j.Step, "error", err.Error())
			return r.release(ctx, j, time.Time{})
		case !done:
			// Out of time (the release's stream record continues it at
			// once), or asleep until its wake time.
			j.Cursor = next
			log.InfoContext(ctx, "job checkpointed", "step", j.Step, "done", j.Progress.Done, "total", j.Progress.Total)
			return r.release(ctx, j, w.wakeAt)
		}
		j.failures, j.Error = 0, ""
		j.Step++
		j.Cursor = ""
		if j.Step < len(steps) {
			w.Progress = Progress{}
		}
	}
	return r.finish(ctx, j, nil)
}

func (r *Runner) release(ctx context.Context, j Job, nextRun time.Time) error {
	err := r.Store.Save(context.WithoutCancel(ctx), j, r.Owner, time.Time{}, nextRun)
	if errors.Is(err, ErrLeaseLost) {
		return nil
	}
	return err
}

// finish records the job DONE, or FAILED with cause, and emits what it
// found.
func (r *Runner) finish(ctx context.Context, j Job, cause error) error {
	j.State, j.FinishedAt = Done, r.Clock.Now()
	if cause != nil {
		j.State, j.Error = Failed, cause.Error()
	}
	if err := r.release(ctx, j, time.Time{}); err != nil {
		return err
	}
	for kind, n := range j.Drift {
		r.Metrics.Count(MetricDrift, int(n), map[string]string{"Kind": kind})
	}
	r.Log.InfoContext(ctx, "job finished", "job_id", j.ID, "kind", j.Kind, "target", j.Target, "state", j.State,
		"checked", j.Checked, "drifted", j.Drifted, "repaired", j.Repaired, "runs", j.Runs, "error", j.Error)
	return nil
}

// leaseUntil is when a run started now must have released its job: the
// end of its invocation, with a margin.
func leaseUntil(ctx context.Context, now time.Time) time.Time {
	left := DefaultBudget
	if deadline, ok := ctx.Deadline(); ok {
		left = time.Until(deadline)
	}
	return now.Add(left + leaseMargin)
}
