package analytics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/obs"
	"github.com/rallyhq/rally/shared/schema"
	"github.com/rallyhq/rally/shared/streams"
)

// Metric names.
const (
	MetricShipped = "EventsShipped"
	MetricRetried = "EventsRetried"
	MetricFailed  = "EventsFailed"
	// MetricLag is the age of the batch's oldest record when it is shipped.
	MetricLag = "AnalyticsLag"
)

// DefaultAttempts is how many times one invocation sends an event before
// leaving it to the event source mapping's retries.
const DefaultAttempts = 5

// Shipper is the analytics shipper: it maps the records of the Reactions,
// ScoreEvents and Activity streams to events, pseudonymises their users,
// and sends each event to the sink once. Exactly once rests on three
// things: event ids derived from the stream record, a marker per event
// written after the sink accepted it (and checked before sending), and
// reporting the earliest record whose event was not accepted, so the event
// source mapping redelivers from there and nothing after it is lost.
type Shipper struct {
	Tables schema.Names
	// Decoders read the source tables' records.
	Decoders Decoders
	PIDs     *Pseudonyms
	Shipped  *Shipped
	Sink     Sink
	Clock    clock.Clock
	Log      *slog.Logger
	Metrics  *obs.Metrics
	// Attempts bounds the sends of one event per invocation (default 5).
	Attempts int
	// Backoff is the pause before retry n (0-based); the default is
	// 100ms·2^n with jitter.
	Backoff func(attempt int) time.Duration
}

// pending is one mapped event and the record it came from.
type pending struct {
	record int
	user   string
	event  Event
}

// Process ships one stream batch; it is a streams.BatchFunc. An empty
// batch (a scheduled tick) has nothing to do.
func (s *Shipper) Process(ctx context.Context, records []events.DynamoDBEventRecord) error {
	if len(records) == 0 {
		return nil
	}
	log := s.logger()
	s.lag(records)

	// Map up to the first record that cannot be read; what comes before it
	// is still shipped.
	var (
		batch   []pending
		stopAt  = -1
		stopErr error
		seen    = map[string]bool{}
	)
	for i, rec := range records {
		source, ok := SourceOf(rec.EventSourceArn, s.Tables)
		if !ok {
			stopAt, stopErr = i, fmt.Errorf("analytics: record %s comes from an unknown table (%s)", rec.Change.SequenceNumber, rec.EventSourceArn)
			break
		}
		ev, user, ok, err := s.Decoders.Map(source, rec)
		if err != nil {
			stopAt, stopErr = i, err
			break
		}
		if ok && !seen[ev.EventID] {
			seen[ev.EventID] = true
			batch = append(batch, pending{record: i, user: user, event: ev})
		}
	}
	if stopErr != nil {
		log.ErrorContext(ctx, "analytics record cannot be mapped", "record", stopAt, "error", stopErr.Error())
	}

	failedAt, sendErr := s.ship(ctx, batch)
	if sendErr != nil && failedAt < 0 {
		// Nothing reached the sink: the whole batch is retried.
		return sendErr
	}
	from, err := stopAt, stopErr
	if failedAt >= 0 && (from < 0 || failedAt < from) {
		from, err = failedAt, sendErr
	}
	if from < 0 {
		return nil
	}
	return &streams.PartialError{From: from, Err: err}
}

// ship sends the events not shipped before. It returns the index of the
// earliest record whose event was not accepted (-1 when all were) and why,
// or only an error when it could not start.
func (s *Shipper) ship(ctx context.Context, batch []pending) (failedAt int, err error) {
	if len(batch) == 0 {
		return -1, nil
	}
	ids := make([]string, len(batch))
	for i, p := range batch {
		ids[i] = p.event.EventID
	}
	unsent, err := s.Shipped.Filter(ctx, ids)
	if err != nil {
		return -1, err
	}
	if len(unsent) == 0 {
		return -1, nil
	}
	unsentIDs := make(map[string]bool, len(unsent))
	for _, id := range unsent {
		unsentIDs[id] = true
	}
	var queue []pending
	since := map[string]time.Time{}
	for _, p := range batch {
		if unsentIDs[p.event.EventID] {
			queue = append(queue, p)
			if t, ok := since[p.user]; !ok || p.event.OccurredAt.Before(t) {
				since[p.user] = p.event.OccurredAt
			}
		}
	}
	pids, err := s.PIDs.PIDsSince(ctx, since)
	if err != nil {
		return -1, err
	}
	for i := range queue {
		queue[i].event.UserPID = pids[queue[i].user]
		queue[i].user = "" // the raw id goes no further than here
	}
	return s.send(ctx, queue)
}

