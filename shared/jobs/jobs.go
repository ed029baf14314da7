// Package jobs runs the operations jobs an operating team asks for with
// POST /v1/ops/jobs: a rebuild (Redis from DynamoDB), a reconcile (every
// derived value against its truth, drift reported and repaired), a
// recompute (derived DynamoDB state from its truth, the disaster-recovery
// path) and an import (a studio's data loaded from a file, see
// shared/imports). A job outlives any one invocation: the runner works on it until
// its invocation's budget is spent, checkpoints in the Jobs table, and the
// next invocation continues from there. A lease keeps two runners off the
// same job. The features do the work (each registers its Tasks); this
// package owns the job's life.
package jobs

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/rallyhq/rally/shared/errs"
)

// Kind is what a job does.
type Kind string

// Kinds.
const (
	Rebuild   Kind = "rebuild"
	Reconcile Kind = "reconcile"
	Recompute Kind = "recompute"
	// Import loads a JSON Lines file (Spec.Source) as if each line had
	// been submitted through the API; it has no target.
	Import Kind = "import"
	// Close archives the final standings of one ended period of a periodic
	// leaderboard (target leaderboard, ID and Period): the schedule starts
	// one per board period when it ends (see leaderboards.Closer).
	Close Kind = "close"
)

// Target is the derived state a job works on.
type Target string

// Targets. All runs every target the kind has, in this order.
const (
	Counters    Target = "counters"
	Trending    Target = "trending"
	Leaderboard Target = "leaderboard"
	Streaks     Target = "streaks"
	// Friends is the reverse friend entries of Players (recompute only).
	Friends Target = "friends"
	All     Target = "all"
)

// Targets lists the targets All runs, in order.
func Targets() []Target { return []Target{Counters, Trending, Leaderboard, Streaks, Friends} }

// State is where a job is in its life.
type State string

// States.
const (
	Running State = "RUNNING"
	Done    State = "DONE"
	Failed  State = "FAILED"
)

// Spec is what was asked for.
type Spec struct {
	Kind   Kind
	Target Target
	// ID names one leaderboard (target leaderboard); empty means every one.
	ID string
	// Period names one period of it; empty means its current (and
	// previous) periods.
	Period string
	// Source is the file an import reads: s3://bucket/key, or, on the
	// local stack, file:///absolute/path.
	Source string
}

// Source schemes an import reads from.
const (
	SchemeS3   = "s3://"
	SchemeFile = "file://"
)

// Validate reports a spec that names no job: every kind runs on every
// target (each feature registers a task for each).
func (s Spec) Validate() error {
	switch s.Kind {
	case Rebuild, Reconcile, Recompute:
	case Import:
		return s.validateImport()
	case Close:
		if s.Target != Leaderboard || s.ID == "" || s.Period == "" || s.Source != "" {
			return errs.Field("period", `a close names one period of one leaderboard: target "leaderboard", id and period`)
		}
		return nil
	default:
		return errs.Field("kind", `must be one of rebuild, reconcile, recompute, import, close`)
	}
	if s.Source != "" {
		return errs.Field("source", `names the file of an import: it needs kind "import"`)
	}
	if s.Target != All && !slices.Contains(Targets(), s.Target) {
		return errs.Field("target", `must be one of counters, trending, leaderboard, streaks, friends, all`)
	}
	if s.Target == Friends && s.Kind != Recompute {
		return errs.Field("target", `friends has only a recompute: kind "recompute"`)
	}
	if s.ID != "" && s.Target != Leaderboard {
		return errs.Field("id", `names a leaderboard: it needs target "leaderboard"`)
	}
	if s.Period != "" && s.ID == "" {
		return errs.Field("period", "needs id (the leaderboard whose period it is)")
	}
	return nil
}

// validateImport accepts an import of one file and nothing else: the
// source names an object (s3://bucket/key) or an absolute local path
// (file:///path); the runner refuses file sources outside the local stack.
func (s Spec) validateImport() error {
	if s.Target != "" {
		return errs.Field("target", "an import has no target: its file says what it loads")
	}
	if s.ID != "" || s.Period != "" {
		return errs.Field("id", "an import has no id or period: its file names the boards")
	}
	switch {
	case s.Source == "":
		return errs.Field("source", "is required: s3://bucket/key or, locally, file:///absolute/path")
	case strings.HasPrefix(s.Source, SchemeS3):
		bucket, key, _ := strings.Cut(strings.TrimPrefix(s.Source, SchemeS3), "/")
		if bucket == "" || key == "" {
			return errs.Field("source", "must name a bucket and a key: s3://bucket/key")
		}
	case strings.HasPrefix(s.Source, SchemeFile):
		if path := strings.TrimPrefix(s.Source, SchemeFile); !strings.HasPrefix(path, "/") || strings.Contains(path, "/../") {
			return errs.Field("source", "must name an absolute path: file:///absolute/path")
		}
	default:
		return errs.Field("source", "must be s3://bucket/key or, locally, file:///absolute/path")
	}
	return nil
}

// Job is one job: what was asked, how far it got, and what it found (the
// Jobs table's item is its stored form, GET /v1/ops/jobs/{job_id} its
// answer).
type Job struct {
	ID string
	Spec
	State      State
	Progress   Progress
	Findings   // checked, drifted, repaired, examples
	Error      string
	StartedAt  time.Time
	FinishedAt time.Time
	// Runs counts the invocations that worked on the job.
	Runs int
	// Step and Cursor are the checkpoint: the step of the job's plan under
	// way (one per target) and how far into it (the task's own cursor).
	Step   int
	Cursor string
	// failures counts the runs that failed in a row.
	failures int
}

