// Package freshness says how fresh what a stream processor derives is.
// After applying a batch, a processor records its watermark: the time of
// the newest change it applied, and when it applied it. Reads of what it
// derives (counts, trending, leaderboards, streak boards) answer with the
// newest change as their as_of — "this includes every change made up to
// as_of" — so a client can show "updated N s ago", and a stalled processor
// shows as an as_of that stops moving while the clock goes on. Operations
// read the same watermarks to report each processor's lag.
//
// A watermark is kept twice, each copy only ever moving forward: in Redis
// (freshness/mirror), where a read fetches it in the same round trip as
// its data, and in DynamoDB (freshness/dynamo), for reads served without
// Redis and for operations.
//
// The time of a change is the time its writer stored with it (an edge's
// updated_at, a score's updated_at, a streak's updated_at), not the stream
// record's ApproximateCreationDateTime: it is to the millisecond where the
// stream's is to the second, and it is on the same clock as every other
// time the API shows. A deletion (erasure) carries the time of the item it
// deleted, which can only hold a watermark back, never push it ahead.
//
// With several shards read in parallel, a watermark is the newest change
// of any shard: a shard that lags behind another is not seen. Changes to
// one item stay in one shard, in order.
package freshness

import (
	"context"
	"log/slog"
	"time"

	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/obs"
)

// Watermark is how far a processor got.
type Watermark struct {
	// NewestChange is the time of the newest change the processor applied.
	NewestChange time.Time
	// AppliedAt is when it applied that change, by its own clock.
	AppliedAt time.Time
}

// Lag is how long the newest change waited before it was applied.
func (w Watermark) Lag() time.Duration { return w.AppliedAt.Sub(w.NewestChange) }

// Advancer keeps, for each processor, the watermark with the newest
// change: advancing to an older or equal one changes nothing.
type Advancer interface {
	Advance(ctx context.Context, processor string, w Watermark) error
}

// Getter reads a processor's watermark; found is false before the
// processor applied its first change.
type Getter interface {
	Get(ctx context.Context, processor string) (w Watermark, found bool, err error)
}

// Store is the durable copy of every processor's watermark.
type Store interface {
	Advancer
	Getter
	// List returns the watermark of every processor that records one
	// (routes.Watermarked) and has applied a change, by function name.
	List(ctx context.Context) (map[string]Watermark, error)
}

// MetricWatermarkFailures counts watermarks a processor could not record.
const MetricWatermarkFailures = "WatermarkFailures"

// Recorder is a processor's side: after applying a batch, it records the
// batch's newest change, once, in Redis and in DynamoDB.
type Recorder struct {
	// Processor is the processor's function name (routes.Processor.Function).
	Processor string
	// Fast is the copy reads fetch with their data (Redis); Durable the
	// one reads without Redis and operations use (DynamoDB).
	Fast, Durable Advancer
	Clock         clock.Clock
	Log           *slog.Logger
	Metrics       *obs.Metrics
}

// Applied records that changes up to newest were applied. A zero newest
// (a scheduled tick, a batch with nothing dated for this processor)
// records nothing. A failure is logged and counted, not returned: the
// changes are applied, and a watermark left behind only understates
// freshness until the next batch moves it. A nil Recorder records nothing.
func (r *Recorder) Applied(ctx context.Context, newest time.Time) {
	if r == nil || newest.IsZero() {
		return
	}
	w := Watermark{NewestChange: newest.UTC(), AppliedAt: clock.Now(r.Clock)}
	// Redis first: a read that sees the new watermark there also sees the
	// data, which the processor wrote before calling Applied.
	for _, c := range []struct {
		where string
		to    Advancer
	}{{"redis", r.Fast}, {"dynamodb", r.Durable}} {
		if c.to == nil {
			continue
		}
		if err := c.to.Advance(ctx, r.Processor, w); err != nil {
			r.Metrics.Count(MetricWatermarkFailures, 1, nil)
			if r.Log != nil {
				r.Log.WarnContext(ctx, "watermark not recorded", "processor", r.Processor, "in", c.where, "error", err.Error())
			}
		}
	}
}

// Reads says how fresh the reads of one processor's derived data are.
type Reads struct {
	// Processor is the function name of the processor that derives the
	// data read (routes.Processor.Function).
	Processor string
	// Durable is the DynamoDB copy of the watermarks.
	Durable Getter
	Clock   clock.Clock
	Log     *slog.Logger
}

// AsOf is the as_of of a read from Redis: newest is the watermark's newest
// change, fetched with the data (zero when Redis had no watermark: it lost
// it, and the processor has not applied a batch since), else the durable
// watermark's.
func (r Reads) AsOf(ctx context.Context, newest time.Time) time.Time {
	if !newest.IsZero() {
		return newest.UTC()
	}
	return r.DurableAsOf(ctx)
}

// DurableAsOf is the as_of of a read served from DynamoDB's derived items
// (durable counts, a stored snapshot): the durable watermark's newest
// change. Before the processor applied any change there is nothing it
// could be behind on, so the answer is as of now; so it is when the
// watermark cannot be read, rather than failing a read that has its data.
func (r Reads) DurableAsOf(ctx context.Context) time.Time {
	if r.Durable != nil {
		w, found, err := r.Durable.Get(ctx, r.Processor)
		switch {
		case err != nil:
			if r.Log != nil {
				r.Log.WarnContext(ctx, "watermark unreadable; as_of is the read time", "processor", r.Processor, "error", err.Error())
			}
		case found:
			return w.NewestChange
		}
	}
	return clock.Now(r.Clock)
}
