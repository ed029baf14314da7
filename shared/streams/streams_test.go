package streams

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/shared/obs"
)

func batch(seqs ...string) events.DynamoDBEvent {
	var ev events.DynamoDBEvent
	for _, s := range seqs {
		ev.Records = append(ev.Records, events.DynamoDBEventRecord{EventID: "id-" + s, Change: events.DynamoDBStreamRecord{SequenceNumber: s}})
	}
	return ev
}

// The event source mapping retries from the item identifier it is given;
// it must be the SequenceNumber of the first record not applied.
func TestServeNamesTheFirstRecordNotApplied(t *testing.T) {
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	for name, tc := range map[string]struct {
		err     error
		want    []string
		retried int
	}{
		"success":      {nil, nil, 0},
		"partial":      {&PartialError{From: 2, Err: errors.New("boom")}, []string{"300"}, 2},
		"whole batch":  {errors.New("store down"), []string{"100"}, 4},
		"out of range": {&PartialError{From: 9, Err: errors.New("boom")}, []string{"100"}, 4},
	} {
		t.Run(name, func(t *testing.T) {
			var emitted bytes.Buffer
			h := Serve(log, obs.NewMetrics(&emitted, "fn"), func(context.Context, []events.DynamoDBEventRecord) error { return tc.err })
			resp, err := h(context.Background(), batch("100", "200", "300", "400"))
			if err != nil {
				t.Fatalf("a function error would replay the whole batch: %v", err)
			}
			// A reported failure is no Lambda error: the metrics see it.
			failed := strings.Contains(emitted.String(), `"`+MetricBatchFailures+`":1`)
			retried := strings.Contains(emitted.String(), fmt.Sprintf(`"%s":%d`, MetricRecordsRetried, tc.retried))
			if failed != (tc.err != nil) || (tc.err != nil && !retried) {
				t.Fatalf("metrics %q for %v", emitted.String(), tc.err)
			}
			var got []string
			for _, f := range resp.BatchItemFailures {
				got = append(got, f.ItemIdentifier)
			}
			if len(got) != len(tc.want) || (len(got) > 0 && got[0] != tc.want[0]) {
				t.Fatalf("failures %v, want %v", got, tc.want)
			}
		})
	}
}

// A batch reports how stale its oldest change was when it was done with,
// failed or not; a scheduled tick has no change and reports nothing.
func TestServeReportsTheLagOfTheOldestChange(t *testing.T) {
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	written := func(ago time.Duration) events.SecondsEpochTime {
		return events.SecondsEpochTime{Time: time.Now().Add(-ago)}
	}
	for name, tc := range map[string]struct {
		ev     events.DynamoDBEvent
		err    error
		lagMin float64 // seconds; < 0 means no lag reported
	}{
		"batch": {ev: events.DynamoDBEvent{Records: []events.DynamoDBEventRecord{
			{Change: events.DynamoDBStreamRecord{SequenceNumber: "1", ApproximateCreationDateTime: written(90 * time.Second)}},
			{Change: events.DynamoDBStreamRecord{SequenceNumber: "2", ApproximateCreationDateTime: written(5 * time.Second)}},
		}}, lagMin: 90},
		"failed batch": {ev: events.DynamoDBEvent{Records: []events.DynamoDBEventRecord{
			{Change: events.DynamoDBStreamRecord{SequenceNumber: "1", ApproximateCreationDateTime: written(time.Hour)}},
		}}, err: errors.New("store down"), lagMin: 3600},
		"scheduled tick":        {ev: events.DynamoDBEvent{}, lagMin: -1},
		"records with no times": {ev: batch("1", "2"), lagMin: -1},
	} {
		t.Run(name, func(t *testing.T) {
			var emitted bytes.Buffer
			h := Serve(log, obs.NewMetrics(&emitted, "fn"), func(context.Context, []events.DynamoDBEventRecord) error { return tc.err })
			_, _ = h(context.Background(), tc.ev)
			lag, reported := -1.0, false
			for _, line := range strings.Split(strings.TrimSpace(emitted.String()), "\n") {
				var doc map[string]any
				if json.Unmarshal([]byte(line), &doc) == nil {
					if v, ok := doc[MetricLag].(float64); ok {
						lag, reported = v, true
					}
				}
			}
			if reported != (tc.lagMin >= 0) || (reported && (lag < tc.lagMin || lag > tc.lagMin+5)) {
				t.Fatalf("lag %v reported %v, want about %v s; metrics %q", lag, reported, tc.lagMin, emitted.String())
			}
		})
	}
}

func TestImagesRoundTripEveryAttributeType(t *testing.T) {
	item := map[string]types.AttributeValue{
		"s":  &types.AttributeValueMemberS{Value: "x"},
		"n":  &types.AttributeValueMemberN{Value: "12"},
		"b":  &types.AttributeValueMemberB{Value: []byte{1, 2}},
		"t":  &types.AttributeValueMemberBOOL{Value: true},
		"ss": &types.AttributeValueMemberSS{Value: []string{"a", "b"}},
		"ns": &types.AttributeValueMemberNS{Value: []string{"1"}},
		"l":  &types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberS{Value: "y"}}},
		"m":  &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"k": &types.AttributeValueMemberN{Value: "3"}}},
	}
	var v struct {
		S  string         `dynamodbav:"s"`
		N  int            `dynamodbav:"n"`
		B  []byte         `dynamodbav:"b"`
		T  bool           `dynamodbav:"t"`
		SS []string       `dynamodbav:"ss,stringset"`
		NS []int          `dynamodbav:"ns,numberset"`
		L  []string       `dynamodbav:"l"`
		M  map[string]int `dynamodbav:"m"`
	}
	if err := Unmarshal(FromItem(item), &v); err != nil {
		t.Fatal(err)
	}
	if v.S != "x" || v.N != 12 || len(v.B) != 2 || !v.T || len(v.SS) != 2 || v.NS[0] != 1 || v.L[0] != "y" || v.M["k"] != 3 {
		t.Fatalf("decoded %+v", v)
	}
}
