package analytics_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/firehose"
	ftypes "github.com/aws/aws-sdk-go-v2/service/firehose/types"
	"github.com/aws/smithy-go"

	"github.com/rallyhq/rally/shared/analytics"
	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/obs"
	"github.com/rallyhq/rally/shared/schema"
	sdynamo "github.com/rallyhq/rally/shared/streaks/dynamo"
	"github.com/rallyhq/rally/shared/streams"
)

// fakeFirehose is a delivery stream with JSON deaggregation: it splits
// each record into its newline-separated events, refuses what refuse says,
// and counts every event it accepts by event id.
type fakeFirehose struct {
	mu sync.Mutex
	// refuse returns the ErrorCode for an event (empty: accepted), given how
	// many times it was offered before; a record is refused, whole, when
	// any of its events is.
	refuse func(rec map[string]any, offered int) string
	// callErr fails a whole call (the n-th, 0-based) when it returns an error.
	callErr   func(call int) error
	calls     int
	offered   map[string]int
	delivered map[string]int
	records   []map[string]any // the events accepted, in order
	sent      []sentCall       // every call, once its records were split
}

// sentCall is what one PutRecordBatch call carried.
type sentCall struct {
	records []sentRecord
	bytes   int
}

// sentRecord is one record of a call: its size, the ids of its events in
// order, and the ErrorCode it was answered with (empty: accepted or the
// call failed).
type sentRecord struct {
	bytes  int
	events []string
	code   string
}

func newFakeFirehose() *fakeFirehose {
	return &fakeFirehose{offered: map[string]int{}, delivered: map[string]int{}}
}

func (f *fakeFirehose) PutRecordBatch(_ context.Context, in *firehose.PutRecordBatchInput, _ ...func(*firehose.Options)) (*firehose.PutRecordBatchOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	call := f.calls
	f.calls++
	// Split every record before accepting any. A record the stream could not
	// deaggregate, or a call or record over Firehose's limits, fails the call
	// with an error the sink treats as permanent, so the test sees it.
	invalid := func(format string, args ...any) error {
		return &smithy.GenericAPIError{Code: "InvalidArgumentException", Message: fmt.Sprintf(format, args...)}
	}
	sc := sentCall{}
	split := make([][]map[string]any, len(in.Records))
	for j, r := range in.Records {
		evs, err := deaggregate(r.Data)
		if err != nil {
			return nil, invalid("record %d: %v", j, err)
		}
		sr := sentRecord{bytes: len(r.Data)}
		for _, ev := range evs {
			sr.events = append(sr.events, ev["event_id"].(string))
		}
		split[j] = evs
		sc.records, sc.bytes = append(sc.records, sr), sc.bytes+sr.bytes
	}
	f.sent = append(f.sent, sc)
	for j, sr := range sc.records {
		if sr.bytes > analytics.MaxRecordBytes || len(sr.events) > analytics.MaxRecordEvents {
			return nil, invalid("record %d: %d bytes, %d events", j, sr.bytes, len(sr.events))
		}
	}
	if len(in.Records) > analytics.MaxBatchRecords || sc.bytes > analytics.MaxBatchBytes {
		return nil, invalid("%d records, %d bytes", len(in.Records), sc.bytes)
	}
	if aws.ToString(in.DeliveryStreamName) != "rally-events" {
		return nil, &smithy.GenericAPIError{Code: "ResourceNotFoundException", Message: "no such stream"}
	}
	if f.callErr != nil {
		if err := f.callErr(call); err != nil {
			return nil, err
		}
	}
	out := &firehose.PutRecordBatchOutput{FailedPutCount: aws.Int32(0)}
	for j, evs := range split {
		sr := &f.sent[len(f.sent)-1].records[j]
		for i, ev := range evs {
			if code := f.refusal(ev, sr.events[i]); code != "" && sr.code == "" {
				sr.code = code
			}
		}
		for _, id := range sr.events {
			f.offered[id]++
		}
		entry := ftypes.PutRecordBatchResponseEntry{RecordId: aws.String(fmt.Sprint("rid-", call, "-", j))}
		if sr.code != "" {
			entry = ftypes.PutRecordBatchResponseEntry{ErrorCode: aws.String(sr.code), ErrorMessage: aws.String("try again")}
			*out.FailedPutCount++
		} else {
			for i, id := range sr.events {
				f.delivered[id]++
				f.records = append(f.records, evs[i])
			}
		}
		out.RequestResponses = append(out.RequestResponses, entry)
	}
	return out, nil
}

