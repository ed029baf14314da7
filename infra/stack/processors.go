package stack

import (
	"fmt"
	"sort"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awseventstargets"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambdaeventsources"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/rallyhq/rally/shared/routes"
)

// dlqRetention is the longest SQS keeps a message: an operator has two
// weeks to inspect and redrive a failed batch.
const dlqRetention = 14 * 24 * time.Hour

// ProcessorsProps configures the stream processors.
type ProcessorsProps struct {
	Processors []routes.Processor
	// Archiver, when set, is the function every dead-letter queue feeds
	// (the dlq-archiver): it archives each parked batch with its records
	// while the stream still holds them.
	Archiver  string
	Functions *Functions
	Data      *Data
	// Protect keeps the dead-letter queues, and the batches parked in them,
	// when the stack is deleted.
	Protect bool
}

// Processors owns the event source mappings that feed each processor its
// source tables' streams (one mapping per declaration, with that
// declaration's settings) and one dead-letter queue per processor function:
// a function that reads several streams parks the batches of all of them in
// one queue, and each parked record names its stream.
type Processors struct {
	constructs.Construct
	dlqs map[string]awssqs.Queue
}

// NewProcessors maps each processor declaration to its source stream.
func NewProcessors(scope constructs.Construct, id string, props ProcessorsProps) *Processors {
	p := &Processors{
		Construct: constructs.NewConstruct(scope, jsii.String(id)),
		dlqs:      map[string]awssqs.Queue{},
	}
	for _, proc := range props.Processors {
		fn := props.Functions.Get(proc.Function)
		dlq, ok := p.dlqs[proc.Function]
		if !ok {
			dlq = p.newFunction(proc, fn, props.Protect)
		}
		source := awslambdaeventsources.NewDynamoEventSource(props.Data.Table(proc.Source), &awslambdaeventsources.DynamoEventSourceProps{
			// TRIM_HORIZON: a processor deployed after writes began still
			// sees every record the stream holds.
			StartingPosition:  awslambda.StartingPosition_TRIM_HORIZON,
			BatchSize:         jsii.Number(float64(proc.BatchSize)),
			MaxBatchingWindow: seconds(proc.BatchWindow),
			// Bisecting isolates a poison record so the rest of its batch
			// still applies; retries and age bound how long it blocks the shard.
			BisectBatchOnError:      jsii.Bool(true),
			RetryAttempts:           jsii.Number(float64(proc.MaxRetries)),
			MaxRecordAge:            seconds(proc.MaxRecordAge),
			ReportBatchItemFailures: jsii.Bool(true),
			OnFailure:               awslambdaeventsources.NewSqsDlq(dlq),
		})
		// The mapping's construct id names the table, so one function
		// takes a mapping per stream.
		fn.AddEventSource(source)
	}
	if props.Archiver != "" {
		archiver := props.Functions.Get(props.Archiver)
		for _, name := range p.Names() {
			archiver.AddEventSource(awslambdaeventsources.NewSqsEventSource(p.dlqs[name], &awslambdaeventsources.SqsEventSourceProps{
				BatchSize: jsii.Number(10),
				// A message the archiver cannot archive stays in its queue
				// (and keeps the queue's depth alarm on) for another try.
				ReportBatchItemFailures: jsii.Bool(true),
			}))
		}
		suppressServerless(archiver, "LambdaEventSourceMappingDestination", "These mappings read the processors' "+
			"dead-letter queues, and SQS mappings take no on-failure destination: a message the archiver cannot "+
			"archive stays in its queue for another try (ReportBatchItemFailures) and keeps the queue's depth alarm on.")
	}
	return p
}

// newFunction creates what a processor function has once, however many
// streams it reads: its dead-letter queue and its schedule (New rejects
// declarations of one function that disagree on Tick).
func (p *Processors) newFunction(proc routes.Processor, fn awslambda.Function, protect bool) awssqs.Queue {
	cid := routes.Camel(proc.Function)
	dlq := awssqs.NewQueue(p.Construct, jsii.String(cid+"Dlq"), &awssqs.QueueProps{
		Encryption:      awssqs.QueueEncryption_SQS_MANAGED,
		EnforceSSL:      jsii.Bool(true),
		RetentionPeriod: seconds(dlqRetention),
		RemovalPolicy:   removal(protect),
		// Six times the archiver's timeout, as Lambda advises for a queue
		// a function consumes.
		VisibilityTimeout: seconds(6 * routes.ProcessorTimeout),
	})
	suppress(dlq, "SQS3", "This queue is itself a dead-letter queue: the on-failure destination of "+
		proc.Function+"'s event source mappings.")
	suppressServerless(dlq, "SQSRedrivePolicy", "This queue is itself the dead-letter queue of "+proc.Function+
		": a message the dlq-archiver cannot archive stays here (14 days) for another try, with an alarm on the "+
		"queue's depth, rather than moving on to a queue nobody reads.")
	p.dlqs[proc.Function] = dlq
	if proc.Tick > 0 {
		// The stream only invokes a processor when records arrive; the
		// schedule invokes it with none, so it repairs Redis after an
		// outage and refreshes snapshots even when nothing is written.
		tick := awsevents.NewRule(p.Construct, jsii.String(cid+"Tick"), &awsevents.RuleProps{
			Description: jsii.String("Invoke " + proc.Function + " with no records: Redis repair and snapshots"),
			Schedule:    awsevents.Schedule_Rate(seconds(proc.Tick)),
			Targets: &[]awsevents.IRuleTarget{awseventstargets.NewLambdaFunction(fn, &awseventstargets.LambdaFunctionProps{
				Event:         awsevents.RuleTargetInput_FromObject(map[string]any{"Records": []any{}}),
				RetryAttempts: jsii.Number(0),
			})},
		})
		suppressServerless(tick, "EventBusDLQ", "The tick's input is an empty batch: a failed delivery loses nothing, "+
			"and the next tick, a minute later, does the same work. Failing ticks raise the processor's Errors and "+
			"BatchFailures alarms.")
	}
	return dlq
}

// Names lists the processors' function names in a stable order.
func (p *Processors) Names() []string {
	names := make([]string, 0, len(p.dlqs))
	for n := range p.dlqs {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// DeadLetterQueue returns the queue that holds fn's failed batches, from
// every stream fn reads.
func (p *Processors) DeadLetterQueue(fn string) awssqs.Queue {
	q, ok := p.dlqs[fn]
	if !ok {
		panic(fmt.Sprintf("stack: processor %s is not declared", fn))
	}
	return q
}

func seconds(d time.Duration) awscdk.Duration {
	return awscdk.Duration_Seconds(jsii.Number(d.Seconds()))
}