// Progress is how much of the job's work is done, in the unit of the step
// under way (members of a board, targets, players).
type Progress struct {
	Done  int64 `json:"done"`
	Total int64 `json:"total"`
}

// Findings are what a reconcile found (a rebuild or recompute counts what
// it checked and rewrote too).
type Findings struct {
	Checked  int64
	Drifted  int64
	Repaired int64
	// Rejected counts the lines an import refused (bad JSON, an unknown
	// board, …); Examples names some of them by line number.
	Rejected int64
	// Examples names some drifted values, at most MaxExamples.
	Examples []string
	// Drift counts what drifted per kind of value (count, board, …), for
	// the Drift metric.
	Drift map[string]int64
}

// MaxExamples bounds the examples a job keeps.
const MaxExamples = 20

// Found records one drifted value of kind, described by example, and
// whether it was repaired.
func (f *Findings) Found(kind, example string, repaired bool) {
	f.Drifted++
	if repaired {
		f.Repaired++
	}
	if f.Drift == nil {
		f.Drift = map[string]int64{}
	}
	f.Drift[kind]++
	if len(f.Examples) < MaxExamples {
		f.Examples = append(f.Examples, kind+": "+example)
	}
}

// Reject records one line an import refused, described by example.
func (f *Findings) Reject(example string) {
	f.Rejected++
	if len(f.Examples) < MaxExamples {
		f.Examples = append(f.Examples, "rejected: "+example)
	}
}

// Key names a task: a kind of job on a target.
type Key struct {
	Kind   Kind
	Target Target
}

// Task carries out one kind of job on one target, a part at a time.
type Task interface {
	// Run works from cursor ("" at the start) until the work is done
	// (done=true) or ctx is done (it returns the cursor to continue from).
	// It reports progress and findings through w, and may checkpoint
	// there; a checkpoint that fails (the lease was lost) ends the run.
	Run(ctx context.Context, spec Spec, cursor string, w *Work) (next string, done bool, err error)
}

// RunFunc is a task's Run written as a function.
type RunFunc func(ctx context.Context, spec Spec, cursor string, w *Work) (next string, done bool, err error)

// Named makes a task of run. One task registered for two targets (counts
// and all-time trending are one value) runs once in an All job: steps
// are told apart by name.
func Named(name string, run RunFunc) Task { return named{name, run} }

type named struct {
	name string
	run  RunFunc
}

func (n named) Run(ctx context.Context, spec Spec, cursor string, w *Work) (string, bool, error) {
	return n.run(ctx, spec, cursor, w)
}

// Tasks are the tasks the features register, by kind and target.
type Tasks map[Key]Task

// steps is a spec's plan: the tasks it runs, in order.
func (t Tasks) steps(s Spec) []Task {
	if s.Target != All {
		if task, ok := t[Key{s.Kind, s.Target}]; ok {
			return []Task{task}
		}
		return nil
	}
	var out []Task
	ran := map[string]bool{}
	for _, target := range Targets() {
		task, ok := t[Key{s.Kind, target}]
		if n, isNamed := task.(named); isNamed {
			if ran[n.name] {
				continue
			}
			ran[n.name] = true
		}
		if ok {
			out = append(out, task)
		}
	}
	return out
}

// Work is what a running task reports to the runner.
type Work struct {
	// Progress of the step under way; the task sets Total when it knows it.
	Progress Progress
	Findings *Findings
	// Job is the id of the job the work is for, the same on every run of
	// it ("" for a task run outside the runner): what a task writes to
	// recognise its own earlier, cut-short run is keyed on it.
	Job    string
	save   func(ctx context.Context, cursor string) error
	every  time.Duration
	saved  time.Time
	wakeAt time.Time
}

// NewWork is a Work whose checkpoints call save (at most every
// CheckpointEvery): a task run outside the runner (a processor's repair)
// keeps its position where it likes.
func NewWork(save func(ctx context.Context, cursor string) error) *Work {
	return &Work{Findings: &Findings{}, save: save, every: CheckpointEvery, saved: time.Now()}
}

// Positions keep a task's position when it runs outside the runner
// (cachegen.Progress keeps it in Redis).
type Positions interface {
	Load(ctx context.Context) (string, error)
	Save(ctx context.Context, cursor string) error
	Reset(ctx context.Context) error
}

// Continue runs a task outside the runner (a processor's Redis repair)
// from the position p holds, saving it as it goes and when ctx ends; done
// is true, and the position cleared, once the task finished.
func Continue(ctx context.Context, p Positions, spec Spec, run RunFunc) (done bool, err error) {
	cursor, err := p.Load(ctx)
	if err != nil {
		return false, err
	}
	next, done, err := run(ctx, spec, cursor, NewWork(p.Save))
	switch {
	case err != nil:
		return false, err
	case !done:
		return false, p.Save(context.WithoutCancel(ctx), next)
	}
	return true, p.Reset(ctx)
}

// Sleep asks to be run again no earlier than at: the task returns its
// cursor, not done, and the runner holds the job back until then (the
// schedule takes it up).
func (w *Work) Sleep(at time.Time) { w.wakeAt = at }

// ErrLeaseLost means another runner took the job: the run must end.
var ErrLeaseLost = errors.New("jobs: the job's lease was lost")

// Due tells whether the next Checkpoint will save: a task whose position
// costs something to take (a flush) asks first.
func (w *Work) Due() bool { return w.save != nil && time.Since(w.saved) >= w.every }

// Checkpoint saves the task's position and the progress so far, at most
// every few seconds (progress is then visible while the job runs, and a
// crash loses little). It returns ErrLeaseLost when the runner no longer
// holds the job.
func (w *Work) Checkpoint(ctx context.Context, cursor string) error {
	if !w.Due() {
		return nil
	}
	w.saved = time.Now()
	return w.save(ctx, cursor)
}