// send sends queue, resending what the sink did not accept, and marks what
// it accepted.
func (s *Shipper) send(ctx context.Context, queue []pending) (failedAt int, err error) {
	log := s.logger()
	attempts := s.Attempts
	if attempts <= 0 {
		attempts = DefaultAttempts
	}
	var lastErr error
	for attempt := 0; attempt < attempts && len(queue) > 0; attempt++ {
		if attempt > 0 {
			if err := clock.Sleep(ctx, s.backoff(attempt-1)); err != nil {
				lastErr = err
				break
			}
			s.Metrics.Count(MetricRetried, len(queue), nil)
		}
		evs := make([]Event, len(queue))
		for i, p := range queue {
			evs[i] = p.event
		}
		failed, err := s.Sink.Send(ctx, evs)
		var accepted []string
		var retry []pending
		for i, p := range queue {
			if failed == nil && err != nil || failed != nil && failed[i] {
				retry = append(retry, p)
			} else {
				accepted = append(accepted, p.event.EventID)
			}
		}
		s.mark(ctx, accepted)
		queue = retry
		if err != nil {
			lastErr = err
			log.ErrorContext(ctx, "analytics sink failed", "pending", len(queue), "error", err.Error())
			break
		}
		if len(queue) > 0 {
			lastErr = fmt.Errorf("analytics: the sink did not accept %d events", len(queue))
			log.WarnContext(ctx, "analytics events not accepted; retrying", "events", len(queue), "attempt", attempt+1)
		}
	}
	if len(queue) == 0 {
		return -1, nil
	}
	s.Metrics.Count(MetricFailed, len(queue), nil)
	failedAt = queue[0].record
	for _, p := range queue {
		failedAt = min(failedAt, p.record)
	}
	if lastErr == nil {
		lastErr = errors.New("analytics: events not accepted")
	}
	log.ErrorContext(ctx, "analytics events not shipped; the batch is retried from the earliest",
		"events", len(queue), "from_record", failedAt, "error", lastErr.Error())
	return failedAt, lastErr
}

// mark records accepted events. A marker that cannot be written is logged,
// not retried by failing the batch: the event did arrive, and failing would
// only make a redelivery send it twice. (Event ids let analysts drop such a
// rare repeat.)
func (s *Shipper) mark(ctx context.Context, ids []string) {
	if len(ids) == 0 {
		return
	}
	s.Metrics.Count(MetricShipped, len(ids), nil)
	if err := s.Shipped.Mark(ctx, ids); err != nil {
		s.logger().ErrorContext(ctx, "analytics markers not written; a redelivery may ship these events again",
			"events", len(ids), "error", err.Error())
	}
}

func (s *Shipper) backoff(n int) time.Duration {
	if s.Backoff != nil {
		return s.Backoff(n)
	}
	d := 100 * time.Millisecond << min(n, 10)
	return d/2 + rand.N(d/2+1)
}

// lag reports how old the batch's oldest record is.
func (s *Shipper) lag(records []events.DynamoDBEventRecord) {
	if s.Clock == nil {
		return
	}
	var oldest time.Time
	for _, r := range records {
		t := r.Change.ApproximateCreationDateTime.Time
		if !t.IsZero() && (oldest.IsZero() || t.Before(oldest)) {
			oldest = t
		}
	}
	if !oldest.IsZero() {
		s.Metrics.Emit(MetricLag, float64(s.Clock.Now().Sub(oldest).Milliseconds()), obs.Milliseconds, nil)
	}
}

func (s *Shipper) logger() *slog.Logger {
	if s.Log == nil {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return s.Log
}
