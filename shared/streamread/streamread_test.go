package streamread_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"

	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/infra/local/testenv/await"
	"github.com/rallyhq/rally/shared/schema"
	"github.com/rallyhq/rally/shared/streamread"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// rig is a Reactions table in DynamoDB Local and a client of its stream.
type rig struct {
	db      *dynamodb.Client
	streams *dynamodbstreams.Client
	table   string
	arn     string
}

func newRig(t *testing.T) rig {
	t.Helper()
	db, names, endpoint := testenv.DynamoDB(t)
	r := rig{db: db, streams: testenv.StreamsClient(endpoint), table: names.Of(schema.Reactions)}
	arn, err := streamread.StreamARN(context.Background(), db, r.table)
	if err != nil {
		t.Fatal(err)
	}
	r.arn = arn
	return r
}

// put writes the edges in order; each put is one stream record.
func (r rig) put(t *testing.T, edges ...string) {
	t.Helper()
	for _, e := range edges {
		if _, err := r.db.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(r.table), Item: map[string]ddbtypes.AttributeValue{
			schema.AttrUserID: &ddbtypes.AttributeValueMemberS{Value: "u1"},
			schema.AttrEdge:   &ddbtypes.AttributeValueMemberS{Value: e},
		}}); err != nil {
			t.Fatal(err)
		}
	}
}

// all waits until the stream holds want records and returns them.
func (r rig) all(t *testing.T, want int) (string, []events.DynamoDBEventRecord) {
	t.Helper()
	var shard string
	var recs []events.DynamoDBEventRecord
	await.Success(t, 10*time.Second, fmt.Sprintf("%d records on the stream", want), func() error {
		shards, err := streamread.All(context.Background(), r.streams, r.arn, testenv.Region)
		if err != nil {
			return err
		}
		shard, recs = "", nil
		for _, sh := range shards {
			if len(sh.Records) > 0 {
				shard = sh.ShardID
			}
			recs = append(recs, sh.Records...)
		}
		if len(recs) != want {
			return fmt.Errorf("%d records", len(recs))
		}
		return nil
	})
	return shard, recs
}

func edges(recs []events.DynamoDBEventRecord) string {
	var out []string
	for _, r := range recs {
		out = append(out, r.Change.Keys[schema.AttrEdge].String())
	}
	return strings.Join(out, " ")
}

func TestAllReadsEveryWriteOnceInOrderAsLambdaDeliversIt(t *testing.T) {
	r := newRig(t)
	r.put(t, "e0", "e1", "e2", "e3", "e4")
	_, recs := r.all(t, 5)
	if got := edges(recs); got != "e0 e1 e2 e3 e4" {
		t.Fatalf("read %q, want every write once, in order", got)
	}
	for _, rec := range recs {
		if rec.EventName != "INSERT" || rec.EventSource != "aws:dynamodb" || rec.EventSourceArn != r.arn || rec.AWSRegion == "" ||
			rec.Change.NewImage[schema.AttrUserID].String() != "u1" || rec.Change.SequenceNumber == "" || rec.Change.ApproximateCreationDateTime.IsZero() {
			t.Fatalf("record not as Lambda delivers it: %+v", rec)
		}
	}
}

// flaky fails the next GetRecords with an expired iterator, or the next
// GetShardIterator after a sequence number with trimmed data, when told.
type flaky struct {
	*dynamodbstreams.Client
	expireNextRead, trimNextAfter bool
}

func (f *flaky) GetRecords(ctx context.Context, in *dynamodbstreams.GetRecordsInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error) {
	if f.expireNextRead {
		f.expireNextRead = false
		return nil, &types.ExpiredIteratorException{Message: aws.String("expired")}
	}
	return f.Client.GetRecords(ctx, in, opts...)
}

func (f *flaky) GetShardIterator(ctx context.Context, in *dynamodbstreams.GetShardIteratorInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetShardIteratorOutput, error) {
	if f.trimNextAfter && in.ShardIteratorType == types.ShardIteratorTypeAfterSequenceNumber {
		f.trimNextAfter = false
		return nil, &types.TrimmedDataAccessException{Message: aws.String("trimmed")}
	}
	return f.Client.GetShardIterator(ctx, in, opts...)
}

