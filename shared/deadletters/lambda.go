package deadletters

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	lambdatypes "github.com/aws/aws-sdk-go-v2/service/lambda/types"
)

// LambdaInvoker invokes processors through Lambda's Invoke API, as their
// event source mappings do.
type LambdaInvoker struct {
	Client *lambda.Client
	// Deployed maps a declared function name to its deployed one; a name
	// it lacks is deployed under its declared name (the local stack).
	Deployed map[string]string
}

// Invoke implements Invoker.
func (l LambdaInvoker) Invoke(ctx context.Context, function string, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
	var resp events.DynamoDBEventResponse
	name := function
	if deployed, ok := l.Deployed[function]; ok {
		name = deployed
	}
	payload, err := json.Marshal(ev)
	if err != nil {
		return resp, err
	}
	out, err := l.Client.Invoke(ctx, &lambda.InvokeInput{
		FunctionName: aws.String(name), InvocationType: lambdatypes.InvocationTypeRequestResponse, Payload: payload,
	})
	if err != nil {
		return resp, fmt.Errorf("invoke %s: %w", function, err)
	}
	if out.FunctionError != nil {
		return resp, fmt.Errorf("%s failed: %s: %s", function, aws.ToString(out.FunctionError), out.Payload)
	}
	if err := json.Unmarshal(out.Payload, &resp); err != nil {
		return resp, fmt.Errorf("decode %s's answer: %w", function, err)
	}
	return resp, nil
}
