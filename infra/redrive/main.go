// Command redrive lists and replays the batches a deployed Rally stack's
// stream processors parked.
//
// When a processor keeps failing on a batch, its event source mapping gives
// up after the declared retries or record age and sends where the batch was
// (stream, shard and sequence numbers) to the processor's dead-letter
// queue; the dlq-archiver reads the records from the stream at once and
// archives them in the DeadLetters table. Redrive replays them from there,
// whenever it runs: it invokes the processor with each batch and removes
// what fully applied. Processors are idempotent, so replaying a batch that
// partly applied changes nothing twice.
//
//	go run ./infra/redrive -stage dev                        # list parked batches
//	go run ./infra/redrive -stage dev -replay                # replay them all
//	go run ./infra/redrive -stage dev -replay -function counter-processor -batch <id>
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/cloudformation"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/lambda"

	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/deadletters"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
)

func main() {
	stage := flag.String("stage", "dev", "deployment stage; the stack is Rally-<stage>")
	only := flag.String("function", "", "only this processor (default: every processor)")
	batch := flag.String("batch", "", "only this batch (with -function)")
	replay := flag.Bool("replay", false, "replay parked batches; remove those that apply")
	flag.Parse()
	if err := run(context.Background(), *stage, *only, *batch, *replay); err != nil {
		fmt.Fprintln(os.Stderr, "redrive:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, stage, only, batch string, replay bool) error {
	cfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return err
	}
	stack := "Rally-" + stage
	functions, err := deployedFunctions(ctx, cloudformation.NewFromConfig(cfg), stack)
	if err != nil {
		return err
	}
	lc := lambda.NewFromConfig(cfg)
	archiver, ok := functions[routes.DlqArchiver.Function]
	if !ok {
		return fmt.Errorf("stack %s has no %s", stack, routes.DlqArchiver.Function)
	}
	// The archiver is told where the archive is; so is this command.
	conf, err := lc.GetFunctionConfiguration(ctx, &lambda.GetFunctionConfigurationInput{FunctionName: aws.String(archiver)})
	if err != nil {
		return fmt.Errorf("read %s's configuration: %w", archiver, err)
	}
	table := ""
	if conf.Environment != nil {
		table = conf.Environment.Variables[schema.DeadLetters.EnvVar()]
	}
	if table == "" {
		return fmt.Errorf("%s names no %s table", archiver, schema.DeadLetters.Name)
	}
	archive := &deadletters.Archive{DB: dynamodb.NewFromConfig(cfg), Table: table, Clock: clock.System{}}
	inv := deadletters.LambdaInvoker{Client: lc, Deployed: functions}
	for _, fn := range processorFunctions(routes.Processors()) {
		if only != "" && fn != only {
			continue
		}
		parked, err := archive.List(ctx, fn)
		if err != nil {
			return err
		}
		for _, b := range parked {
			fmt.Printf("%s\t%s\t%s\t%d records\t%s..%s\tparked %s\t%s\n", fn, b.ID, b.Source, b.Size,
				b.First, b.Last, b.ParkedAt.Format(time.RFC3339), b.Reason)
		}
		if !replay || len(parked) == 0 {
			continue
		}
		outcomes, err := archive.Redrive(ctx, inv, fn, batch)
		if err != nil && !(errors.Is(err, deadletters.ErrNotFound) && batch != "" && only == "") {
			return err
		}
		for _, o := range outcomes {
			if o.Done() {
				fmt.Printf("\t%s: replayed %d records; removed\n", o.Batch, o.Records)
			} else {
				fmt.Printf("\t%s: %d of %d records applied; the rest stay parked: %s\n", o.Batch, o.Applied, o.Records, o.Error)
			}
		}
	}
	return nil
}

// processorFunctions lists each processor function once, in declaration
// order: a function that reads several streams is declared once per stream
// but parks all its batches under its one name.
func processorFunctions(ps []routes.Processor) []string {
	var out []string
	for _, p := range ps {
		if !slices.Contains(out, p.Function) {
			out = append(out, p.Function)
		}
	}
	return out
}

// deployedFunctions maps the declared name of the stack's processors and
// of the dlq-archiver to their deployed names.
func deployedFunctions(ctx context.Context, cf *cloudformation.Client, stack string) (map[string]string, error) {
	wanted := append(processorFunctions(routes.Processors()), routes.DlqArchiver.Function)
	functions := map[string]string{}
	pages := cloudformation.NewListStackResourcesPaginator(cf, &cloudformation.ListStackResourcesInput{StackName: aws.String(stack)})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("list resources of %s: %w", stack, err)
		}
		for _, r := range page.StackResourceSummaries {
			if aws.ToString(r.ResourceType) != "AWS::Lambda::Function" {
				continue
			}
			for _, fn := range wanted {
				if strings.HasPrefix(aws.ToString(r.LogicalResourceId), "Functions"+routes.Camel(fn)+"Function") {
					functions[fn] = aws.ToString(r.PhysicalResourceId)
				}
			}
		}
	}
	return functions, nil
}
