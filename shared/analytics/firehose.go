package analytics

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/firehose"
	"github.com/aws/aws-sdk-go-v2/service/firehose/types"
	"github.com/aws/smithy-go"
)

// Sink receives events. Send returns, for each event, whether it was not
// accepted (failed[i]: send it again). err means nothing more can be sent
// now and retrying at once is pointless (the stream is missing, access is
// denied, the context ended); failed, when not nil, still tells which
// events were accepted before that.
type Sink interface {
	Send(ctx context.Context, events []Event) (failed []bool, err error)
}

// FirehoseAPI is the part of the Firehose API the sink uses.
type FirehoseAPI interface {
	PutRecordBatch(ctx context.Context, in *firehose.PutRecordBatchInput, optFns ...func(*firehose.Options)) (*firehose.PutRecordBatchOutput, error)
}

// Limits of PutRecordBatch.
const (
	MaxBatchRecords = 500
	MaxBatchBytes   = 4 << 20    // 4 MiB per call
	MaxRecordBytes  = 1000 << 10 // 1,000 KiB per record
)

// FirehoseSink sends events to a Firehose delivery stream that converts
// them to Parquet and writes them partitioned by event type, date and hour.
type FirehoseSink struct {
	Client FirehoseAPI
	Stream string
	// Log, when set, receives the reasons records were refused (error codes
	// and counts; never event contents).
	Log *slog.Logger
}

// firehoseRecord is an event as the delivery stream reads it: the event's
// JSON with occurred_at in epoch milliseconds (the Hive JSON SerDe is set
// to "millis"), plus dt and hour for dynamic partitioning. The outer
// occurred_at hides the embedded one.
type firehoseRecord struct {
	Event
	OccurredAt int64  `json:"occurred_at"`
	Date       string `json:"dt"`
	Hour       string `json:"hour"`
}

// FirehoseRecord is the record data of e, one JSON object and a newline.
func FirehoseRecord(e Event) ([]byte, error) {
	t := e.OccurredAt.UTC()
	b, err := json.Marshal(firehoseRecord{
		Event: e, OccurredAt: t.UnixMilli(), Date: t.Format("2006-01-02"), Hour: t.Format("15"),
	})
	if err != nil {
		return nil, fmt.Errorf("analytics: encode event %s: %w", e.EventID, err)
	}
	return append(b, '\n'), nil
}

// Send puts the events in calls of at most MaxBatchRecords records and
// MaxBatchBytes bytes. A record Firehose refuses (its ErrorCode) fails its
// event; a failed call (throttling, a 5xx) fails the call's events. An
// event whose record is larger than MaxRecordBytes can never be sent and
// fails every time, so it ends in the dead-letter queue rather than being
// dropped.
func (s *FirehoseSink) Send(ctx context.Context, events []Event) ([]bool, error) {
	failed := make([]bool, len(events))
	var (
		records []types.Record
		indexes []int
		size    int
	)
	flush := func() error {
		if len(records) == 0 {
			return nil
		}
		err := s.put(ctx, records, indexes, failed)
		records, indexes, size = nil, nil, 0
		return err
	}
	for i, e := range events {
		data, err := FirehoseRecord(e)
		if err == nil && len(data) > MaxRecordBytes {
			err = fmt.Errorf("analytics: event %s is %d bytes, over Firehose's record limit", e.EventID, len(data))
		}
		if err != nil {
			failed[i] = true
			s.warn(ctx, "event cannot be sent", "event_id", e.EventID, "error", err.Error())
			continue
		}
		if len(records) == MaxBatchRecords || size+len(data) > MaxBatchBytes {
			if err := flush(); err != nil {
				return failAfter(failed, i), err
			}
		}
		records, indexes, size = append(records, types.Record{Data: data}), append(indexes, i), size+len(data)
	}
	if err := flush(); err != nil {
		return failed, err
	}
	return failed, nil
}

// put sends one call's records; events[indexes[j]] is records[j].
func (s *FirehoseSink) put(ctx context.Context, records []types.Record, indexes []int, failed []bool) error {
	out, err := s.Client.PutRecordBatch(ctx, &firehose.PutRecordBatchInput{
		DeliveryStreamName: aws.String(s.Stream), Records: records,
	})
	if err == nil && len(out.RequestResponses) != len(records) {
		err = fmt.Errorf("analytics: firehose answered %d of %d records", len(out.RequestResponses), len(records))
	}
	if err != nil {
		for _, i := range indexes {
			failed[i] = true
		}
		if ctx.Err() != nil || permanent(err) {
			return fmt.Errorf("analytics: put records to %s: %w", s.Stream, err)
		}
		s.warn(ctx, "firehose call failed", "records", len(records), "error", err.Error())
		return nil
	}
	codes := map[string]int{}
	for j, r := range out.RequestResponses {
		if code := aws.ToString(r.ErrorCode); code != "" {
			failed[indexes[j]] = true
			codes[code]++
		}
	}
	if len(codes) > 0 {
		s.warn(ctx, "firehose refused records", "records", len(records), "refused_by_code", codes)
	}
	return nil
}

// permanent reports an error no retry within this invocation can fix.
func permanent(err error) bool {
	var api smithy.APIError
	if !errors.As(err, &api) {
		return false
	}
	switch api.ErrorCode() {
	case "ResourceNotFoundException", "InvalidArgumentException", "AccessDeniedException",
		"InvalidKMSResourceException", "InvalidSourceException", "UnrecognizedClientException":
		return true
	}
	return false
}

// failAfter marks every event from i on failed.
func failAfter(failed []bool, i int) []bool {
	for ; i < len(failed); i++ {
		failed[i] = true
	}
	return failed
}

func (s *FirehoseSink) warn(ctx context.Context, msg string, args ...any) {
	if s.Log != nil {
		s.Log.WarnContext(ctx, msg, args...)
	}
}
