package deadletters

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/rallyhq/rally/shared/obs"
	"github.com/rallyhq/rally/shared/streamread"
)

// Archiver archives parked batches: given the on-failure record of a batch
// (where it was), it reads the records from the stream while the stream
// still holds them, and stores them with the batch in the Archive. In AWS
// it is the dlq-archiver function, fed by every processor's dead-letter
// queue; locally the stream pollers hand it what they park.
type Archiver struct {
	Streams streamread.ShardClient
	Archive *Archive
	// Region fills awsRegion of records that do not carry one.
	Region string
	// Function names the processor of a function ARN (its declared name,
	// e.g. counter-processor, from the deployed function's name).
	Function func(functionARN string) (string, bool)
	// Source names the table of a stream ARN (its logical name).
	Source  func(streamARN string) string
	Log     *slog.Logger
	Metrics *obs.Metrics
}

// MetricArchived counts archived batches; MetricLost counts parked
// batches whose records the stream no longer held (the alarm on it says
// records were lost).
const (
	MetricArchived = "DeadLettersArchived"
	MetricLost     = "DeadLettersLost"
)

// Park archives the batch p locates.
func (a *Archiver) Park(ctx context.Context, p streamread.Parked) (Batch, error) {
	function, ok := a.Function(p.RequestContext.FunctionARN)
	if !ok {
		return Batch{}, fmt.Errorf("deadletters: %s is no Rally processor", p.RequestContext.FunctionARN)
	}
	info := p.BatchInfo
	records, err := streamread.ReadRange(ctx, a.Streams, info, a.Region)
	if err != nil {
		if errors.Is(err, streamread.ErrExpired) {
			a.Metrics.Count(MetricLost, 1, map[string]string{"Processor": function})
		}
		return Batch{}, fmt.Errorf("deadletters: read the parked batch of %s: %w", function, err)
	}
	parkedAt, _ := time.Parse(time.RFC3339Nano, p.Timestamp) // zero when absent
	b := Batch{
		Function: function, StreamARN: info.StreamARN, ShardID: info.ShardID,
		First: info.StartSequenceNumber, Last: info.EndSequenceNumber,
		Reason: p.RequestContext.Condition, ParkedAt: parkedAt.UTC(),
	}
	if a.Source != nil {
		b.Source = a.Source(info.StreamARN)
	}
	if b, err = a.Archive.Put(ctx, b, records); err != nil {
		return Batch{}, err
	}
	a.Metrics.Count(MetricArchived, 1, map[string]string{"Processor": function})
	a.logger().WarnContext(ctx, "parked batch archived", "function", function, "batch", b.ID,
		"records", b.Size, "reason", b.Reason, "first", b.First, "last", b.Last)
	return b, nil
}

// HandleSQS is the dlq-archiver's Lambda handler: each message is an
// on-failure record. A message that cannot be archived is reported failed,
// so it stays in the queue (and its alarm) for another try.
func (a *Archiver) HandleSQS(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	var resp events.SQSEventResponse
	for _, m := range ev.Records {
		p, err := ParseParked(m.Body)
		if err == nil {
			_, err = a.Park(ctx, p)
		}
		if err != nil {
			a.logger().ErrorContext(ctx, "parked batch not archived", "message", m.MessageId, "error", err.Error())
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: m.MessageId})
		}
	}
	return resp, nil
}

// ParseParked reads an on-failure record, as an event source mapping sends
// it to its destination.
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

// FunctionName is the function name in a Lambda function ARN
// (arn:aws:lambda:<region>:<account>:function:<name>[:<qualifier>]).
func FunctionName(arn string) string {
	_, rest, ok := strings.Cut(arn, ":function:")
	if !ok {
		return arn
	}
	name, _, _ := strings.Cut(rest, ":")
	return name
}

func (a *Archiver) logger() *slog.Logger {
	if a.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return a.Log
}