// readUntil calls Next until want records came or the wait is over.
func readUntil(t *testing.T, sh *streamread.Shard, want int) []events.DynamoDBEventRecord {
	t.Helper()
	var got []events.DynamoDBEventRecord
	await.Success(t, 10*time.Second, fmt.Sprintf("%d records from the shard", want), func() error {
		page, err := sh.Next(context.Background())
		if err != nil {
			return err
		}
		got = append(got, page...)
		if len(got) < want {
			return fmt.Errorf("%d records: %s", len(got), edges(got))
		}
		return nil
	})
	return got
}

// A reader that starts at a sequence number and loses its iterator (they
// expire after 15 minutes) carries on after the last record it returned:
// nothing is skipped, nothing read twice.
func TestAShardReaderStartsWhereToldAndResumesAfterALostIterator(t *testing.T) {
	r := newRig(t)
	r.put(t, "e0", "e1", "e2", "e3", "e4")
	shard, recs := r.all(t, 5)
	client := &flaky{Client: r.streams}
	sh := &streamread.Shard{Client: client, StreamARN: r.arn, ShardID: shard, Region: testenv.Region, At: recs[2].Change.SequenceNumber}
	if got := edges(readUntil(t, sh, 3)); got != "e2 e3 e4" {
		t.Fatalf("read %q from the third record, want e2 e3 e4", got)
	}
	r.put(t, "e5", "e6")
	client.expireNextRead = true
	if got := edges(readUntil(t, sh, 2)); got != "e5 e6" {
		t.Fatalf("read %q after the lost iterator, want e5 e6", got)
	}
	if client.expireNextRead {
		t.Fatal("the reader never used its stale iterator")
	}
}

// When the records after the last one read have left the stream, a reader
// that was told what to do with lost records reports them and carries on
// from the oldest record held; one that was not fails with ErrExpired.
func TestLostRecordsAreReportedOrFail(t *testing.T) {
	r := newRig(t)
	r.put(t, "e0", "e1", "e2")
	shard, recs := r.all(t, 3)
	last := recs[2].Change.SequenceNumber

	var lost []string
	client := &flaky{Client: r.streams}
	sh := &streamread.Shard{Client: client, StreamARN: r.arn, ShardID: shard, Expired: func(after string) { lost = append(lost, after) }}
	readUntil(t, sh, 3)
	client.expireNextRead, client.trimNextAfter = true, true
	again := readUntil(t, sh, 3)
	if !slices.Equal(lost, []string{last}) || edges(again) != "e0 e1 e2" {
		t.Fatalf("lost %v, then read %q; want the loss after %s reported and the shard read again from its oldest record", lost, edges(again), last)
	}

	strict := &streamread.Shard{Client: client, StreamARN: r.arn, ShardID: shard}
	readUntil(t, strict, 3)
	client.expireNextRead, client.trimNextAfter = true, true
	if _, err := strict.Next(context.Background()); !errors.Is(err, streamread.ErrExpired) {
		t.Fatalf("Next = %v, want ErrExpired", err)
	}
}

func TestATableWithoutAStreamHasNoStreamARN(t *testing.T) {
	db, names, _ := testenv.DynamoDB(t)
	if arn, err := streamread.StreamARN(context.Background(), db, names.Of(schema.Counters)); err == nil || !strings.Contains(err.Error(), "no stream") {
		t.Fatalf("StreamARN = %q, %v; want a missing-stream error", arn, err)
	}
}

func TestTableOfNamesTheStreamsTable(t *testing.T) {
	for arn, want := range map[string]string{
		"arn:aws:dynamodb:us-east-1:123456789012:table/Rally-dev-DataReactions-1A2B/stream/2026-11-22T00:00:00.000": "Rally-dev-DataReactions-1A2B",
		"not an arn": "not an arn",
	} {
		if got := streamread.TableOf(arn); got != want {
			t.Errorf("TableOf(%q) = %q, want %q", arn, got, want)
		}
	}
}
