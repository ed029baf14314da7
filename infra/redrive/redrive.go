package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"

	"github.com/rallyhq/rally/infra/local/poller"
)

// Streams is the part of the DynamoDB Streams API a redrive reads with.
type Streams interface {
	GetShardIterator(context.Context, *dynamodbstreams.GetShardIteratorInput, ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetShardIteratorOutput, error)
	GetRecords(context.Context, *dynamodbstreams.GetRecordsInput, ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error)
}

// Invoker runs a processor with a batch, as the event source mapping does.
type Invoker interface {
	Invoke(ctx context.Context, function string, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error)
}

// ErrExpired means the stream no longer holds the batch (records live 24h).
var ErrExpired = errors.New("the stream no longer holds these records (kept 24 hours)")

// ParseParked reads an SQS message body: the invocation record Lambda sends
// to an event source mapping's on-failure destination.
func ParseParked(body string) (poller.Parked, error) {
	var p poller.Parked
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		return p, fmt.Errorf("not an on-failure record: %w", err)
	}
	b := p.BatchInfo
	if b.ShardID == "" || b.StartSequenceNumber == "" || b.EndSequenceNumber == "" || b.StreamARN == "" {
		return p, errors.New("not an on-failure record of a DynamoDB stream (no DDBStreamBatchInfo)")
	}
	return p, nil
}

// ReadBatch reads the records of a parked batch back from its stream, from
// its first sequence number through its last.
func ReadBatch(ctx context.Context, s Streams, b poller.BatchInfo, region string) ([]events.DynamoDBEventRecord, error) {
	end, ok := new(big.Int).SetString(b.EndSequenceNumber, 10)
	if !ok {
		return nil, fmt.Errorf("bad end sequence number %q", b.EndSequenceNumber)
	}
	it, err := s.GetShardIterator(ctx, &dynamodbstreams.GetShardIteratorInput{
		StreamArn: aws.String(b.StreamARN), ShardId: aws.String(b.ShardID),
		ShardIteratorType: types.ShardIteratorTypeAtSequenceNumber, SequenceNumber: aws.String(b.StartSequenceNumber),
	})
	if err != nil {
		var trimmed *types.TrimmedDataAccessException
		if errors.As(err, &trimmed) {
			return nil, ErrExpired
		}
		return nil, fmt.Errorf("locate shard %s at %s: %w", b.ShardID, b.StartSequenceNumber, err)
	}
	var out []events.DynamoDBEventRecord
	iter := it.ShardIterator
	for empty := 0; iter != nil && empty < 10; {
		page, err := s.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: iter})
		if err != nil {
			var trimmed *types.TrimmedDataAccessException
			if errors.As(err, &trimmed) {
				return nil, ErrExpired
			}
			return nil, fmt.Errorf("read shard %s: %w", b.ShardID, err)
		}
		if len(page.Records) == 0 {
			empty++
		}
		for _, r := range page.Records {
			seq, ok := new(big.Int).SetString(aws.ToString(r.Dynamodb.SequenceNumber), 10)
			if !ok || seq.Cmp(end) > 0 {
				return out, nil
			}
			rec, err := poller.LambdaRecord(r, b.StreamARN, region)
			if err != nil {
				return nil, err
			}
			out = append(out, rec)
			if seq.Cmp(end) == 0 {
				return out, nil
			}
		}
		iter = page.NextShardIterator
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no records found from %s to %s", b.StartSequenceNumber, b.EndSequenceNumber)
	}
	return out, nil
}

// Replay reads a parked batch and invokes function with it. It succeeds
// only when the processor applied every record.
func Replay(ctx context.Context, s Streams, inv Invoker, function string, p poller.Parked, region string) (int, error) {
	records, err := ReadBatch(ctx, s, p.BatchInfo, region)
	if err != nil {
		return 0, err
	}
	resp, err := inv.Invoke(ctx, function, events.DynamoDBEvent{Records: records})
	if err != nil {
		return 0, err
	}
	if n := len(resp.BatchItemFailures); n > 0 {
		return 0, fmt.Errorf("%s still fails from record %s", function, resp.BatchItemFailures[0].ItemIdentifier)
	}
	return len(records), nil
}
