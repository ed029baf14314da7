package dynamo_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rallyhq/rally/shared/streamread"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/rallyhq/rally/infra/local/poller"
	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
	"github.com/rallyhq/rally/shared/streaks"
	"github.com/rallyhq/rally/shared/streaks/dynamo"
	"github.com/rallyhq/rally/shared/streams"
)

// streamDecoder feeds the Streaks table's real stream, in the shape Lambda
// delivers it, through StateFromRecord.
type streamDecoder struct {
	t       *testing.T
	p       *poller.Poller
	mu      sync.Mutex
	decoded []streaks.State
}

func decodeStream(t *testing.T, r rig) *streamDecoder {
	t.Helper()
	d := &streamDecoder{t: t}
	var err error
	d.p, err = poller.New(poller.Options{
		Processor: routes.Processor{Function: "streak-decoder", Source: schema.Streaks, BatchSize: 100, MaxRetries: 1, MaxRecordAge: time.Hour},
		Handler:   d.handle, Table: r.names.Of(schema.Streaks), DB: r.db, Streams: testenv.StreamsClient(r.endpoint),
		OnFailure: func(_ context.Context, p streamread.Parked) error {
			t.Errorf("the decoder parked a batch: %+v", p.BatchInfo)
			return nil
		},
		PollInterval: 20 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("poller: %v", err)
		}
	})
	return d
}

func (d *streamDecoder) handle(_ context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, rec := range ev.Records {
		st, ok, err := dynamo.StateFromRecord(rec)
		if err != nil || !ok {
			d.t.Errorf("%s record %s: ok=%v err=%v", rec.EventName, rec.Change.SequenceNumber, ok, err)
			continue
		}
		d.decoded = append(d.decoded, st)
	}
	return events.DynamoDBEventResponse{}, nil
}

// drain waits for every record written so far and returns their states.
func (d *streamDecoder) drain() []streaks.State {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := d.p.WaitIdle(ctx); err != nil {
		d.t.Fatal(err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	out := d.decoded
	d.decoded = nil
	return out
}

// Every change of a streak comes off the stream as the state the store
// wrote: inserts, updates, region moves (naming the region left, as the
// boards need, and every region the streak was ever in, as erasure needs)
// and erasure (the last state, Removed, one version past it: the rule for
// deletions every decoder follows).
func TestStateFromRecordDecodesTheStreaksStream(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	d := decodeStream(t, r)
	at := time.Date(year, 3, 10, 8, 0, 0, 0, time.UTC)
	var want []streaks.State
	everIn := []string{"eu"}
	for i, region := range []string{"eu", "eu", "na", "", "apac"} {
		c := r.record(t, "fay", string(rune('a'+i)), region, streaks.Activity{
			Type: streaks.MatchWon, Source: streaks.Console, Timezone: "Asia/Kolkata", At: at.Add(time.Duration(i) * 20 * time.Hour),
		})
		if region != "" && !slices.Contains(everIn, region) {
			everIn = append(everIn, region)
			slices.Sort(everIn)
		}
		c.Next.Regions = slices.Clone(everIn)
		want = append(want, c.Next)
	}
	equal(t, "regions ever in", want[4].Regions, []string{"apac", "eu", "na"})
	equal(t, "region moves", []string{want[1].PrevRegion, want[2].PrevRegion, want[3].PrevRegion, want[4].PrevRegion}, []string{"", "eu", "na", ""})
	equal(t, "decoded changes", d.drain(), want)

	_, err := r.db.DeleteItem(context.Background(), &dynamodb.DeleteItemInput{
		TableName: aws.String(r.names.Of(schema.Streaks)), Key: streakKey("fay"),
	})
	if err != nil {
		t.Fatal(err)
	}
	gone := stored(want[len(want)-1])
	gone.Version++
	gone.Removed = true
	equal(t, "decoded erasure", d.drain(), []streaks.State{gone})
}

// A record without images carries no state; one whose image is not a
// streak is an error, so the batch stops there instead of losing it.
func TestStateFromRecordRefusesWhatIsNotAStreak(t *testing.T) {
	t.Parallel()
	if st, ok, err := dynamo.StateFromRecord(events.DynamoDBEventRecord{}); ok || err != nil {
		t.Fatalf("empty record: %+v ok=%v err=%v", st, ok, err)
	}
	bad := events.DynamoDBEventRecord{Change: events.DynamoDBStreamRecord{
		SequenceNumber: "7",
		NewImage:       map[string]events.DynamoDBAttributeValue{"user_id": events.NewStringAttribute("gil")},
	}}
	if _, ok, err := dynamo.StateFromRecord(bad); ok || err == nil {
		t.Fatalf("a record without a version decoded: ok=%v err=%v", ok, err)
	}
	wrongType := events.DynamoDBEventRecord{Change: events.DynamoDBStreamRecord{
		SequenceNumber: "8",
		NewImage:       streams.FromItem(nil),
		OldImage: map[string]events.DynamoDBAttributeValue{
			"user_id": events.NewStringAttribute("gil"), "version": events.NewStringAttribute("one"),
		},
	}}
	if _, ok, err := dynamo.StateFromRecord(wrongType); ok || err == nil {
		t.Fatalf("a malformed record decoded: ok=%v err=%v", ok, err)
	}
}
