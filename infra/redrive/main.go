// Command redrive lists and replays the batches a Rally stack's stream
// processors parked: a thin terminal over shared/client's calls of the ops
// routes GET /v1/ops/dlq and POST /v1/ops/dlq/redrive, signed with your AWS
// credentials (SigV4), so it does exactly what the API does. Both routes
// are the operator's alone: run it with a session of the operator role
// (locally as rallylocal); a game server's credentials are refused 403.
//
// When a processor keeps failing on a batch, its event source mapping gives
// up after the declared retries or record age and the dlq-archiver archives
// the batch with its records; a redrive replays them whenever it runs and
// removes what fully applied. Processors are idempotent, so replaying a
// batch that partly applied changes nothing twice.
//
//	go run ./infra/redrive -stage dev                        # list parked batches
//	go run ./infra/redrive -stage dev -replay                # replay them all
//	go run ./infra/redrive -stage dev -replay -function counter-processor -batch <id>
//	go run ./infra/redrive -api http://localhost:3000 ...    # any stack, e.g. the local one
//	                                                         # (AWS_ACCESS_KEY_ID=rallylocal AWS_SECRET_ACCESS_KEY=rallylocalsecret AWS_REGION=us-east-1)
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/cloudformation"

	"github.com/rallyhq/rally/shared/client"
)

func main() {
	stage := flag.String("stage", "dev", "deployment stage; the stack is Rally-<stage> (its ApiUrl output)")
	api := flag.String("api", "", "the API's base URL (default: the stack's ApiUrl output)")
	only := flag.String("function", "", "only this processor (default: every processor)")
	batch := flag.String("batch", "", "only this batch (with -function)")
	replay := flag.Bool("replay", false, "replay parked batches; remove those that apply")
	flag.Parse()
	ctx := context.Background()
	cfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err == nil && *api == "" {
		*api, err = apiURL(ctx, cloudformation.NewFromConfig(cfg), "Rally-"+*stage)
	}
	var c *client.Client
	if err == nil {
		c, err = client.New(ctx, client.Options{Endpoint: *api, Region: cfg.Region, Credentials: cfg.Credentials})
	}
	if err == nil {
		err = run(ctx, c, os.Stdout, *only, *batch, *replay)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "redrive:", err)
		os.Exit(1)
	}
}

// run lists the parked batches, or replays them, and prints the answer.
func run(ctx context.Context, c *client.Client, out io.Writer, only, batch string, replay bool) error {
	if batch != "" && only == "" {
		return errors.New("-batch needs -function")
	}
	var answer any
	if replay {
		results, err := c.RedriveDeadLetters(ctx, client.RedriveRequest{Processor: only, BatchID: batch})
		if err != nil {
			return err
		}
		answer = struct {
			Results []client.RedriveResult `json:"results"`
		}{results}
	} else {
		batches, err := c.ListDeadLetters(ctx, only)
		if err != nil {
			return err
		}
		answer = struct {
			Batches []client.ParkedBatch `json:"batches"`
		}{batches}
	}
	pretty, err := json.MarshalIndent(answer, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(out, string(pretty))
	return err
}

// apiURL reads the stack's ApiUrl output.
func apiURL(ctx context.Context, cfn *cloudformation.Client, stack string) (string, error) {
	out, err := cfn.DescribeStacks(ctx, &cloudformation.DescribeStacksInput{StackName: aws.String(stack)})
	if err != nil {
		return "", fmt.Errorf("describe %s: %w", stack, err)
	}
	for _, s := range out.Stacks {
		for _, o := range s.Outputs {
			if aws.ToString(o.OutputKey) == "ApiUrl" {
				return aws.ToString(o.OutputValue), nil
			}
		}
	}
	return "", fmt.Errorf("%s has no ApiUrl output", stack)
}
