package poller_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"

	"github.com/rallyhq/rally/infra/local/poller"
	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/infra/local/testenv/await"
	"github.com/rallyhq/rally/shared/deadletters"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
	"github.com/rallyhq/rally/shared/streamread"
	"github.com/rallyhq/rally/shared/streams"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// recorder is a fake processor: it applies records (remembers "key=v")
// unless fail says otherwise, and logs every invocation.
type recorder struct {
	mu          sync.Mutex
	applied     []string
	invocations [][]string
	// fail returns the index of the first record to fail and whether the
	// failure is a function error (true) or a batch item failure (false);
	// -1 applies the whole batch.
	fail func(batch []string) (int, bool)
}

func label(r events.DynamoDBEventRecord) string {
	return r.Change.Keys["edge"].String() + "=" + r.Change.NewImage["v"].Number()
}

func (rec *recorder) handle(_ context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
	labels := make([]string, len(ev.Records))
	for i, r := range ev.Records {
		labels[i] = label(r)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	rec.invocations = append(rec.invocations, labels)
	from, fnErr := -1, false
	if rec.fail != nil {
		from, fnErr = rec.fail(labels)
	}
	if from < 0 {
		rec.applied = append(rec.applied, labels...)
		return events.DynamoDBEventResponse{}, nil
	}
	if fnErr {
		return events.DynamoDBEventResponse{}, errors.New("processor failed")
	}
	rec.applied = append(rec.applied, labels[:from]...)
	return events.DynamoDBEventResponse{BatchItemFailures: []events.DynamoDBBatchItemFailure{
		{ItemIdentifier: ev.Records[from].Change.SequenceNumber},
	}}, nil
}

func (rec *recorder) snapshot() (applied []string, invocations [][]string) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]string(nil), rec.applied...), append([][]string(nil), rec.invocations...)
}

type rig struct {
	t        *testing.T
	db       *dynamodb.Client
	names    schema.Names
	endpoint string
	table    string
	p        *poller.Poller
	dest     *destination
}

// destination is an on-failure destination: it keeps what it is sent.
type destination struct {
	mu     sync.Mutex
	parked []streamread.Parked
}

func (d *destination) receive(_ context.Context, p streamread.Parked) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.parked = append(d.parked, p)
	return nil
}

func (d *destination) received() []streamread.Parked {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.parked)
}

