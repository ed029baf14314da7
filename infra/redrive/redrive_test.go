package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rallyhq/rally/shared/deadletters"

	"github.com/rallyhq/rally/shared/reactions"
	rdynamo "github.com/rallyhq/rally/shared/reactions/dynamo"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"

	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/infra/local/testenv/await"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
	"github.com/rallyhq/rally/shared/streamread"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// The body Lambda sends to an event source mapping's SQS on-failure
// destination for a DynamoDB stream.
const onFailure = `{"requestContext":{"requestId":"c9b8fa9f-5a7f-4e3c-8e3a-111111111111","functionArn":"arn:aws:lambda:us-east-1:123456789012:function:Rally-dev-counter","condition":"RetryAttemptsExhausted","approximateInvokeCount":9},
"responseContext":{"statusCode":200,"executedVersion":"$LATEST","functionError":""},"version":"1.0","timestamp":"2026-11-22T10:00:00.000Z",
"DDBStreamBatchInfo":{"shardId":"shardId-00000001","startSequenceNumber":"100","endSequenceNumber":"300","approximateArrivalOfFirstRecord":"2026-11-22T09:59:00Z","approximateArrivalOfLastRecord":"2026-11-22T09:59:01Z","batchSize":3,"streamArn":"arn:aws:dynamodb:us-east-1:123456789012:table/Reactions/stream/2026-11-22T00:00:00.000"}}`

func TestParseParkedReadsLambdasOnFailureRecord(t *testing.T) {
	p, err := deadletters.ParseParked(onFailure)
	if err != nil {
		t.Fatal(err)
	}
	if p.BatchInfo.ShardID != "shardId-00000001" || p.BatchInfo.EndSequenceNumber != "300" || p.RequestContext.Condition != "RetryAttemptsExhausted" {
		t.Fatalf("parsed %+v", p)
	}
	for _, bad := range []string{"", "{}", `{"requestContext":{}}`, "not json"} {
		if _, err := deadletters.ParseParked(bad); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

type fakeInvoker struct {
	fail  bool
	calls [][]string
}

func (f *fakeInvoker) Invoke(_ context.Context, _ string, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
	var seqs []string
	for _, r := range ev.Records {
		seqs = append(seqs, r.Change.SequenceNumber)
	}
	f.calls = append(f.calls, seqs)
	if f.fail {
		return events.DynamoDBEventResponse{BatchItemFailures: []events.DynamoDBBatchItemFailure{{ItemIdentifier: seqs[0]}}}, nil
	}
	return events.DynamoDBEventResponse{}, nil
}

// A parked batch is read back from the stream exactly — from its first
// through its last sequence number — and only a replay the processor fully
// applies counts as done.
func TestReplayReadsTheParkedRangeFromTheStream(t *testing.T) {
	ctx := context.Background()
	db, names, endpoint := testenv.DynamoDB(t)
	table := names.Of(schema.Reactions)
	edges := &rdynamo.Edges{DB: db, Table: table}
	for i := 0; i < 6; i++ {
		ref := reactions.Ref{UserID: "u1", Kind: reactions.Favorite, TargetID: fmt.Sprintf("g%d", i)}
		if _, _, err := edges.Add(ctx, ref, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	streams := testenv.StreamsClient(endpoint)
	arn, shard, seqs := streamOf(t, ctx, db, streams, table, 6)

	b := streamread.BatchInfo{ShardID: shard, StartSequenceNumber: seqs[1], EndSequenceNumber: seqs[3], StreamARN: arn, BatchSize: 3}
	inv := &fakeInvoker{fail: true}
	if _, err := Replay(ctx, streams, inv, "counter-processor", streamread.Parked{BatchInfo: b}, "us-east-1"); err == nil {
		t.Fatal("a replay the processor failed counted as done")
	}
	inv.fail = false
	n, err := Replay(ctx, streams, inv, "counter-processor", streamread.Parked{BatchInfo: b}, "us-east-1")
	if err != nil || n != 3 {
		t.Fatalf("replayed %d, %v", n, err)
	}
	last := inv.calls[len(inv.calls)-1]
	if fmt.Sprint(last) != fmt.Sprint(seqs[1:4]) {
		t.Fatalf("replayed records %v, want %v", last, seqs[1:4])
	}
}

func streamOf(t *testing.T, ctx context.Context, db *dynamodb.Client, s *dynamodbstreams.Client, table string, want int) (string, string, []string) {
	t.Helper()
	arn, err := streamread.StreamARN(ctx, db, table)
	if err != nil {
		t.Fatal(err)
	}
	var shard string
	var seqs []string
	await.Success(t, 10*time.Second, fmt.Sprintf("%d records on the stream of %s", want, table), func() error {
		shards, err := streamread.All(ctx, s, arn, testenv.Region)
		if err != nil {
			return err
		}
		for _, sh := range shards {
			if len(sh.Records) >= want {
				shard, seqs = sh.ShardID, nil
				for _, r := range sh.Records {
					seqs = append(seqs, r.Change.SequenceNumber)
				}
				return nil
			}
		}
		return fmt.Errorf("no shard of %d holds %d records", len(shards), want)
	})
	return arn, shard, seqs
}

// The analytics shipper is declared once per stream it reads; redrive
// visits its one queue once.
func TestEachProcessorFunctionIsVisitedOnce(t *testing.T) {
	got := processorFunctions(routes.Processors())
	seen := map[string]bool{}
	for _, fn := range got {
		if seen[fn] {
			t.Errorf("%s listed twice in %v", fn, got)
		}
		seen[fn] = true
	}
	for _, p := range routes.Processors() {
		if !seen[p.Function] {
			t.Errorf("%s missing from %v", p.Function, got)
		}
	}
	if !seen[routes.AnalyticsShipper.Function] {
		t.Errorf("the analytics shipper is not a processor: %v", got)
	}
}
