package privacy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"golang.org/x/sync/errgroup"

	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/obs"
	"github.com/rallyhq/rally/shared/streams"
)

// MetricOldestPendingAge is how long the oldest erasure still pending has
// waited since it was requested, reported on every scheduled tick (0 when
// none waits): an erasure that never completes shows as an age that grows.
const MetricOldestPendingAge = "OldestPendingErasureAgeSeconds"

// Part is one place an erasure clears; each feature implements its own
// (reactions.Eraser, leaderboards.Eraser, streaks.Eraser,
// idempotency.Eraser, players.Eraser, analytics.Eraser). Erase returns done once nothing of
// the user is left there, and is harmless to call again; done is false,
// with no error, while it waits on a stream processor, and a later run
// resumes.
type Part interface {
	Name() string
	Erase(ctx context.Context, user string) (done bool, err error)
}

// A Gate is a part the parts after it wait for: until it is done, a run
// stops there. The dead-letter archive is one: a redrive holding a batch
// of the user's records must finish (and the records be scrubbed) before
// the user's reactions, scores and streaks are deleted and their
// deletions counted, or a change applied late could bring the user back.
type Gate interface {
	Part
	Gates() bool
}

// Job carries out erasures: the erasure processor's handler.
type Job struct {
	Records *Records
	// Parts are erased in order (a Gate stops a run until it is done);
	// the analytics secret goes last, so events shipped meanwhile still
	// carry the user's PID.
	Parts   []Part
	Clock   clock.Clock
	Log     *slog.Logger
	Metrics *obs.Metrics
	// Lease bounds one run of one erasure (default 50s, under the
	// processor's 60s timeout); a crashed run's erasure is taken up again
	// once its lease ran out.
	Lease time.Duration
	// Parallel is how many erasures run at once (default 4), and Batch
	// how many pending ones a tick takes up (default 8: two rounds fit the
	// processor's timeout even when each waits on the counter processor).
	Parallel int
	Batch    int32
}

func (j *Job) lease() time.Duration {
	if j.Lease > 0 {
		return j.Lease
	}
	return 50 * time.Second
}

// Process starts the erasures a stream batch requested; a scheduled tick
// (an empty batch) resumes every erasure still pending. A run that fails
// or waits leaves its erasure pending for the next tick, so the batch
// itself never fails on it: the request is already durable.
func (j *Job) Process(ctx context.Context, records []events.DynamoDBEventRecord) error {
	var hashes []string
	if len(records) == 0 {
		batch := j.Batch
		if batch == 0 {
			batch = 8
		}
		pending, err := j.Records.Pending(ctx, batch)
		if err != nil {
			return err
		}
		var age time.Duration
		if len(pending) > 0 {
			age = j.Clock.Now().Sub(pending[0].RequestedAt)
		}
		j.Metrics.Emit(MetricOldestPendingAge, age.Seconds(), obs.Seconds, nil)
		for _, w := range pending {
			hashes = append(hashes, w.Hash)
		}
	}
	for _, rec := range records {
		if h, ok := requested(rec); ok {
			hashes = append(hashes, h)
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	parallel := j.Parallel
	if parallel == 0 {
		parallel = 4
	}
	g.SetLimit(parallel)
	for _, h := range hashes {
		g.Go(func() error {
			j.run(gctx, h)
			return nil
		})
	}
	return g.Wait()
}

// requested reports the erasure a stream record starts: a new record, or
// a new erasure id on a completed one. Other changes (leases, progress,
// completion) are the job's own and start nothing.
func requested(rec events.DynamoDBEventRecord) (string, bool) {
	var now, before record
	if rec.Change.NewImage == nil || streams.Unmarshal(rec.Change.NewImage, &now) != nil {
		return "", false
	}
	if now.Status != string(Pending) || now.UserHash == "" {
		return "", false
	}
	if rec.Change.OldImage != nil && streams.Unmarshal(rec.Change.OldImage, &before) == nil && before.ID == now.ID {
		return "", false
	}
	return now.UserHash, true
}

// run carries out one erasure as far as it can, logging what stopped it
// under the user's log hash (never the user id, nor the record's hash,
// which would tie log lines to the Erasures table).
func (j *Job) run(ctx context.Context, hash string) {
	user, err := j.erase(ctx, hash)
	log := j.Log
	if user != "" {
		ctx = obs.WithUsers(ctx, user)
		log = log.With(obs.User(user))
	}
	switch {
	case err == nil:
	case errors.Is(err, ErrNotYet), errors.Is(err, errLeased):
		j.Metrics.Count("ErasuresWaiting", 1, nil)
		log.InfoContext(ctx, "erasure continues later", "reason", err.Error())
	default:
		j.Metrics.Count("ErasureFailures", 1, nil)
		log.ErrorContext(ctx, "erasure run failed; the next tick resumes it", "error", err.Error())
	}
}

// Run carries out the erasure recorded under hash: nil when it completed
// (or there was nothing pending), ErrNotYet or errLeased when it must wait,
// another error when a part failed. Every part is idempotent, so whatever
// stopped a run, the next one finishes the job.
func (j *Job) Run(ctx context.Context, hash string) error {
	_, err := j.erase(ctx, hash)
	return err
}

// erase is Run, also returning the user erased ("" when none was pending).
func (j *Job) erase(ctx context.Context, hash string) (string, error) {
	e, ok, err := j.Records.Get(ctx, hash)
	if err != nil {
		return "", err
	}
	if !ok || e.Status != Pending {
		return "", nil
	}
	ctx = obs.WithUsers(ctx, e.UserID)
	start := j.Clock.Now()
	if err := j.Records.Lease(ctx, e, start, start.Add(j.lease())); err != nil {
		return e.UserID, err
	}
	rctx, cancel := context.WithTimeout(ctx, j.lease())
	defer cancel()
	// A part that fails or waits does not hold the others back (Redis
	// down still lets every table be erased); the erasure completes once
	// a run gets through every part.
	var first error
	took := make([]any, 0, 2*len(j.Parts))
	for _, p := range j.Parts {
		began := time.Now()
		done, err := p.Erase(rctx, e.UserID)
		switch {
		case first != nil:
		case err != nil:
			first = fmt.Errorf("erase %s: %w", p.Name(), err)
		case !done:
			first = fmt.Errorf("erase %s: %w", p.Name(), ErrNotYet)
		}
		took = append(took, p.Name()+"_ms", time.Since(began).Milliseconds())
		if g, ok := p.(Gate); ok && g.Gates() && (err != nil || !done) {
			break
		}
	}
	if first != nil {
		if rerr := j.Records.Release(context.WithoutCancel(ctx), e); rerr != nil {
			j.Log.WarnContext(ctx, "erasure lease not released; it runs out by itself", "error", rerr.Error())
		}
		return e.UserID, first
	}
	if err := j.Records.Complete(ctx, e, j.Clock.Now()); err != nil {
		return e.UserID, err
	}
	j.Metrics.Count("ErasuresCompleted", 1, nil)
	j.Metrics.Emit("ErasureSeconds", j.Clock.Now().Sub(e.RequestedAt).Seconds(), obs.Seconds, nil)
	j.Log.InfoContext(ctx, "erasure completed", append([]any{"erasure_id", e.ID, obs.User(e.UserID)}, took...)...)
	return e.UserID, nil
}

var _ streams.BatchFunc = (*Job)(nil).Process
