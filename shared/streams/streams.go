// Package streams is Rally's DynamoDB Streams batch runner: it decodes
// stream images and reports partial batch failures the way the event source
// mapping expects (ReportBatchItemFailures, itemIdentifier = the record's
// SequenceNumber), so a failed record is retried, then dead-lettered, and
// never dropped. Every processor is built on it.
package streams

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/shared/obs"
	"github.com/rallyhq/rally/shared/schema"
)

// Metric names of failed invocations.
const (
	// MetricBatchFailures counts invocations that failed all or part of
	// their batch (or, on a scheduled tick, their maintenance).
	MetricBatchFailures = "BatchFailures"
	// MetricRecordsRetried counts the records such failures leave to the
	// event source mapping to retry (and finally dead-letter).
	MetricRecordsRetried = "RecordsRetried"
)

// MetricLag is how long after its write the oldest change of a batch was
// done with: the most stale a derived value (a count, a board) was, batch
// window and processing included. Lambda's IteratorAge is the newest
// record's age when the batch arrives; this is the oldest's when it
// leaves. Scheduled ticks carry no records and emit nothing.
const MetricLag = "StreamLagSeconds"

// Handler is the Lambda signature of every stream processor.
type Handler func(context.Context, events.DynamoDBEvent) (events.DynamoDBEventResponse, error)

// BatchFunc applies one batch of records, in order. It returns nil when all
// were applied; a *PartialError when the records before From were applied
// and the rest were not; any other error when none can be counted as applied.
type BatchFunc func(ctx context.Context, records []events.DynamoDBEventRecord) error

// PartialError reports that records[From:] were not applied.
type PartialError struct {
	From int
	Err  error
}

func (e *PartialError) Error() string {
	return fmt.Sprintf("records from %d not applied: %v", e.From, e.Err)
}
func (e *PartialError) Unwrap() error { return e.Err }

// Serve adapts fn to the Lambda stream signature. It never returns a
// function error for records: failures are reported per item, naming the
// first record not applied, which makes the event source mapping retry from
// there (and bisect, and finally dead-letter) without replaying what
// succeeded. An event with no records is a scheduled tick: fn runs its
// maintenance, and a failure is returned as the invocation's error.
//
// Every failure is also counted in metrics (nil counts nothing): a batch
// reported failed is no Lambda error, so MetricBatchFailures and
// MetricRecordsRetried are what see a processor failing. Every batch
// reports its MetricLag, failed or not: a batch retried over and over
// shows as lag that grows.
func Serve(log *slog.Logger, metrics *obs.Metrics, fn BatchFunc) Handler {
	return func(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		ctx = obs.WithUsers(ctx, Users(ev.Records)...)
		err := fn(ctx, ev.Records)
		if written, ok := oldest(ev.Records); ok {
			metrics.Emit(MetricLag, time.Since(written).Seconds(), obs.Seconds, nil)
		}
		if err == nil {
			return events.DynamoDBEventResponse{}, nil
		}
		metrics.Count(MetricBatchFailures, 1, nil)
		if len(ev.Records) == 0 {
			return events.DynamoDBEventResponse{}, err
		}
		from := 0
		var pe *PartialError
		if errors.As(err, &pe) && pe.From >= 0 && pe.From < len(ev.Records) {
			from = pe.From
		}
		metrics.Count(MetricRecordsRetried, len(ev.Records)-from, nil)
		first := ev.Records[from].Change.SequenceNumber
		log.ErrorContext(ctx, "stream batch failed",
			"records", len(ev.Records), "failed_from", from, "sequence_number", first, "error", err.Error())
		return events.DynamoDBEventResponse{
			BatchItemFailures: []events.DynamoDBBatchItemFailure{{ItemIdentifier: first}},
		}, nil
	}
}

// Users are the user ids records hold (schema.UserIDAttrs of their keys
// and images): logs made while processing them write them as hashes.
func Users(records []events.DynamoDBEventRecord) []string {
	var ids []string
	for _, rec := range records {
		for _, image := range []map[string]events.DynamoDBAttributeValue{rec.Change.Keys, rec.Change.NewImage, rec.Change.OldImage} {
			for _, name := range schema.UserIDAttrs {
				if v, ok := image[name]; ok && v.DataType() == events.DataTypeString {
					ids = append(ids, v.String())
				}
			}
		}
	}
	return ids
}

