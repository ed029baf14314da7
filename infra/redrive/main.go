// Command redrive lists and replays the batches a stream processor's
// dead-letter queue holds in a deployed Rally stack.
//
// When a processor keeps failing on a batch, its event source mapping
// gives up after the declared retries and sends the batch's location (stream,
// shard and sequence numbers, not the records) to the processor's SQS queue.
// A processor that reads several streams (the analytics shipper) has one
// queue for all of them; each message names its stream.
// Redrive reads those records back from the table's stream — which keeps
// them 24 hours — invokes the processor with them, and deletes the message
// once every record applied. Processors are idempotent, so replaying a
// batch that partly applied changes nothing twice.
//
//	go run ./infra/redrive -stage dev            # list parked batches
//	go run ./infra/redrive -stage dev -replay    # replay them
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/rallyhq/rally/shared/streamread"

	"github.com/rallyhq/rally/shared/deadletters"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/cloudformation"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	lambdatypes "github.com/aws/aws-sdk-go-v2/service/lambda/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/rallyhq/rally/shared/routes"
)

func main() {
	stage := flag.String("stage", "dev", "deployment stage; the stack is Rally-<stage>")
	only := flag.String("function", "", "only this processor (default: every processor)")
	replay := flag.Bool("replay", false, "replay parked batches and delete those that apply")
	max := flag.Int("max", 100, "most messages to handle per processor")
	flag.Parse()
	if err := run(context.Background(), *stage, *only, *replay, *max); err != nil {
		fmt.Fprintln(os.Stderr, "redrive:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, stage, only string, replay bool, max int) error {
	cfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return err
	}
	stack := "Rally-" + stage
	outputs, functions, err := describe(ctx, cloudformation.NewFromConfig(cfg), stack)
	if err != nil {
		return err
	}
	q := sqs.NewFromConfig(cfg)
	streams := dynamodbstreams.NewFromConfig(cfg)
	inv := lambdaInvoker{lambda.NewFromConfig(cfg)}
	for _, fn := range processorFunctions(routes.Processors()) {
		if only != "" && fn != only {
			continue
		}
		queue := outputs["Dlq"+routes.Camel(fn)]
		if queue == "" {
			return fmt.Errorf("stack %s has no output Dlq%s", stack, routes.Camel(fn))
		}
		visibility := int32(30)
		if replay {
			visibility = 300
		}
		for handled := 0; handled < max; {
			msgs, err := q.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
				QueueUrl: aws.String(queue), MaxNumberOfMessages: 10, WaitTimeSeconds: 1, VisibilityTimeout: visibility,
			})
			if err != nil {
				return fmt.Errorf("read %s: %w", queue, err)
			}
			if len(msgs.Messages) == 0 {
				break
			}
			for _, m := range msgs.Messages {
				handled++
				parked, err := deadletters.ParseParked(aws.ToString(m.Body))
				if err != nil {
					fmt.Printf("%s\tmessage %s: %v\n", fn, aws.ToString(m.MessageId), err)
					continue
				}
				b := parked.BatchInfo
				fmt.Printf("%s\t%s\tshard %s\t%s..%s\t%d records\tfirst arrived %s\t%s\n", fn, streamread.TableOf(b.StreamARN), b.ShardID,
					b.StartSequenceNumber, b.EndSequenceNumber, b.BatchSize, b.ApproximateArrivalOfFirstRecord, parked.RequestContext.Condition)
				if !replay {
					continue
				}
				n, err := Replay(ctx, streams, inv, functions[fn], parked, cfg.Region)
				if err != nil {
					fmt.Printf("\treplay failed, left in the queue: %v\n", err)
					continue
				}
				if _, err := q.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(queue), ReceiptHandle: m.ReceiptHandle}); err != nil {
					return fmt.Errorf("delete replayed message: %w", err)
				}
				fmt.Printf("\treplayed %d records; removed from the queue\n", n)
			}
		}
	}
	return nil
}

// processorFunctions lists each processor function once, in declaration
// order: a function that reads several streams is declared once per stream
// but has one dead-letter queue.
func processorFunctions(ps []routes.Processor) []string {
	var out []string
	for _, p := range ps {
		if !slices.Contains(out, p.Function) {
			out = append(out, p.Function)
		}
	}
	return out
}

// describe reads the stack's outputs and its processors' function names.
func describe(ctx context.Context, cf *cloudformation.Client, stack string) (map[string]string, map[string]string, error) {
	out, err := cf.DescribeStacks(ctx, &cloudformation.DescribeStacksInput{StackName: aws.String(stack)})
	if err != nil {
		return nil, nil, fmt.Errorf("describe %s: %w", stack, err)
	}
	if len(out.Stacks) == 0 {
		return nil, nil, fmt.Errorf("stack %s not found", stack)
	}
	outputs := map[string]string{}
	for _, o := range out.Stacks[0].Outputs {
		outputs[aws.ToString(o.OutputKey)] = aws.ToString(o.OutputValue)
	}
	functions := map[string]string{}
	pages := cloudformation.NewListStackResourcesPaginator(cf, &cloudformation.ListStackResourcesInput{StackName: aws.String(stack)})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, nil, fmt.Errorf("list resources of %s: %w", stack, err)
		}
		for _, r := range page.StackResourceSummaries {
			if aws.ToString(r.ResourceType) != "AWS::Lambda::Function" {
				continue
			}
			for _, fn := range processorFunctions(routes.Processors()) {
				if strings.HasPrefix(aws.ToString(r.LogicalResourceId), "Functions"+routes.Camel(fn)+"Function") {
					functions[fn] = aws.ToString(r.PhysicalResourceId)
				}
			}
		}
	}
	return outputs, functions, nil
}

type lambdaInvoker struct{ c *lambda.Client }

func (l lambdaInvoker) Invoke(ctx context.Context, function string, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
	var resp events.DynamoDBEventResponse
	if function == "" {
		return resp, errors.New("the processor's function was not found in the stack")
	}
	payload, err := json.Marshal(ev)
	if err != nil {
		return resp, err
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	out, err := l.c.Invoke(ctx, &lambda.InvokeInput{
		FunctionName: aws.String(function), InvocationType: lambdatypes.InvocationTypeRequestResponse, Payload: payload,
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
