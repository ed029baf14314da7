package streamread

import (
	"context"
	"fmt"
	"math/big"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
)

// ReadRange reads the records of a parked batch back from its stream, from
// its first sequence number through its last. It fails with ErrExpired
// when the stream no longer holds the batch's first record.
func ReadRange(ctx context.Context, c ShardClient, b BatchInfo, region string) ([]events.DynamoDBEventRecord, error) {
	end, ok := new(big.Int).SetString(b.EndSequenceNumber, 10)
	if !ok {
		return nil, fmt.Errorf("bad end sequence number %q", b.EndSequenceNumber)
	}
	shard := &Shard{Client: c, StreamARN: b.StreamARN, ShardID: b.ShardID, Region: region, At: b.StartSequenceNumber}
	var out []events.DynamoDBEventRecord
	for empty := 0; !shard.Closed() && empty < 10; {
		page, err := shard.Next(ctx)
		if err != nil {
			return nil, err
		}
		if len(page) == 0 {
			empty++
		}
		for _, rec := range page {
			if len(out) == 0 && rec.Change.SequenceNumber != b.StartSequenceNumber {
				return nil, fmt.Errorf("read %s..%s of shard %s: %w", b.StartSequenceNumber, b.EndSequenceNumber, b.ShardID, ErrExpired)
			}
			seq, ok := new(big.Int).SetString(rec.Change.SequenceNumber, 10)
			if !ok || seq.Cmp(end) > 0 {
				return out, nil
			}
			out = append(out, rec)
			if seq.Cmp(end) == 0 {
				return out, nil
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("read %s..%s of shard %s: %w", b.StartSequenceNumber, b.EndSequenceNumber, b.ShardID, ErrExpired)
	}
	return out, nil
}

// Retained is a stream as DynamoDB keeps it: records older than the
// retention are gone. DynamoDB Local keeps every record, so the local
// stack reads through Retained to make its retention real (and movable
// with its clock): a record Gone says of, by its creation time, is no
// longer there, and an iterator at it is refused as trimmed.
type Retained struct {
	Client
	Gone func(created time.Time) bool
}

func (r Retained) gone(rec types.Record) bool {
	return r.Gone != nil && rec.Dynamodb != nil && rec.Dynamodb.ApproximateCreationDateTime != nil &&
		r.Gone(*rec.Dynamodb.ApproximateCreationDateTime)
}

// GetRecords implements ShardClient.
func (r Retained) GetRecords(ctx context.Context, in *dynamodbstreams.GetRecordsInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error) {
	out, err := r.Client.GetRecords(ctx, in, opts...)
	if err != nil || r.Gone == nil {
		return out, err
	}
	kept := out.Records[:0:0]
	for _, rec := range out.Records {
		if !r.gone(rec) {
			kept = append(kept, rec)
		}
	}
	out.Records = kept
	return out, nil
}

// GetShardIterator implements ShardClient: an iterator at or after a
// record that is no longer retained is refused, as DynamoDB refuses one
// past its trim horizon.
func (r Retained) GetShardIterator(ctx context.Context, in *dynamodbstreams.GetShardIteratorInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetShardIteratorOutput, error) {
	if r.Gone != nil && in.SequenceNumber != nil && in.ShardIteratorType == types.ShardIteratorTypeAtSequenceNumber {
		probe, err := r.Client.GetShardIterator(ctx, in, opts...)
		if err != nil {
			return nil, err
		}
		page, err := r.Client.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: probe.ShardIterator, Limit: aws.Int32(1)})
		if err == nil && len(page.Records) == 1 && r.gone(page.Records[0]) {
			return nil, &types.TrimmedDataAccessException{Message: aws.String("the record is past the stream's retention")}
		}
	}
	return r.Client.GetShardIterator(ctx, in, opts...)
}