func newRig(t *testing.T, proc routes.Processor, handler streams.Handler) *rig {
	t.Helper()
	db, names, endpoint := testenv.DynamoDB(t)
	dest := &destination{}
	proc.Source = schema.Reactions
	p, err := poller.New(poller.Options{
		Processor: proc, Handler: handler, Table: names.Of(schema.Reactions),
		DB: db, Streams: testenv.StreamsClient(endpoint), OnFailure: dest.receive,
		RetryBase: time.Millisecond, RetryMax: 5 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, p)
	return &rig{t: t, db: db, names: names, endpoint: endpoint, table: names.Of(schema.Reactions), p: p, dest: dest}
}

// runUntilCleanup runs p until the test ends, failing it if Run fails.
func runUntilCleanup(t *testing.T, p *poller.Poller) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// put writes item edge with attribute v; every put is one stream record.
func (r *rig) put(edge string, v int) {
	r.t.Helper()
	_, err := r.db.PutItem(context.Background(), &dynamodb.PutItemInput{
		TableName: aws.String(r.table),
		Item: map[string]types.AttributeValue{
			"user_id": &types.AttributeValueMemberS{Value: "u1"},
			"edge":    &types.AttributeValueMemberS{Value: edge},
			"v":       &types.AttributeValueMemberN{Value: strconv.Itoa(v)},
		},
	})
	if err != nil {
		r.t.Fatal(err)
	}
}

func (r *rig) waitIdle() {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.p.WaitIdle(ctx); err != nil {
		r.t.Fatal(err)
	}
}

func processor(batch int32, retries int32) routes.Processor {
	return routes.Processor{Function: "fake-processor", BatchSize: batch, MaxRetries: retries, MaxRecordAge: time.Hour}
}

func TestEveryRecordIsDeliveredOnceInOrder(t *testing.T) {
	rec := &recorder{}
	r := newRig(t, processor(7, 3), rec.handle)
	var want []string
	for v := 1; v <= 5; v++ {
		for k := 0; k < 6; k++ {
			edge := fmt.Sprintf("k%d", k)
			r.put(edge, v)
			want = append(want, edge+"="+strconv.Itoa(v))
		}
	}
	r.waitIdle()
	applied, invocations := rec.snapshot()
	if strings.Join(applied, " ") != strings.Join(want, " ") {
		t.Fatalf("applied\n%v\nwant\n%v", applied, want)
	}
	for _, inv := range invocations {
		if len(inv) > 7 {
			t.Errorf("batch of %d records exceeds the batch size 7", len(inv))
		}
	}
	if st := r.p.Status(); st.LagRecords != 0 || st.Delivered != int64(len(want)) || st.LastBatchAt == nil {
		t.Errorf("status after idle = %+v", st)
	}
}

func TestTheEventHasLambdasJSONShape(t *testing.T) {
	var mu sync.Mutex
	var got []events.DynamoDBEventRecord
	r := newRig(t, processor(10, 0), func(_ context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		mu.Lock()
		got = append(got, ev.Records...)
		mu.Unlock()
		return events.DynamoDBEventResponse{}, nil
	})
	ctx := context.Background()
	// DynamoDB Local, like DynamoDB, rounds creation times down to the minute.
	start := time.Now().Add(-time.Minute)
	r.put("a", 1)
	r.put("a", 2)
	if _, err := r.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(r.table), Key: map[string]types.AttributeValue{
		"user_id": &types.AttributeValueMemberS{Value: "u1"}, "edge": &types.AttributeValueMemberS{Value: "a"},
	}}); err != nil {
		t.Fatal(err)
	}
	r.waitIdle()
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 3 {
		t.Fatalf("%d records", len(got))
	}
	for i, name := range []string{"INSERT", "MODIFY", "REMOVE"} {
		r := got[i]
		if r.EventName != name || r.EventVersion != "1.1" || r.EventSource != "aws:dynamodb" ||
			r.AWSRegion == "" || !strings.Contains(r.EventSourceArn, "/stream/") {
			t.Errorf("record %d envelope = %s %s %s %s %s", i, r.EventName, r.EventVersion, r.EventSource, r.AWSRegion, r.EventSourceArn)
		}
		c := r.Change
		if c.StreamViewType != "NEW_AND_OLD_IMAGES" || c.SequenceNumber == "" || c.SizeBytes <= 0 ||
			c.Keys["edge"].String() != "a" || c.ApproximateCreationDateTime.Before(start) {
			t.Errorf("record %d change = %+v", i, c)
		}
		if (c.NewImage != nil) != (name != "REMOVE") || (c.OldImage != nil) != (name != "INSERT") {
			t.Errorf("record %d %s images: new %v old %v", i, name, c.NewImage != nil, c.OldImage != nil)
		}
	}
	if got[1].Change.OldImage["v"].Number() != "1" || got[1].Change.NewImage["v"].Number() != "2" {
		t.Errorf("MODIFY images %v → %v", got[1].Change.OldImage, got[1].Change.NewImage)
	}
	b, _ := json.Marshal(events.DynamoDBEvent{Records: got[:1]})
	for _, key := range []string{`"eventID"`, `"eventSourceARN"`, `"ApproximateCreationDateTime"`, `"SequenceNumber"`, `"Keys"`} {
		if !strings.Contains(string(b), key) {
			t.Errorf("event JSON lacks %s: %s", key, b)
		}
	}
}

func TestAPartialFailureIsRetriedFromTheNamedRecord(t *testing.T) {
	failedOnce := false
	rec := &recorder{fail: func(batch []string) (int, bool) {
		for i, l := range batch {
			if l == "c=1" && !failedOnce {
				failedOnce = true
				return i, false
			}
		}
		return -1, false
	}}
	r := newRig(t, processor(10, 3), rec.handle)
	p := r.p
	p.Pause() // so the five records arrive as one batch
	for _, e := range []string{"a", "b", "c", "d", "e"} {
		r.put(e, 1)
	}
	await.Until(t, 20*time.Second, "lag of 5 records", func() bool { return p.Status().LagRecords == 5 })
	p.Resume()
	r.waitIdle()
	applied, invocations := rec.snapshot()
	if strings.Join(applied, " ") != "a=1 b=1 c=1 d=1 e=1" {
		t.Fatalf("applied %v: every record exactly once, in order", applied)
	}
	if len(invocations) != 2 || strings.Join(invocations[1], " ") != "c=1 d=1 e=1" {
		t.Fatalf("invocations %v: the retry must start at the failed record", invocations)
	}
}

