package template

import (
	"errors"
	"fmt"
	"strings"

	"github.com/rallyhq/rally/infra/local/policy"
)

// Mapping is one of a function's event source mappings: Lambda reads
// Source with the function's role, invokes the function with what it
// reads, and sends where a batch failed to OnFailure.
type Mapping struct {
	LogicalID string
	// Source is the local ARN of a table's stream (…/stream/*, the ARN
	// the template names it by) or of an SQS queue.
	Source string
	// OnFailure is the local ARN of the on-failure destination; "" for
	// none.
	OnFailure string
}

// Need is a call Lambda makes with a function's role.
type Need struct{ Action, Resource string }

// Needs are the calls Lambda makes with the function's role to run m,
// which the role must allow (AWS refuses to create a mapping otherwise,
// and a mapping whose role loses one stops): on a DynamoDB stream
// DescribeStream, GetShardIterator and GetRecords, and ListStreams; on an
// SQS queue ReceiveMessage, DeleteMessage and GetQueueAttributes; to an
// SQS on-failure destination SendMessage, to an SNS one Publish.
func (m Mapping) Needs() []Need {
	var out []Need
	switch service(m.Source) {
	case "dynamodb":
		for _, a := range []string{"DescribeStream", "GetShardIterator", "GetRecords"} {
			out = append(out, Need{"dynamodb:" + a, m.Source})
		}
		out = append(out, Need{"dynamodb:ListStreams", "*"})
	case "sqs":
		for _, a := range []string{"ReceiveMessage", "DeleteMessage", "GetQueueAttributes"} {
			out = append(out, Need{"sqs:" + a, m.Source})
		}
	}
	switch service(m.OnFailure) {
	case "sqs":
		out = append(out, Need{"sqs:SendMessage", m.OnFailure})
	case "sns":
		out = append(out, Need{"sns:Publish", m.OnFailure})
	}
	return out
}

// service is the service of an ARN (arn:aws:<service>:...).
func service(arn string) string {
	parts := strings.SplitN(arn, ":", 4)
	if len(parts) < 4 || parts[0] != "arn" {
		return ""
	}
	return parts[2]
}

// CheckMappings reports every call Lambda needs to run f's event source
// mappings that f's role does not allow, each naming the action and
// resource: so a stream read or a dead-letter queue grant the stack
// forgets fails locally, where the local pollers stand in for Lambda.
func (f Function) CheckMappings() error {
	role := policy.Policy(f.Statements)
	var errs []error
	for _, m := range f.Mappings {
		for _, n := range m.Needs() {
			if d := role.Decide(n.Action, n.Resource, nil); d != policy.Allow {
				errs = append(errs, fmt.Errorf("template: %s: its role may not %s on %s (%s), which Lambda needs to run its event source mapping %s",
					f.Name, n.Action, n.Resource, d, m.LogicalID))
			}
		}
	}
	return errors.Join(errs...)
}

// mappings are the event source mappings that invoke the function id.
func (r *resolver) mappings(id string) ([]Mapping, error) {
	var out []Mapping
	var errs []error
	for _, mid := range r.t.ids("AWS::Lambda::EventSourceMapping") {
		p := r.t.resources[mid].Properties
		if LogicalID(p["FunctionName"]) != id {
			continue
		}
		m := Mapping{LogicalID: mid}
		var err error
		if m.Source, err = r.str(p["EventSourceArn"]); err != nil {
			errs = append(errs, fmt.Errorf("mapping %s: EventSourceArn: %w", mid, err))
		}
		dest, _ := p["DestinationConfig"].(map[string]any)
		onFailure, _ := dest["OnFailure"].(map[string]any)
		if d, ok := onFailure["Destination"]; ok {
			if m.OnFailure, err = r.str(d); err != nil {
				errs = append(errs, fmt.Errorf("mapping %s: its on-failure destination: %w", mid, err))
			}
		}
		out = append(out, m)
	}
	return out, errors.Join(errs...)
}
