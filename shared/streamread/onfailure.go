package streamread

import "strings"

// Conditions under which a batch is parked, as Lambda names them.
const (
	RetryAttemptsExhausted   = "RetryAttemptsExhausted"
	MaximumRecordAgeExceeded = "MaximumRecordAgeExceeded"
)

// Parked is one dead-lettered batch: the invocation record Lambda sends to
// an on-failure destination for a DynamoDB stream. It says where the batch
// was, not what it held: the records must be read from the stream (for 24
// hours) and are archived at once (shared/deadletters).
type Parked struct {
	RequestContext  RequestContext  `json:"requestContext"`
	ResponseContext ResponseContext `json:"responseContext"`
	Version         string          `json:"version"`
	Timestamp       string          `json:"timestamp"`
	BatchInfo       BatchInfo       `json:"DDBStreamBatchInfo"`
}

// RequestContext identifies the failed invocation.
type RequestContext struct {
	RequestID              string `json:"requestId"`
	FunctionARN            string `json:"functionArn"`
	Condition              string `json:"condition"`
	ApproximateInvokeCount int    `json:"approximateInvokeCount"`
}

// ResponseContext is what the last invocation answered.
type ResponseContext struct {
	StatusCode      int    `json:"statusCode"`
	ExecutedVersion string `json:"executedVersion"`
	FunctionError   string `json:"functionError,omitempty"`
}

// BatchInfo locates the batch in the stream.
type BatchInfo struct {
	ShardID                         string `json:"shardId"`
	StartSequenceNumber             string `json:"startSequenceNumber"`
	EndSequenceNumber               string `json:"endSequenceNumber"`
	ApproximateArrivalOfFirstRecord string `json:"approximateArrivalOfFirstRecord"`
	ApproximateArrivalOfLastRecord  string `json:"approximateArrivalOfLastRecord"`
	BatchSize                       int    `json:"batchSize"`
	StreamARN                       string `json:"streamArn"`
}

// TableOf is the physical name of the table a stream ARN belongs to
// (arn:aws:dynamodb:<region>:<account>:table/<name>/stream/<label>), or the
// ARN itself when it is no stream ARN.
func TableOf(streamARN string) string {
	_, rest, ok := strings.Cut(streamARN, ":table/")
	if !ok {
		return streamARN
	}
	name, _, _ := strings.Cut(rest, "/")
	return name
}
