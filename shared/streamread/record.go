package streamread

import (
	"encoding/json"
	"fmt"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
)

// wireRecord is a stream record in the JSON shape Lambda delivers;
// LambdaRecord builds it and unmarshals it into events.DynamoDBEventRecord,
// so processors decode exactly what they would in AWS.
type wireRecord struct {
	EventID        string        `json:"eventID"`
	EventName      string        `json:"eventName"`
	EventVersion   string        `json:"eventVersion"`
	EventSource    string        `json:"eventSource"`
	AWSRegion      string        `json:"awsRegion"`
	Dynamodb       wireChange    `json:"dynamodb"`
	EventSourceARN string        `json:"eventSourceARN"`
	UserIdentity   *wireIdentity `json:"userIdentity,omitempty"`
}

type wireChange struct {
	ApproximateCreationDateTime int64          `json:"ApproximateCreationDateTime"`
	Keys                        map[string]any `json:"Keys"`
	NewImage                    map[string]any `json:"NewImage,omitempty"`
	OldImage                    map[string]any `json:"OldImage,omitempty"`
	SequenceNumber              string         `json:"SequenceNumber"`
	SizeBytes                   int64          `json:"SizeBytes"`
	StreamViewType              string         `json:"StreamViewType"`
}

type wireIdentity struct {
	Type        string `json:"type"`
	PrincipalID string `json:"principalId"`
}

// LambdaRecord converts a DynamoDB Streams record into the record of a
// Lambda DynamoDBEvent.
func LambdaRecord(r types.Record, streamARN, region string) (events.DynamoDBEventRecord, error) {
	var out events.DynamoDBEventRecord
	if r.Dynamodb == nil {
		return out, fmt.Errorf("streamread: stream record %s has no dynamodb section", aws.ToString(r.EventID))
	}
	if v := aws.ToString(r.AwsRegion); v != "" {
		region = v
	}
	w := wireRecord{
		EventID:      aws.ToString(r.EventID),
		EventName:    string(r.EventName),
		EventVersion: "1.1",
		EventSource:  "aws:dynamodb",
		AWSRegion:    region,
		Dynamodb: wireChange{
			Keys:           image(r.Dynamodb.Keys),
			NewImage:       image(r.Dynamodb.NewImage),
			OldImage:       image(r.Dynamodb.OldImage),
			SequenceNumber: aws.ToString(r.Dynamodb.SequenceNumber),
			SizeBytes:      aws.ToInt64(r.Dynamodb.SizeBytes),
			StreamViewType: string(r.Dynamodb.StreamViewType),
		},
		EventSourceARN: streamARN,
	}
	if t := r.Dynamodb.ApproximateCreationDateTime; t != nil {
		w.Dynamodb.ApproximateCreationDateTime = t.Unix()
	}
	if id := r.UserIdentity; id != nil {
		w.UserIdentity = &wireIdentity{Type: aws.ToString(id.Type), PrincipalID: aws.ToString(id.PrincipalId)}
	}
	b, err := json.Marshal(w)
	if err != nil {
		return out, fmt.Errorf("streamread: encode record %s: %w", w.EventID, err)
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return out, fmt.Errorf("streamread: decode record %s: %w", w.EventID, err)
	}
	return out, nil
}

func image(item map[string]types.AttributeValue) map[string]any {
	if item == nil {
		return nil
	}
	out := make(map[string]any, len(item))
	for k, v := range item {
		out[k] = value(v)
	}
	return out
}

// value renders one attribute in DynamoDB's JSON form ({"S": "x"}, ...).
func value(v types.AttributeValue) map[string]any {
	switch t := v.(type) {
	case *types.AttributeValueMemberS:
		return map[string]any{"S": t.Value}
	case *types.AttributeValueMemberN:
		return map[string]any{"N": t.Value}
	case *types.AttributeValueMemberB:
		return map[string]any{"B": t.Value} // []byte marshals as base64
	case *types.AttributeValueMemberBOOL:
		return map[string]any{"BOOL": t.Value}
	case *types.AttributeValueMemberNULL:
		return map[string]any{"NULL": true}
	case *types.AttributeValueMemberSS:
		return map[string]any{"SS": t.Value}
	case *types.AttributeValueMemberNS:
		return map[string]any{"NS": t.Value}
	case *types.AttributeValueMemberBS:
		return map[string]any{"BS": t.Value}
	case *types.AttributeValueMemberL:
		list := make([]any, len(t.Value))
		for i, e := range t.Value {
			list[i] = value(e)
		}
		return map[string]any{"L": list}
	case *types.AttributeValueMemberM:
		return map[string]any{"M": image(t.Value)}
	}
	return map[string]any{"NULL": true}
}
