package main

import (
	"context"
	"fmt"

	"github.com/aws/aws-lambda-go/events"

	"github.com/rallyhq/rally/shared/streamread"
)

// Invoker runs a processor with a batch, as the event source mapping does.
type Invoker interface {
	Invoke(ctx context.Context, function string, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error)
}

// Replay reads a parked batch and invokes function with it. It succeeds
// only when the processor applied every record.
func Replay(ctx context.Context, s streamread.ShardClient, inv Invoker, function string, p streamread.Parked, region string) (int, error) {
	records, err := streamread.ReadRange(ctx, s, p.BatchInfo, region)
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
