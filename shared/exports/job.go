package exports

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"golang.org/x/sync/errgroup"

	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/obs"
	"github.com/rallyhq/rally/shared/privacy"
	"github.com/rallyhq/rally/shared/streams"
)

// Metric names the export processor emits.
const (
	// MetricOldestPendingAge is the age of the oldest pending export, on
	// every scheduled tick (0 when none waits).
	MetricOldestPendingAge = "OldestPendingExportAgeSeconds"
	MetricExportsReady     = "ExportsReady"
	MetricExportFailures   = "ExportFailures"
)

// Defaults of a Job's bounds.
const (
	// DefaultPerRun bounds the items one run writes: a chunk of a few MB
	// at most, however many items the user has.
	DefaultPerRun = 20_000
	// DefaultPageSize is how many items a part reads at once.
	DefaultPageSize = 500
	// DefaultChunkBytes: a run holding this much writes it as a chunk
	// and checkpoints before it reads on.
	DefaultChunkBytes = 4 << 20
	// DefaultBudget bounds a run whose context has no deadline.
	DefaultBudget = 45 * time.Second
	// RetryAfter holds a failed export back before the next attempt (the
	// schedule takes it up).
	RetryAfter = time.Minute
	// leaseMargin outlasts the invocation, so a lease is never taken from
	// a run still at work.
	leaseMargin = 30 * time.Second
)

// Erasures is where the job learns whether a user is being, or was,
// erased (privacy.Records).
type Erasures interface {
	// Find reads the user's last erasure record, if any.
	Find(ctx context.Context, user string) (privacy.Erasure, bool, error)
}

// Job writes exports: the export processor's handler.
type Job struct {
	Records   *Records
	Erasures  Erasures
	Documents Documents
	// Parts are written in order, each under its name.
	Parts   []Part
	Clock   clock.Clock
	Log     *slog.Logger
	Metrics *obs.Metrics
	// Owner names this process in leases.
	Owner string
	// PerRun bounds the items one run writes (DefaultPerRun); PageSize
	// how many a part reads at once (DefaultPageSize); ChunkBytes how much
	// a run holds before it writes a chunk and checkpoints
	// (DefaultChunkBytes). A run also stops at its invocation's budget.
	PerRun, PageSize, ChunkBytes int
	// Parallel is how many exports run at once (default 4), Batch how
	// many pending ones a tick takes up (default 8).
	Parallel int
	Batch    int32
}

