package deadletters_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/deadletters"
	"github.com/rallyhq/rally/shared/schema"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// records makes n stream records with ~1 KB of incompressible data each,
// so a batch of a thousand spans several chunks.
func records(n int) []events.DynamoDBEventRecord {
	rng := rand.New(rand.NewPCG(1, 2))
	out := make([]events.DynamoDBEventRecord, n)
	for i := range out {
		var noise strings.Builder
		for range 1024 {
			noise.WriteByte(byte('a' + rng.IntN(26)))
		}
		out[i] = events.DynamoDBEventRecord{
			EventID: fmt.Sprintf("ev-%d", i), EventName: "MODIFY", EventSourceArn: "arn:aws:dynamodb:us-east-1:1:table/T/stream/x",
			Change: events.DynamoDBStreamRecord{
				SequenceNumber: fmt.Sprintf("%021d", 1000+i),
				Keys:           map[string]events.DynamoDBAttributeValue{"pk": events.NewStringAttribute(fmt.Sprintf("k%d", i))},
				NewImage: map[string]events.DynamoDBAttributeValue{
					"pk": events.NewStringAttribute(fmt.Sprintf("k%d", i)), "ver": events.NewNumberAttribute(fmt.Sprint(i)),
					"noise": events.NewStringAttribute(noise.String()),
				},
				ApproximateCreationDateTime: events.SecondsEpochTime{Time: time.Unix(1_800_000_000+int64(i), 0).UTC()},
				StreamViewType:              "NEW_AND_OLD_IMAGES",
			},
		}
	}
	return out
}

// sameRecords compares records as Lambda delivers them: their JSON.
func sameRecords(a, b []events.DynamoDBEventRecord) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return len(a) == len(b) && string(ja) == string(jb)
}

func newArchive(t *testing.T) *deadletters.Archive {
	t.Helper()
	db, names, _ := testenv.DynamoDB(t)
	return &deadletters.Archive{DB: db, Table: names.Of(schema.DeadLetters), Clock: clock.System{}}
}

func parked(function string, recs []events.DynamoDBEventRecord) deadletters.Batch {
	return deadletters.Batch{
		Function: function, Source: "Reactions", ShardID: "shard-1",
		First: recs[0].Change.SequenceNumber, Last: recs[len(recs)-1].Change.SequenceNumber,
		Reason: "MaximumRecordAgeExceeded", ParkedAt: time.Now().UTC(),
	}
}

// A parked batch of a thousand 1 KB records comes back whole and in order
// (it is larger than one DynamoDB item), once however often it is
// archived, and is gone once removed.
func TestAParkedBatchKeepsEveryRecord(t *testing.T) {
	ctx := context.Background()
	a := newArchive(t)
	recs := records(1000)
	b, err := a.Put(ctx, parked("counter-processor", recs), recs)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := a.Put(ctx, parked("counter-processor", recs), recs); err != nil || again.ID != b.ID {
		t.Fatalf("archiving the same batch again: %+v %v", again, err)
	}
	other := records(3)
	if _, err := a.Put(ctx, parked("streak-processor", other), other); err != nil {
		t.Fatal(err)
	}
	listed, err := a.List(ctx, "counter-processor")
	if err != nil || len(listed) != 1 || listed[0].ID != b.ID || listed[0].Size != 1000 {
		t.Fatalf("listed %+v %v, want the one batch of 1000", listed, err)
	}
	got, err := a.Records(ctx, listed[0])
	if err != nil {
		t.Fatal(err)
	}
	if !sameRecords(got, recs) {
		t.Fatalf("records changed in the archive (got %d)", len(got))
	}
	if err := a.Remove(ctx, listed[0]); err != nil {
		t.Fatal(err)
	}
	if left, _ := a.List(ctx, "counter-processor"); len(left) != 0 {
		t.Fatalf("removed batch still listed: %+v", left)
	}
	for _, it := range testenv.TableItems(t, a.DB, a.Table) {
		if strings.Contains(fmt.Sprint(it), b.ID) {
			t.Fatalf("an item of the removed batch is left: %v", it)
		}
	}
	if left, _ := a.List(ctx, "streak-processor"); len(left) != 1 {
		t.Fatalf("another function's batch went too: %+v", left)
	}
}

// A redrive that applied part of a batch leaves only the rest parked,
// with the error and one more attempt; a redrive that applied none keeps
// the batch as it was, with the attempt counted.
func TestARetryKeepsWhatWasNotApplied(t *testing.T) {
	ctx := context.Background()
	a := newArchive(t)
	recs := records(10)
	b, err := a.Put(ctx, parked("counter-processor", recs), recs)
	if err != nil {
		t.Fatal(err)
	}
	b2, err := a.Retry(ctx, b, recs, 0, fmt.Errorf("still poison"))
	if err != nil || b2.ID != b.ID || b2.Attempts != 1 || b2.Error != "still poison" {
		t.Fatalf("a retry that applied nothing: %+v %v", b2, err)
	}
	b3, err := a.Retry(ctx, b2, recs, 4, fmt.Errorf("poison at 4"))
	if err != nil || b3.First != recs[4].Change.SequenceNumber || b3.Attempts != 2 {
		t.Fatalf("a retry from record 4: %+v %v", b3, err)
	}
	listed, _ := a.List(ctx, "counter-processor")
	if len(listed) != 1 || listed[0].ID != b3.ID || listed[0].Size != 6 {
		t.Fatalf("parked after a partial redrive: %+v", listed)
	}
	rest, err := a.Records(ctx, listed[0])
	if err != nil || !sameRecords(rest, recs[4:]) {
		t.Fatalf("records after a partial redrive: %d %v", len(rest), err)
	}
}