func TestAPoisonRecordIsParkedAfterBoundedRetriesAndTheRestFlows(t *testing.T) {
	const retries = 2
	poisoned := true
	rec := &recorder{fail: func(batch []string) (int, bool) {
		for _, l := range batch {
			if l == "bad=1" && poisoned {
				return 0, true
			}
		}
		return -1, false
	}}
	r := newRig(t, processor(10, retries), rec.handle)
	r.p.Pause()
	for _, e := range []string{"a", "b", "bad", "c", "d"} {
		r.put(e, 1)
	}
	await.Until(t, 20*time.Second, "lag of 5 records", func() bool { return r.p.Status().LagRecords == 5 })
	r.p.Resume()
	r.waitIdle()
	applied, invocations := rec.snapshot()
	if strings.Join(applied, " ") != "a=1 b=1 c=1 d=1" {
		t.Fatalf("applied %v", applied)
	}
	alone := 0
	for _, inv := range invocations {
		if len(inv) == 1 && inv[0] == "bad=1" {
			alone++
		}
	}
	if alone != retries+1 {
		t.Errorf("the poison record was tried alone %d times, want %d (1 + %d retries); invocations %v", alone, retries+1, retries, invocations)
	}

	parked := r.dest.received()
	if len(parked) != 1 {
		t.Fatalf("the destination received %d batches: %+v", len(parked), parked)
	}
	pk := parked[0]
	if pk.RequestContext.Condition != streamread.RetryAttemptsExhausted || pk.RequestContext.ApproximateInvokeCount < retries+1 ||
		!strings.HasSuffix(pk.RequestContext.FunctionARN, ":function:fake-processor") ||
		pk.ResponseContext.FunctionError != "Unhandled" || pk.Version != "1.0" || pk.Timestamp == "" {
		t.Errorf("invocation record %+v %+v", pk.RequestContext, pk.ResponseContext)
	}
	bi := pk.BatchInfo
	if bi.BatchSize != 1 || bi.StartSequenceNumber == "" || bi.StartSequenceNumber != bi.EndSequenceNumber ||
		bi.ShardID == "" || !strings.Contains(bi.StreamARN, "/stream/") || bi.ApproximateArrivalOfFirstRecord == "" {
		t.Errorf("DDBStreamBatchInfo %+v", bi)
	}
	if raw, err := json.Marshal(pk); err != nil || !strings.Contains(string(raw), `"DDBStreamBatchInfo"`) {
		t.Errorf("on-failure record as JSON: %v %s", err, raw)
	}

	// The archiver reads the batch back from the stream; once the
	// processor is fixed, a redrive applies the record and nothing stays
	// parked.
	ctx := context.Background()
	archive := &deadletters.Archive{DB: r.db, Table: r.names.Of(schema.DeadLetters)}
	archiver := &deadletters.Archiver{
		Streams: testenv.StreamsClient(r.endpoint), Archive: archive, Region: testenv.Region,
		Function: func(arn string) (string, bool) { return deadletters.FunctionName(arn), true },
	}
	b, err := archiver.Park(ctx, pk)
	if err != nil || b.Size != 1 || b.Function != "fake-processor" || b.Reason != streamread.RetryAttemptsExhausted {
		t.Fatalf("archived %+v, %v", b, err)
	}
	if recs, err := archive.Records(ctx, b); err != nil || len(recs) != 1 || label(recs[0]) != "bad=1" {
		t.Fatalf("archived records %+v %v", recs, err)
	}
	rec.mu.Lock()
	poisoned = false
	rec.mu.Unlock()
	outcomes, err := archive.Redrive(ctx, pollerInvoker{r.p}, "fake-processor", "")
	if err != nil || len(outcomes) != 1 || !outcomes[0].Done() {
		t.Fatalf("redrive %+v %v", outcomes, err)
	}
	if applied, _ := rec.snapshot(); applied[len(applied)-1] != "bad=1" {
		t.Errorf("redrive did not apply the record: %v", applied)
	}
	if left, _ := archive.List(ctx, "fake-processor"); len(left) != 0 {
		t.Errorf("still parked after the redrive: %+v", left)
	}
}