func (f *fakeFirehose) refusal(ev map[string]any, id string) string {
	if f.refuse == nil {
		return ""
	}
	return f.refuse(ev, f.offered[id])
}

// deaggregate splits a record as the delivery stream's JSON deaggregation
// and dynamic partitioning read it: newline-separated lines, each one
// complete JSON object carrying its partition keys.
func deaggregate(data []byte) ([]map[string]any, error) {
	if len(data) == 0 {
		return nil, errors.New("empty record")
	}
	var out []map[string]any
	for n, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		dec := json.NewDecoder(strings.NewReader(line))
		var ev map[string]any
		if err := dec.Decode(&ev); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		if dec.InputOffset() != int64(len(line)) {
			return nil, fmt.Errorf("line %d holds more than one JSON object", n)
		}
		for _, k := range []string{"event_id", "event_type", "dt", "hour"} {
			if v, _ := ev[k].(string); v == "" {
				return nil, fmt.Errorf("line %d lacks %s", n, k)
			}
		}
		out = append(out, ev)
	}
	return out, nil
}

// deliveredOnce fails unless exactly ids were delivered, each once.
func (f *fakeFirehose) deliveredOnce(t *testing.T, ids []string) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	for id, n := range f.delivered {
		if n != 1 {
			t.Errorf("event %s delivered %d times", id, n)
		}
		if !want[id] {
			t.Errorf("event %s delivered but not expected", id)
		}
	}
	for id := range want {
		if f.delivered[id] == 0 {
			t.Errorf("event %s lost", id)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

// shipperRig is a shipper over DynamoDB Local and a fake delivery stream.
type shipperRig struct {
	rig
	hose    *fakeFirehose
	shipper *analytics.Shipper
	metrics *bytes.Buffer
}

func newShipper(t *testing.T) shipperRig {
	t.Helper()
	r := newRig(t)
	hose := newFakeFirehose()
	metrics := &bytes.Buffer{}
	return shipperRig{rig: r, hose: hose, metrics: metrics, shipper: &analytics.Shipper{
		Decoders: decoders,
		Tables:   r.names, PIDs: r.pseudonyms(), Shipped: r.shipped(),
		Sink:  &analytics.FirehoseSink{Client: hose, Stream: "rally-events"},
		Clock: clock.System{}, Log: slog.New(slog.NewJSONHandler(logOutput(t), nil)),
		Metrics:  obs.NewMetrics(&lockedBuffer{b: metrics}, "analytics-shipper"),
		Attempts: 4, Backoff: func(int) time.Duration { return time.Millisecond },
	}}
}

// metric sums a metric's values in the EMF lines written so far.
func (r shipperRig) metric(t *testing.T, name string) float64 {
	t.Helper()
	sum := 0.0
	for _, line := range strings.Split(strings.TrimSpace(r.metrics.String()), "\n") {
		if line == "" {
			continue
		}
		var doc map[string]any
		if err := json.Unmarshal([]byte(line), &doc); err != nil {
			t.Fatal(err)
		}
		if v, ok := doc[name].(float64); ok {
			sum += v
		}
	}
	return sum
}

type lockedBuffer struct {
	mu sync.Mutex
	b  *bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func logOutput(t *testing.T) *bytes.Buffer {
	b := &bytes.Buffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("shipper logs:\n%s", b)
		}
	})
	return b
}

