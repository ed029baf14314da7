package streamread

import "github.com/aws/aws-lambda-go/events"

// Conditions under which a batch is parked, as Lambda names them.
const (
	RetryAttemptsExhausted   = "RetryAttemptsExhausted"
	MaximumRecordAgeExceeded = "MaximumRecordAgeExceeded"
)

// Parked is one dead-lettered batch: the invocation record Lambda sends to
// an on-failure destination for a DynamoDB stream (which the redrive
// command reads from SQS), plus (a local addition of the local stack's
// DLQ) the records themselves and the last error, so a local redrive can
// replay them without going back to the stream.
type Parked struct {
	RequestContext  RequestContext               `json:"requestContext"`
	ResponseContext ResponseContext              `json:"responseContext"`
	Version         string                       `json:"version"`
	Timestamp       string                       `json:"timestamp"`
	BatchInfo       BatchInfo                    `json:"DDBStreamBatchInfo"`
	Records         []events.DynamoDBEventRecord `json:"records"`
	Error           string                       `json:"error,omitempty"`
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