// pollerInvoker invokes the poller's processor, as Lambda's Invoke would.
type pollerInvoker struct{ p *poller.Poller }

func (i pollerInvoker) Invoke(ctx context.Context, _ string, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
	return i.p.Invoke(ctx, ev.Records)
}

func TestABatchingWindowHoldsALoneRecord(t *testing.T) {
	rec := &recorder{}
	proc := processor(100, 0)
	proc.BatchWindow = 700 * time.Millisecond
	r := newRig(t, proc, rec.handle)
	r.put("a", 1)
	written := time.Now()
	r.put("b", 1)
	await.Until(t, 30*time.Second, "the batch delivered", func() bool {
		_, inv := rec.snapshot()
		return len(inv) > 0
	})
	if d := time.Since(written); d < proc.BatchWindow-100*time.Millisecond {
		t.Errorf("delivered %s after the write; the window is %s", d, proc.BatchWindow)
	}
	if _, inv := rec.snapshot(); len(inv) != 1 || len(inv[0]) != 2 {
		t.Errorf("invocations %v, want both records in one batch", inv)
	}
}

// Whoever waits for idle wants the records applied: a batching window
// (here far longer than the test's patience) ends once they are read.
func TestWaitingForIdleEndsABatchingWindow(t *testing.T) {
	rec := &recorder{}
	proc := processor(100, 0)
	proc.BatchWindow = time.Hour
	r := newRig(t, proc, rec.handle)
	r.put("a", 1)
	r.put("b", 1)
	r.waitIdle()
	if applied, inv := rec.snapshot(); len(inv) != 1 || strings.Join(applied, " ") != "a=1 b=1" {
		t.Errorf("after idle: applied %v in invocations %v, want a=1 b=1 in one", applied, inv)
	}
	// Without a waiter the window holds the next record again: read, and
	// still pending.
	r.put("c", 1)
	await.Until(t, 30*time.Second, "record c read", func() bool { return r.p.Status().LagRecords == 1 })
	if applied, _ := rec.snapshot(); len(applied) != 2 {
		t.Errorf("delivered %v before the window ended with nobody waiting", applied)
	}
}

