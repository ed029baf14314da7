// Command redrive lists and replays the batches a Rally stack's stream
// processors parked: a thin client of the ops routes GET /v1/ops/dlq and
// POST /v1/ops/dlq/redrive, signed with your AWS credentials (SigV4), so
// it does exactly what the API does.
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
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/cloudformation"
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
	if err == nil {
		c := client{base: strings.TrimSuffix(*api, "/"), creds: cfg.Credentials, region: cfg.Region, http: http.DefaultClient}
		err = run(ctx, c, os.Stdout, *only, *batch, *replay)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "redrive:", err)
		os.Exit(1)
	}
}

// run lists the parked batches, or replays them, and prints the answer.
func run(ctx context.Context, c client, out io.Writer, only, batch string, replay bool) error {
	if batch != "" && only == "" {
		return errors.New("-batch needs -function")
	}
	var body []byte
	var err error
	switch {
	case replay:
		req := map[string]string{}
		if only != "" {
			req["processor"] = only
		}
		if batch != "" {
			req["batch_id"] = batch
		}
		body, err = c.do(ctx, "POST", "/v1/ops/dlq/redrive", req)
	case only != "":
		body, err = c.do(ctx, "GET", "/v1/ops/dlq?processor="+url.QueryEscape(only), nil)
	default:
		body, err = c.do(ctx, "GET", "/v1/ops/dlq", nil)
	}
	if err != nil {
		return err
	}
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, body, "", "  "); err != nil {
		return fmt.Errorf("the API answered no JSON: %s", body)
	}
	_, err = fmt.Fprintln(out, pretty.String())
	return err
}

// client calls the ops routes with SigV4 (service execute-api).
type client struct {
	base   string
	creds  aws.CredentialsProvider
	region string
	http   *http.Client
}

func (c client) do(ctx context.Context, method, path string, in any) ([]byte, error) {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return nil, err
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	creds, err := c.creds.Retrieve(ctx)
	if err != nil {
		return nil, fmt.Errorf("AWS credentials: %w", err)
	}
	sum := sha256.Sum256(body)
	if err := v4.NewSigner().SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), "execute-api", c.region, time.Now()); err != nil {
		return nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, raw)
	}
	return raw, nil
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