func or(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

// Process runs the exports a batch of Exports stream records names: each
// new one, and each one a run left to be continued (its lease given up,
// no failure holding it back). A scheduled tick (no records) resumes the
// pending exports a crash or a failure left. The batch itself never fails
// on an export: a run that fails leaves its export pending for later.
func (j *Job) Process(ctx context.Context, records []events.DynamoDBEventRecord) error {
	type ref struct{ user, id string }
	var queued []ref
	if len(records) == 0 {
		pending, err := j.Records.Pending(ctx, int32(or(int(j.Batch), 8)))
		if err != nil {
			return err
		}
		var age time.Duration
		if len(pending) > 0 {
			age = j.Clock.Now().Sub(pending[0].RequestedAt)
		}
		j.Metrics.Emit(MetricOldestPendingAge, max(age, 0).Seconds(), obs.Seconds, nil)
		for _, w := range pending {
			queued = append(queued, ref{w.UserID, w.ID})
		}
	}
	now := j.Clock.Now()
	seen := map[ref]bool{}
	for _, rec := range records {
		if user, id, ok := toContinue(rec, now); ok && !seen[ref{user, id}] {
			seen[ref{user, id}] = true
			queued = append(queued, ref{user, id})
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(or(j.Parallel, 4))
	for _, r := range queued {
		g.Go(func() error {
			j.run(gctx, r.user, r.id)
			return nil
		})
	}
	return g.Wait()
}

// toContinue reports the export a stream record asks to be worked on: a
// pending one no run holds, not held back after a failure. A lease, a
// checkpoint under a lease and the completion are a run's own changes.
func toContinue(rec events.DynamoDBEventRecord, now time.Time) (user, id string, ok bool) {
	var r record
	if rec.Change.NewImage == nil || streams.Unmarshal(rec.Change.NewImage, &r) != nil {
		return "", "", false
	}
	if r.Status != string(Pending) || r.LeaseUntil != "" || r.UserID == "" || r.ID == "" {
		return "", "", false
	}
	if r.RetryAt != "" && ddb.ParseTime(r.RetryAt).After(now) {
		return "", "", false
	}
	return r.UserID, r.ID, true
}

// run works on one export as far as one run may, logging what stopped it
// under the user's log hash.
func (j *Job) run(ctx context.Context, user, id string) {
	ctx = obs.WithUsers(ctx, user)
	log := j.Log.With(obs.User(user), "export_id", id)
	done, err := j.Run(ctx, user, id)
	switch {
	case err == nil && done:
		j.Metrics.Count(MetricExportsReady, 1, nil)
		log.InfoContext(ctx, "export ready")
	case err == nil:
	case errors.Is(err, errLeased), errors.Is(err, errGone):
		log.InfoContext(ctx, "export left to another run", "reason", err.Error())
	default:
		j.Metrics.Count(MetricExportFailures, 1, nil)
		log.ErrorContext(ctx, "export run failed; a later run resumes it", "error", err.Error())
	}
}

// Run works on user's export id until its document is ready (done) or the
// run's bound is reached (its checkpoint released, so its stream record
// continues it at once). A pending export of a user whose erasure was
// asked for since is left alone: the erasure deletes it.
func (j *Job) Run(ctx context.Context, user, id string) (done bool, err error) {
	budget, cancel := clock.Budget(ctx, DefaultBudget)
	defer cancel()
	now := j.Clock.Now()
	e, ok, err := j.Records.Get(ctx, user, id)
	if err != nil || !ok || e.Status != Pending {
		return false, err
	}
	if erased, err := j.erasedSince(ctx, e); err != nil || erased {
		return false, err
	}
	e, err = j.Records.Lease(ctx, user, id, j.Owner, now, leaseUntil(ctx, now))
	if err != nil {
		return false, err
	}
	c, done, werr := j.write(budget, e)
	if werr != nil && budget.Err() != nil {
		// Cut short by the budget mid-call: what it wrote is
		// checkpointed, and its stream record continues it at once.
		werr = nil
	}
	if errors.Is(werr, errGone) {
		return false, werr
	}
	if werr != nil {
		failures := e.Failures + 1
		if rerr := j.Records.Release(context.WithoutCancel(ctx), e, j.Owner, c, j.Clock.Now().Add(RetryAfter), failures); rerr != nil {
			j.Log.WarnContext(ctx, "export lease not released; it runs out by itself", "error", rerr.Error())
		}
		return false, werr
	}
	if !done {
		return false, j.Records.Release(context.WithoutCancel(ctx), e, j.Owner, c, time.Time{}, 0)
	}
	return true, j.finish(context.WithoutCancel(ctx), e, c)
}

// erasedSince reports whether the user's erasure was asked for since the
// export was (or is under way).
func (j *Job) erasedSince(ctx context.Context, e Export) (bool, error) {
	er, ok, err := j.Erasures.Find(ctx, e.UserID)
	if err != nil || !ok {
		return false, err
	}
	return er.Status == privacy.Pending || !er.RequestedAt.Before(e.RequestedAt), nil
}

// leaseUntil is when a run started now must have given its export up: the
// end of its invocation, with a margin.
func leaseUntil(ctx context.Context, now time.Time) time.Time {
	left := DefaultBudget
	if deadline, ok := ctx.Deadline(); ok {
		left = time.Until(deadline)
	}
	return now.Add(left + leaseMargin)
}

// header opens the document: who and what it is about.
func header(e Export) ([]byte, error) {
	h, err := json.Marshal(struct {
		UserID        string    `json:"user_id"`
		ExportID      string    `json:"export_id"`
		RequestedAt   time.Time `json:"requested_at"`
		FormatVersion int       `json:"format_version"`
	}{e.UserID, e.ID, e.RequestedAt, FormatVersion})
	if err != nil {
		return nil, err
	}
	return h[:len(h)-1], nil // the object stays open for the parts
}

// write appends to e's document from its checkpoint until every part is
// written (done) or the run's bound is reached, a chunk at a time, and
// returns the checkpoint reached. Each chunk is written before the
// checkpoint that counts it is saved; a run that dies in between leaves a
// chunk the next run writes again, whole, from the same checkpoint.
func (j *Job) write(ctx context.Context, e Export) (Checkpoint, bool, error) {
	c := e.Checkpoint
	var buf bytes.Buffer
	flush := func() error {
		if buf.Len() == 0 {
			return nil
		}
		if err := j.Documents.Put(context.WithoutCancel(ctx), chunkKey(e, c.Chunks), buf.Bytes()); err != nil {
			return fmt.Errorf("write chunk %d: %w", c.Chunks, err)
		}
		c.Chunks++
		if err := j.Records.Save(context.WithoutCancel(ctx), e, j.Owner, c); err != nil {
			// The record is gone (an erasure) or another run took the
			// export: the chunk is someone else's to keep or delete.
			if errors.Is(err, errGone) {
				_ = j.Documents.Delete(context.WithoutCancel(ctx), chunkKey(e, c.Chunks-1))
			}
			return err
		}
		buf.Reset()
		return nil
	}
	// at is where the document stands with what buf holds; c moves to
	// it when buf is written.
	at := c
	if at == (Checkpoint{}) {
		h, err := header(e)
		if err != nil {
			return c, false, err
		}
		buf.Write(h)
	}
	perRun, pageSize, chunkBytes := or(j.PerRun, DefaultPerRun), or(j.PageSize, DefaultPageSize), or(j.ChunkBytes, DefaultChunkBytes)
	items := 0
	for at.Part < len(j.Parts) {
		p := j.Parts[at.Part]
		_, single := p.(Single)
		if !at.Opened {
			name, err := json.Marshal(p.Name())
			if err != nil {
				return c, false, err
			}
			buf.WriteByte(',')
			buf.Write(name)
			buf.WriteByte(':')
			if !single {
				buf.WriteByte('[')
			}
			at.Opened = true
		}
		if items >= perRun || ctx.Err() != nil {
			break
		}
		list, next, err := p.Export(ctx, e.UserID, at.Cursor, min(pageSize, perRun-items))
		if err != nil {
			// What was read before this page is whole: keep it.
			c = at
			if ferr := flush(); ferr != nil {
				return c, false, ferr
			}
			return c, false, fmt.Errorf("export part %s: %w", p.Name(), err)
		}
		for _, it := range list {
			if single && at.Written > 0 {
				break
			}
			b, err := json.Marshal(it)
			if err != nil {
				return c, false, fmt.Errorf("export part %s: encode an item: %w", p.Name(), err)
			}
			if at.Written > 0 {
				buf.WriteByte(',')
			}
			buf.Write(b)
			at.Written++
			items++
		}
		at.Cursor = next
		if next == "" {
			switch {
			case !single:
				buf.WriteByte(']')
			case at.Written == 0:
				buf.WriteString("null")
			}
			at = Checkpoint{Part: at.Part + 1, Chunks: at.Chunks}
		}
		if buf.Len() >= chunkBytes {
			c = at
			if err := flush(); err != nil {
				return c, false, err
			}
			at.Chunks = c.Chunks
		}
	}
	done := at.Part >= len(j.Parts)
	if done {
		buf.WriteByte('}')
	}
	c = at
	if err := flush(); err != nil {
		return c, false, err
	}
	return c, done, nil
}

// finish joins the chunks into the document, marks the export READY and
// deletes the chunks. A record gone meanwhile (an erasure) takes the
// document with it.
func (j *Job) finish(ctx context.Context, e Export, c Checkpoint) error {
	object := DocumentKey(e)
	chunks := chunkKeys(e, c.Chunks)
	if err := j.Documents.Join(ctx, object, chunks); err != nil {
		return j.fail(ctx, e, c, fmt.Errorf("join the document: %w", err))
	}
	now := j.Clock.Now()
	if err := j.Records.Complete(ctx, e, j.Owner, object, now, now.Add(Retention)); err != nil {
		if errors.Is(err, errGone) {
			_ = j.Documents.DeletePrefix(ctx, exportPrefix(e))
			return err
		}
		return j.fail(ctx, e, c, err)
	}
	if err := j.Documents.Delete(ctx, chunks...); err != nil {
		// The bucket's lifecycle removes them in a few days anyway.
		j.Log.WarnContext(ctx, "export chunks not deleted", "error", err.Error())
	}
	return nil
}

// fail gives a failed run's export up, held back for RetryAfter.
func (j *Job) fail(ctx context.Context, e Export, c Checkpoint, cause error) error {
	if err := j.Records.Release(ctx, e, j.Owner, c, j.Clock.Now().Add(RetryAfter), e.Failures+1); err != nil {
		j.Log.WarnContext(ctx, "export lease not released; it runs out by itself", "error", err.Error())
	}
	return cause
}

var _ streams.BatchFunc = (*Job)(nil).Process