func TestATableWithoutAStreamIsReportedNotAwaitedForever(t *testing.T) {
	db, names, endpoint := testenv.DynamoDB(t)
	p, err := poller.New(poller.Options{
		Processor: processor(10, 0), Table: names.Of(schema.Counters), DB: db,
		Streams: testenv.StreamsClient(endpoint), OnFailure: (&destination{}).receive,
		Handler: (&recorder{}).handle,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "no stream") {
		t.Fatalf("Run = %v, want a missing-stream error", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.WaitIdle(ctx); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitIdle = %v, want Run's error at once", err)
	}
}

// countingStreams counts the stream calls a poller makes.
type countingStreams struct {
	streamread.Client
	describes, reads atomic.Int64
	records          atomic.Int64 // records the stream returned
}

func (c *countingStreams) DescribeStream(ctx context.Context, in *dynamodbstreams.DescribeStreamInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.DescribeStreamOutput, error) {
	c.describes.Add(1)
	return c.Client.DescribeStream(ctx, in, opts...)
}

func (c *countingStreams) GetRecords(ctx context.Context, in *dynamodbstreams.GetRecordsInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error) {
	out, err := c.Client.GetRecords(ctx, in, opts...)
	if err == nil {
		c.records.Add(int64(len(out.Records)))
	}
	c.reads.Add(1) // once it has answered
	return out, err
}

// quietRig is a rig whose poller backs off to maxPoll and counts its
// stream calls.
func quietRig(t *testing.T, rec *recorder, poll, maxPoll time.Duration) (*rig, *countingStreams) {
	t.Helper()
	db, names, endpoint := testenv.DynamoDB(t)
	calls := &countingStreams{Client: testenv.StreamsClient(endpoint)}
	proc := processor(10, 0)
	proc.Source = schema.Reactions
	p, err := poller.New(poller.Options{
		Processor: proc, Handler: rec.handle, Table: names.Of(schema.Reactions),
		DB: db, Streams: calls, OnFailure: (&destination{}).receive,
		PollInterval: poll, MaxPollInterval: maxPoll,
	})
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, p)
	return &rig{t: t, db: db, names: names, endpoint: endpoint, table: names.Of(schema.Reactions), p: p}, calls
}

// A quiet stream costs next to nothing: a poller that finds nothing polls
// less and less often and describes the stream only when it starts, where
// polling at its base rate would have read the shard a hundred times.
func TestAQuietStreamIsPolledLessAndLessOften(t *testing.T) {
	rec := &recorder{}
	r, calls := quietRig(t, rec, 10*time.Millisecond, 320*time.Millisecond)
	r.put("a", 1)
	r.waitIdle()
	describes, reads := calls.describes.Load(), calls.reads.Load()
	// 1 s at the base rate is 100 polls; backing off (10, 20, 40, …, 320
	// ms) it is at most 8.
	quiet := time.NewTimer(time.Second)
	<-quiet.C
	if n := calls.reads.Load() - reads; n > 10 {
		t.Errorf("a quiet shard was read %d times in a second (backing off from 10 ms to 320 ms: at most 8)", n)
	}
	if n := calls.describes.Load() - describes; n != 0 {
		t.Errorf("a stream whose shards stayed open was described %d times in a second", n)
	}
	if applied, _ := rec.snapshot(); !slices.Equal(applied, []string{"a=1"}) {
		t.Errorf("applied %v", applied)
	}
}

// Backing off never delays a write whose writer wakes the poller: with
// polls an hour apart, a woken poller reads the write at once.
func TestAWokenPollerReadsAWriteAtOnce(t *testing.T) {
	rec := &recorder{}
	r, calls := quietRig(t, rec, time.Hour, time.Hour)
	await.Until(t, 30*time.Second, "the first poll of the empty stream", func() bool { return calls.reads.Load() > 0 })
	// The shard's next poll is an hour away.
	r.put("a", 1)
	r.p.Wake()
	await.Until(t, 30*time.Second, "the write is delivered once the poller is woken", func() bool {
		applied, _ := rec.snapshot()
		return slices.Equal(applied, []string{"a=1"})
	})
}

// Two functions fed by one stream each receive every record, in order,
// and the stream is read once for both.
func TestAStreamFeedingTwoFunctionsIsReadOnce(t *testing.T) {
	db, names, endpoint := testenv.DynamoDB(t)
	calls := &countingStreams{Client: testenv.StreamsClient(endpoint)}
	pages := poller.NewPages()
	recs := []*recorder{{}, {}}
	var pollers []*poller.Poller
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for i, rec := range recs {
		proc := processor(int32(100+i*150), 0) // batches of their own
		proc.Function, proc.Source = fmt.Sprintf("fake-processor-%d", i), schema.Reactions
		p, err := poller.New(poller.Options{
			Processor: proc, Handler: rec.handle, Table: names.Of(schema.Reactions), Pages: pages,
			DB: db, Streams: calls, OnFailure: (&destination{}).receive,
		})
		if err != nil {
			t.Fatal(err)
		}
		pollers = append(pollers, p)
		wg.Go(func() { _ = p.Run(ctx) })
	}
	r := &rig{t: t, db: db, table: names.Of(schema.Reactions)}
	const n = 1200
	var want []string
	for v := range n {
		edge := fmt.Sprintf("k%d", v%40)
		r.put(edge, v)
		want = append(want, edge+"="+strconv.Itoa(v))
	}
	for _, p := range pollers {
		wctx, done := context.WithTimeout(ctx, time.Minute)
		if err := p.WaitIdle(wctx); err != nil {
			t.Fatal(err)
		}
		done()
	}
	for i, rec := range recs {
		if applied, _ := rec.snapshot(); !slices.Equal(applied, want) {
			t.Errorf("function %d applied %d records, not the %d written in order", i, len(applied), n)
		}
	}
	if got := calls.records.Load(); got != n {
		t.Errorf("the stream returned %d records for %d written and two functions: each should be read once", got, n)
	}
}
