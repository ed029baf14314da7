package analytics

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

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

// Limits of PutRecordBatch, and of the delivery stream's JSON
// deaggregation.
const (
	MaxBatchRecords = 500
	MaxBatchBytes   = 4 << 20    // 4 MiB per call
	MaxRecordBytes  = 1000 << 10 // 1,000 KiB per record
	MaxRecordEvents = 500        // deaggregation splits no more out of a record
)

// FirehoseSink sends events to a Firehose delivery stream that converts
// them to Parquet and writes them partitioned by event type, date and hour.
//
// It packs consecutive events into each record, one JSON object per line,
// because Firehose bills ingestion per record rounded up to 5 KB: an event
// is ~384 bytes, so a record each would be billed ~13 times its size. The
// delivery stream's multi-record deaggregation (sub-record type JSON) splits
// the records back into events before it partitions and converts them. A
// record holds at most MaxRecordEvents events and MaxRecordBytes bytes. The
// price is coarser failure: when Firehose refuses a record, every event in
// it is failed and sent again.
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

// FirehoseRecord is e as the delivery stream reads it after deaggregation:
// one JSON object and a newline, one line of the records Send packs.
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

// EventsOfRecord reads back the events of a record Send packed, as the
// delivery stream's deaggregation splits them: the local stack's AWS
// endpoint hands what functions put to Firehose to a LocalSink this way.
func EventsOfRecord(data []byte) ([]Event, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var out []Event
	for dec.More() {
		var r firehoseRecord
		if err := dec.Decode(&r); err != nil {
			return nil, fmt.Errorf("analytics: read event %d of a record: %w", len(out), err)
		}
		r.Event.OccurredAt = time.UnixMilli(r.OccurredAt).UTC()
		out = append(out, r.Event)
	}
	if len(out) == 0 {
		return nil, errors.New("analytics: a record with no events")
	}
	return out, nil
}

// packedRecord is one Firehose record and the indexes of the events it
// carries.
type packedRecord struct {
	data   []byte
	events []int
}

// Send packs the events into records (see FirehoseSink) and puts them in
// calls of at most MaxBatchRecords records and MaxBatchBytes bytes. A
// record Firehose refuses (its ErrorCode) fails its events; a failed call
// (throttling, a 5xx) fails the events of all its records. An event whose
// JSON alone is larger than MaxRecordBytes can never be sent and fails
// every time, so it ends in the dead-letter queue rather than being
// dropped.
func (s *FirehoseSink) Send(ctx context.Context, events []Event) ([]bool, error) {
	failed := make([]bool, len(events))
	records := s.pack(ctx, events, failed)
	var (
		call []packedRecord
		size int
	)
	for j, r := range records {
		if len(call) == MaxBatchRecords || size+len(r.data) > MaxBatchBytes {
			if err := s.put(ctx, call, failed); err != nil {
				return failRecords(failed, records[j:]), err
			}
			call, size = nil, 0
		}
		call, size = append(call, r), size+len(r.data)
	}
	if len(call) > 0 {
		if err := s.put(ctx, call, failed); err != nil {
			return failed, err
		}
	}
	return failed, nil
}

// pack encodes the events, in order, into records of at most
// MaxRecordEvents events and MaxRecordBytes bytes, failing each event that
// cannot be encoded or is too large for any record. Every record is built
// before the first call, which costs little memory: a batch of events is
// smaller than the Lambda payload it came in.
func (s *FirehoseSink) pack(ctx context.Context, events []Event, failed []bool) []packedRecord {
	var (
		records []packedRecord
		cur     packedRecord
	)
	closeRecord := func() {
		if len(cur.events) > 0 {
			// Newline-separated, as deaggregation documents its input
			// ({...}\n{...}): the last line needs no newline.
			cur.data = cur.data[:len(cur.data)-1]
			records = append(records, cur)
		}
		cur = packedRecord{}
	}
	for i, e := range events {
		line, err := FirehoseRecord(e)
		if err == nil && len(line)-1 > MaxRecordBytes {
			err = fmt.Errorf("analytics: event %s is %d bytes, over Firehose's record limit", e.EventID, len(line)-1)
		}
		if err != nil {
			failed[i] = true
			s.warn(ctx, "event cannot be sent", "event_id", e.EventID, "error", err.Error())
			continue
		}
		if len(cur.events) == MaxRecordEvents || len(cur.data)+len(line)-1 > MaxRecordBytes {
			closeRecord()
		}
		cur.data, cur.events = append(cur.data, line...), append(cur.events, i)
	}
	closeRecord()
	return records
}

// put sends one call's records.
func (s *FirehoseSink) put(ctx context.Context, records []packedRecord, failed []bool) error {
	in := &firehose.PutRecordBatchInput{DeliveryStreamName: aws.String(s.Stream), Records: make([]types.Record, len(records))}
	for j, r := range records {
		in.Records[j] = types.Record{Data: r.data}
	}
	out, err := s.Client.PutRecordBatch(ctx, in)
	if err == nil && len(out.RequestResponses) != len(records) {
		err = fmt.Errorf("analytics: firehose answered %d of %d records", len(out.RequestResponses), len(records))
	}
	if err != nil {
		failRecords(failed, records)
		if ctx.Err() != nil || permanent(err) {
			return fmt.Errorf("analytics: put records to %s: %w", s.Stream, err)
		}
		s.warn(ctx, "firehose call failed", "records", len(records), "events", countEvents(records), "error", err.Error())
		return nil
	}
	codes := map[string]int{}
	var refused []packedRecord
	for j, r := range out.RequestResponses {
		if code := aws.ToString(r.ErrorCode); code != "" {
			refused = append(refused, records[j])
			codes[code]++
		}
	}
	if len(refused) > 0 {
		failRecords(failed, refused)
		s.warn(ctx, "firehose refused records", "records", len(records), "refused_by_code", codes,
			"events_refused", countEvents(refused))
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

// failRecords marks every event of records failed.
func failRecords(failed []bool, records []packedRecord) []bool {
	for _, r := range records {
		for _, i := range r.events {
			failed[i] = true
		}
	}
	return failed
}

func countEvents(records []packedRecord) int {
	n := 0
	for _, r := range records {
		n += len(r.events)
	}
	return n
}

func (s *FirehoseSink) warn(ctx context.Context, msg string, args ...any) {
	if s.Log != nil {
		s.Log.WarnContext(ctx, msg, args...)
	}
}
