package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"

	"github.com/aws/aws-lambda-go/events"

	"github.com/rallyhq/rally/infra/streamread"
)

// Invoker runs a processor with a batch, as the event source mapping does.
type Invoker interface {
	Invoke(ctx context.Context, function string, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error)
}

// ParseParked reads an SQS message body: the invocation record Lambda sends
// to an event source mapping's on-failure destination.
func ParseParked(body string) (streamread.Parked, error) {
	var p streamread.Parked
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
// its first sequence number through its last. It fails with
// streamread.ErrExpired when the stream no longer holds them.
func ReadBatch(ctx context.Context, s streamread.ShardClient, b streamread.BatchInfo, region string) ([]events.DynamoDBEventRecord, error) {
	end, ok := new(big.Int).SetString(b.EndSequenceNumber, 10)
	if !ok {
		return nil, fmt.Errorf("bad end sequence number %q", b.EndSequenceNumber)
	}
	shard := &streamread.Shard{Client: s, StreamARN: b.StreamARN, ShardID: b.ShardID, Region: region, At: b.StartSequenceNumber}
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
		return nil, fmt.Errorf("no records found from %s to %s", b.StartSequenceNumber, b.EndSequenceNumber)
	}
	return out, nil
}

// Replay reads a parked batch and invokes function with it. It succeeds
// only when the processor applied every record.
func Replay(ctx context.Context, s streamread.ShardClient, inv Invoker, function string, p streamread.Parked, region string) (int, error) {
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