// oldest is the earliest write time of records; ok is false when none
// carries one.
func oldest(records []events.DynamoDBEventRecord) (t time.Time, ok bool) {
	for _, rec := range records {
		at := rec.Change.ApproximateCreationDateTime.Time
		if !at.IsZero() && (!ok || at.Before(t)) {
			t, ok = at, true
		}
	}
	return t, ok
}

// Unmarshal decodes a stream image into v with the same attributevalue
// rules the stores use to write items.
func Unmarshal(image map[string]events.DynamoDBAttributeValue, v any) error {
	return attributevalue.UnmarshalMap(Item(image), v)
}

// Item converts a stream image into SDK attribute values.
func Item(image map[string]events.DynamoDBAttributeValue) map[string]types.AttributeValue {
	if image == nil {
		return nil
	}
	out := make(map[string]types.AttributeValue, len(image))
	for k, v := range image {
		out[k] = Value(v)
	}
	return out
}

// Value converts one stream attribute value.
func Value(v events.DynamoDBAttributeValue) types.AttributeValue {
	switch v.DataType() {
	case events.DataTypeString:
		return &types.AttributeValueMemberS{Value: v.String()}
	case events.DataTypeNumber:
		return &types.AttributeValueMemberN{Value: v.Number()}
	case events.DataTypeBinary:
		return &types.AttributeValueMemberB{Value: v.Binary()}
	case events.DataTypeBoolean:
		return &types.AttributeValueMemberBOOL{Value: v.Boolean()}
	case events.DataTypeNull:
		return &types.AttributeValueMemberNULL{Value: true}
	case events.DataTypeStringSet:
		return &types.AttributeValueMemberSS{Value: v.StringSet()}
	case events.DataTypeNumberSet:
		return &types.AttributeValueMemberNS{Value: v.NumberSet()}
	case events.DataTypeBinarySet:
		return &types.AttributeValueMemberBS{Value: v.BinarySet()}
	case events.DataTypeList:
		list := v.List()
		out := make([]types.AttributeValue, len(list))
		for i, e := range list {
			out[i] = Value(e)
		}
		return &types.AttributeValueMemberL{Value: out}
	case events.DataTypeMap:
		return &types.AttributeValueMemberM{Value: Item(v.Map())}
	}
	return &types.AttributeValueMemberNULL{Value: true}
}

// FromItem converts SDK attribute values into a stream image, the inverse of
// Item; the local stack's pollers and tests use it to build the events
// Lambda would deliver.
func FromItem(item map[string]types.AttributeValue) map[string]events.DynamoDBAttributeValue {
	if item == nil {
		return nil
	}
	out := make(map[string]events.DynamoDBAttributeValue, len(item))
	for k, v := range item {
		out[k] = FromValue(v)
	}
	return out
}

// FromValue converts one SDK attribute value to its stream form.
func FromValue(v types.AttributeValue) events.DynamoDBAttributeValue {
	switch t := v.(type) {
	case *types.AttributeValueMemberS:
		return events.NewStringAttribute(t.Value)
	case *types.AttributeValueMemberN:
		return events.NewNumberAttribute(t.Value)
	case *types.AttributeValueMemberB:
		return events.NewBinaryAttribute(t.Value)
	case *types.AttributeValueMemberBOOL:
		return events.NewBooleanAttribute(t.Value)
	case *types.AttributeValueMemberSS:
		return events.NewStringSetAttribute(t.Value)
	case *types.AttributeValueMemberNS:
		return events.NewNumberSetAttribute(t.Value)
	case *types.AttributeValueMemberBS:
		return events.NewBinarySetAttribute(t.Value)
	case *types.AttributeValueMemberL:
		list := make([]events.DynamoDBAttributeValue, len(t.Value))
		for i, e := range t.Value {
			list[i] = FromValue(e)
		}
		return events.NewListAttribute(list)
	case *types.AttributeValueMemberM:
		return events.NewMapAttribute(FromItem(t.Value))
	}
	return events.NewNullAttribute()
}