// batch builds a mixed stream batch of n records as the three source
// streams deliver them: activity events with their daily totals, reaction
// changes and score submissions; users are u0..u{users-1}. It returns the
// records and the ids of the events they carry.
func batch(t testing.TB, names schema.Names, count, users int) ([]events.DynamoDBEventRecord, []string) {
	t.Helper()
	at := time.Date(year, 3, 10, 9, 0, 0, 0, time.UTC)
	var recs []events.DynamoDBEventRecord
	for i := 0; len(recs) < count; i++ {
		user := fmt.Sprintf("u%d", i%users)
		when := at.Add(time.Duration(i) * 7 * time.Minute)
		switch i % 4 {
		case 0:
			recs = append(recs, record(names, schema.Activity, i, "INSERT", activityItem(user, when, fmt.Sprint("e", i), "MATCH_PLAYED", 5, int64(i%9+1), "eu"), nil))
		case 1:
			recs = append(recs, record(names, schema.Activity, i, "MODIFY",
				map[string]types.AttributeValue{"user_id": s(user), "sk": s(sdynamo.DaySK("2026-03-10")), "points": n(10)},
				map[string]types.AttributeValue{"user_id": s(user), "sk": s(sdynamo.DaySK("2026-03-10")), "points": n(5)}))
		case 2:
			recs = append(recs, record(names, schema.Reactions, i, "INSERT", edgeItem(user, "favorite", fmt.Sprint("g", i%13), "ACTIVE", 1, when), nil))
		case 3:
			recs = append(recs, record(names, schema.ScoreEvents, i, "INSERT", scoreEventItem("arena", user, fmt.Sprint("m", i), int64(i*10), when), nil))
		}
	}
	var ids []string
	for _, rec := range recs {
		source, _ := analytics.SourceOf(rec.EventSourceArn, names)
		ev, _, ok, err := decoders.Map(source, rec)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			ids = append(ids, ev.EventID)
		}
	}
	return recs, ids
}

