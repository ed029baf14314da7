// Command loghash prints the hash under which a Rally deployment's logs
// name each given user: logs never hold a user id, only
// HMAC-SHA256(log key, id) cut to 24 hex characters (obs.UserHash), keyed
// by the stack's log key secret (output LogKeySecretArn). Search the
// function logs for "user:<hash>" to find a user's lines.
//
//	go run ./infra/loghash -stage prod alice bob      # reads the key with your AWS credentials
//	go run ./infra/loghash -key rally-local-log-key alice   # the local stack's key
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/cloudformation"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/rallyhq/rally/shared/obs"
)

func main() {
	stage := flag.String("stage", "dev", "deployment stage; the stack is Rally-<stage> (its LogKeySecretArn output)")
	key := flag.String("key", "", "the log key itself (default: read from the stack's log key secret)")
	flag.Parse()
	ctx := context.Background()
	var err error
	if *key == "" {
		*key, err = stackKey(ctx, "Rally-"+*stage)
	}
	if err == nil {
		err = run(os.Stdout, []byte(*key), flag.Args())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "loghash:", err)
		os.Exit(1)
	}
}

// run prints each user's hash and a CloudWatch Logs Insights query that
// finds their lines.
func run(out io.Writer, key []byte, users []string) error {
	if len(users) == 0 {
		return errors.New("name at least one user id")
	}
	for _, u := range users {
		h := obs.UserHash(key, u)
		fmt.Fprintf(out, "%s\tuser:%s\tfields @timestamp, @log, @message | filter @message like \"user:%s\"\n", u, h, h)
	}
	return nil
}

// stackKey reads the log key from the secret the stack's LogKeySecretArn
// output names.
func stackKey(ctx context.Context, stack string) (string, error) {
	cfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return "", err
	}
	stacks, err := cloudformation.NewFromConfig(cfg).DescribeStacks(ctx, &cloudformation.DescribeStacksInput{StackName: aws.String(stack)})
	if err != nil {
		return "", fmt.Errorf("describe %s: %w", stack, err)
	}
	for _, s := range stacks.Stacks {
		for _, o := range s.Outputs {
			if aws.ToString(o.OutputKey) != "LogKeySecretArn" {
				continue
			}
			secret, err := secretsmanager.NewFromConfig(cfg).GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: o.OutputValue})
			if err != nil {
				return "", fmt.Errorf("read the log key: %w", err)
			}
			return aws.ToString(secret.SecretString), nil
		}
	}
	return "", fmt.Errorf("%s has no LogKeySecretArn output", stack)
}
