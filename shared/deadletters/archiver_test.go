package deadletters_test

import (
	"testing"

	"github.com/rallyhq/rally/shared/deadletters"
)

// The body Lambda sends to an event source mapping's SQS on-failure
// destination for a DynamoDB stream.
const onFailure = `{"requestContext":{"requestId":"c9b8fa9f-5a7f-4e3c-8e3a-111111111111","functionArn":"arn:aws:lambda:us-east-1:123456789012:function:Rally-dev-counter","condition":"RetryAttemptsExhausted","approximateInvokeCount":9},
"responseContext":{"statusCode":200,"executedVersion":"$LATEST","functionError":""},"version":"1.0","timestamp":"2026-11-22T10:00:00.000Z",
"DDBStreamBatchInfo":{"shardId":"shardId-00000001","startSequenceNumber":"100","endSequenceNumber":"300","approximateArrivalOfFirstRecord":"2026-11-22T09:59:00Z","approximateArrivalOfLastRecord":"2026-11-22T09:59:01Z","batchSize":3,"streamArn":"arn:aws:dynamodb:us-east-1:123456789012:table/Reactions/stream/2026-11-22T00:00:00.000"}}`

func TestParseParkedReadsLambdasOnFailureRecord(t *testing.T) {
	p, err := deadletters.ParseParked(onFailure)
	if err != nil {
		t.Fatal(err)
	}
	if p.BatchInfo.ShardID != "shardId-00000001" || p.BatchInfo.EndSequenceNumber != "300" || p.RequestContext.Condition != "RetryAttemptsExhausted" {
		t.Fatalf("parsed %+v", p)
	}
	if got := deadletters.FunctionName(p.RequestContext.FunctionARN); got != "Rally-dev-counter" {
		t.Fatalf("function name %q", got)
	}
	for _, bad := range []string{"", "{}", `{"requestContext":{}}`, "not json"} {
		if _, err := deadletters.ParseParked(bad); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}
