package streams

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

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