// Records Firehose refuses (per-record ErrorCode) and a throttled call are
// retried within the invocation: every event arrives exactly once, with a
// PID and never the raw user id.
func TestShipperRetriesRefusedRecordsUntilEachArrivesOnce(t *testing.T) {
	t.Parallel()
	r := newShipper(t)
	recs, ids := batch(t, r.names, 1200, 37)
	r.hose.refuse = func(rec map[string]any, offered int) string {
		id := rec["event_id"].(string)
		// About 3 in 8 events are refused the first time, and with them
		// every record that holds one.
		if offered == 0 && id[0] < '6' {
			return "ServiceUnavailableException"
		}
		return ""
	}
	r.hose.callErr = func(call int) error {
		if call == 1 {
			return &smithy.GenericAPIError{Code: "ThrottlingException", Message: "slow down"}
		}
		return nil
	}
	if err := r.shipper.Process(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	r.hose.deliveredOnce(t, ids)
	pids, err := pidsOf(context.Background(), r.pseudonyms(), []string{"u0", "u1"})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, rec := range r.hose.records {
		pid, _ := rec["user_pid"].(string)
		if !pidPattern.MatchString(pid) {
			t.Fatalf("record without a PID: %v", rec)
		}
		seen[pid] = true
		for _, v := range rec {
			if s, ok := v.(string); ok && regexpUser.MatchString(s) {
				t.Fatalf("a raw user id reached the sink: %v", rec)
			}
		}
	}
	if len(seen) != 37 || !seen[pids["u0"]] || !seen[pids["u1"]] {
		t.Fatalf("%d distinct PIDs for 37 users", len(seen))
	}
	if got := r.metric(t, analytics.MetricShipped); got != float64(len(ids)) {
		t.Fatalf("EventsShipped %v, want %d", got, len(ids))
	}
	if got := r.metric(t, analytics.MetricRetried); got == 0 {
		t.Fatal("no retries counted")
	}
	if got := r.metric(t, analytics.MetricFailed); got != 0 {
		t.Fatalf("EventsFailed %v", got)
	}
}

var regexpUser = regexp.MustCompile(`^u[0-9]+$`)

// An event Firehose keeps refusing ends the invocation with a partial
// failure naming the earliest record whose event did not arrive; when the
// event source mapping redelivers from there, the events after it that did
// arrive are not sent again and the stuck ones are: nothing lost, nothing
// doubled. Events travel packed, so a refused record holds back the events
// packed with the stuck one, and no others.
func TestShipperReportsTheEarliestStuckRecordAndRedeliveryCompletes(t *testing.T) {
	t.Parallel()
	r := newShipper(t)
	recs, ids := batch(t, r.names, 1400, 11) // 1,050 events: Firehose records of 500, 500 and 50
	per := analytics.MaxRecordEvents
	if len(ids) <= 2*per {
		t.Fatalf("%d events do not fill three Firehose records", len(ids))
	}
	recordOf := map[string]int{} // stream record index by event id
	for i, rec := range recs {
		source, _ := analytics.SourceOf(rec.EventSourceArn, r.names)
		if ev, _, ok, err := decoders.Map(source, rec); err == nil && ok {
			recordOf[ev.EventID] = i
		}
	}
	// Three events of the middle Firehose record; the earliest is not its first.
	stuck := map[string]bool{ids[per+260]: true, ids[per+20]: true, ids[per+490]: true}
	var mu sync.Mutex
	healthy := false
	r.hose.refuse = func(rec map[string]any, _ int) string {
		mu.Lock()
		defer mu.Unlock()
		if !healthy && stuck[rec["event_id"].(string)] {
			return "InternalFailure"
		}
		return ""
	}
	err := r.shipper.Process(context.Background(), recs)
	held := ids[per : 2*per] // the events packed with the stuck ones
	var lost []string
	for _, id := range ids {
		if r.hose.delivered[id] == 0 {
			lost = append(lost, id)
		}
	}
	equal(t, "events not delivered", lost, held)
	var pe *streams.PartialError
	if from := recordOf[held[0]]; !errors.As(err, &pe) || pe.From != from {
		t.Fatalf("want a partial failure from record %d, got %v", from, err)
	}
	if got := r.metric(t, analytics.MetricFailed); got != float64(len(held)) {
		t.Fatalf("EventsFailed %v, want %d", got, len(held))
	}
	if r.hose.offered[firstKey(stuck)] != 4 {
		t.Fatalf("a stuck event was offered %d times, want Attempts=4", r.hose.offered[firstKey(stuck)])
	}
	mu.Lock()
	healthy = true
	mu.Unlock()
	if err := r.shipper.Process(context.Background(), recs[pe.From:]); err != nil {
		t.Fatal(err)
	}
	r.hose.deliveredOnce(t, ids)
}

func firstKey(m map[string]bool) string {
	for k := range m {
		return k
	}
	return ""
}

// A redelivered batch, whole or from its middle, sends nothing twice.
func TestShipperRedeliveredBatchSendsNoDuplicates(t *testing.T) {
	t.Parallel()
	r := newShipper(t)
	recs, ids := batch(t, r.names, 300, 20)
	ctx := context.Background()
	for _, part := range [][]events.DynamoDBEventRecord{recs, recs, recs[len(recs)/2:], recs[:len(recs)/3]} {
		if err := r.shipper.Process(ctx, part); err != nil {
			t.Fatal(err)
		}
	}
	r.hose.deliveredOnce(t, ids)
	if r.hose.calls != 1 {
		t.Fatalf("%d Firehose calls; redeliveries should make none", r.hose.calls)
	}
	// An empty batch is a scheduled tick: nothing to do.
	if err := r.shipper.Process(ctx, nil); err != nil || r.hose.calls != 1 {
		t.Fatalf("tick: err=%v calls=%d", err, r.hose.calls)
	}
}

// A record that cannot be mapped stops the batch there; what came before
// it is shipped.
func TestShipperStopsAtAnUnreadableRecord(t *testing.T) {
	t.Parallel()
	r := newShipper(t)
	recs, _ := batch(t, r.names, 40, 5)
	recs[22] = record(r.names, schema.Reactions, 22, "INSERT", edgeItem("u1", "poke", "x", "ACTIVE", 1, time.Now()), nil)
	recs[30].EventSourceArn = "arn:aws:dynamodb:us-east-1:1:table/SomeoneElses/stream/x"
	err := r.shipper.Process(context.Background(), recs)
	var pe *streams.PartialError
	if !errors.As(err, &pe) || pe.From != 22 {
		t.Fatalf("want a partial failure from record 22, got %v", err)
	}
	_, before := batch(t, r.names, 22, 5)
	r.hose.deliveredOnce(t, before)
	err = r.shipper.Process(context.Background(), recs[23:])
	if !errors.As(err, &pe) || pe.From != 30-23 {
		t.Fatalf("want a partial failure from the foreign record, got %v", err)
	}
}

// A stream that does not exist is no reason to retry at once: one call,
// then the whole batch is reported failed from its first event.
func TestShipperGivesUpAtOnceOnAPermanentSinkError(t *testing.T) {
	t.Parallel()
	r := newShipper(t)
	r.shipper.Sink = &analytics.FirehoseSink{Client: r.hose, Stream: "missing"}
	recs, _ := batch(t, r.names, 10, 3)
	err := r.shipper.Process(context.Background(), recs)
	var pe *streams.PartialError
	if !errors.As(err, &pe) || pe.From != 0 {
		t.Fatalf("want a partial failure from record 0, got %v", err)
	}
	if r.hose.calls != 1 {
		t.Fatalf("%d calls to a missing stream", r.hose.calls)
	}
}
