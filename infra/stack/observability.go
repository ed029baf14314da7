package stack

import (
	"strconv"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatchactions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssnssubscriptions"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/rallyhq/rally/shared/api"
	"github.com/rallyhq/rally/shared/deadletters"
	"github.com/rallyhq/rally/shared/obs"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/streams"
)

// IteratorAgeThreshold is how far behind its stream a processor may fall
// before someone is told: counts and leaderboards promise seconds of lag,
// so minutes of sustained age means a stuck or retrying shard.
const IteratorAgeThreshold = 2 * time.Minute

// ServerErrorsThreshold is how many 5xx answers one route function may give
// in 5 minutes before someone is told: a single 503 is a blip of DynamoDB,
// a handful means the source of truth is failing for that route.
const ServerErrorsThreshold = 5

// AnalyticsFreshnessThreshold is how old the oldest undelivered analytics
// event may grow: Firehose holds events up to its buffer interval by
// design, so twice that means deliveries are failing.
const AnalyticsFreshnessThreshold = 2 * FirehoseBufferInterval

// ObservabilityProps configures alarms.
type ObservabilityProps struct {
	Functions  *Functions
	Processors *Processors
	// Analytics, when set, adds the delivery stream's alarms.
	Analytics  *Analytics
	AlarmEmail string
	Protect    bool
}

// Observability owns the alarm topic and the alarms: a message in any
// dead-letter queue, a processor falling behind its streams, any function
// error, and analytics events that Firehose delivers late or cannot
// convert.
type Observability struct {
	constructs.Construct
	Topic awssns.Topic
}

// NewObservability creates the topic and one alarm per failure signal.
func NewObservability(scope constructs.Construct, id string, props ObservabilityProps) *Observability {
	o := &Observability{Construct: constructs.NewConstruct(scope, jsii.String(id))}
	key := awskms.NewKey(o.Construct, jsii.String("TopicKey"), &awskms.KeyProps{
		Description:       jsii.String("Encrypts Rally alarm notifications"),
		EnableKeyRotation: jsii.Bool(true),
		RemovalPolicy:     removal(props.Protect),
		PendingWindow:     awscdk.Duration_Days(jsii.Number(7)),
	})
	// CloudWatch publishes alarms to the encrypted topic with this key.
	key.GrantEncryptDecrypt(awsiam.NewServicePrincipal(jsii.String("cloudwatch.amazonaws.com"), nil))
	o.Topic = awssns.NewTopic(o.Construct, jsii.String("Alarms"), &awssns.TopicProps{
		DisplayName: jsii.String("Rally alarms"),
		MasterKey:   key,
		EnforceSSL:  jsii.Bool(true),
	})
	if props.AlarmEmail != "" {
		o.Topic.AddSubscription(awssnssubscriptions.NewEmailSubscription(jsii.String(props.AlarmEmail), nil))
	}
	notify := awscloudwatchactions.NewSnsAction(o.Topic)
	alarm := func(id string, metric awscloudwatch.IMetric, threshold float64, periods float64, description string) {
		a := awscloudwatch.NewAlarm(o.Construct, jsii.String(id), &awscloudwatch.AlarmProps{
			Metric:             metric,
			Threshold:          jsii.Number(threshold),
			EvaluationPeriods:  jsii.Number(periods),
			ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
			TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
			AlarmDescription:   jsii.String(description),
		})
		a.AddAlarmAction(notify)
		a.AddOkAction(notify)
	}

	for _, fn := range props.Functions.Names() {
		cid := routes.Camel(fn)
		alarm(cid+"Errors", props.Functions.Get(fn).MetricErrors(&awscloudwatch.MetricOptions{
			Period: awscdk.Duration_Minutes(jsii.Number(5)), Statistic: jsii.String("Sum"),
		}), 1, 1, fn+" failed an invocation (crash, timeout or returned error)")
	}
	// Failures the handlers answer themselves are no Lambda errors: the
	// metrics they emit (shared/api, shared/streams) are what see them.
	rally := func(fn, metric string) awscloudwatch.IMetric {
		return awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
			Namespace:     jsii.String(obs.Namespace),
			MetricName:    jsii.String(metric),
			DimensionsMap: &map[string]*string{"Function": props.Functions.Get(fn).FunctionName()},
			Period:        awscdk.Duration_Minutes(jsii.Number(5)),
			Statistic:     jsii.String("Sum"),
		})
	}
	for _, fn := range props.Functions.Routes() {
		alarm(routes.Camel(fn)+"ServerErrors", rally(fn, api.MetricServerErrors), ServerErrorsThreshold, 1,
			fn+" answered "+strconv.Itoa(ServerErrorsThreshold)+" or more requests with a 5xx in 5 minutes (handled: Lambda counts no error)")
	}
	for _, consumer := range props.Functions.Consumers() {
		for _, fn := range props.Processors.Names() {
			parked := func(metric string) awscloudwatch.IMetric {
				return awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
					Namespace:  jsii.String(obs.Namespace),
					MetricName: jsii.String(metric),
					DimensionsMap: &map[string]*string{
						"Function": props.Functions.Get(consumer).FunctionName(), "Processor": jsii.String(fn),
					},
					Period:    awscdk.Duration_Minutes(jsii.Number(5)),
					Statistic: jsii.String("Sum"),
				})
			}
			cid := routes.Camel(fn)
			alarm(cid+"Parked", parked(deadletters.MetricArchived), 1, 1,
				fn+" parked a batch; it is archived with its records: fix the cause, then redrive it")
			alarm(cid+"ParkedLost", parked(deadletters.MetricLost), 1, 1,
				fn+" parked a batch the stream no longer held when it was archived: its records are lost")
		}
	}
	for _, fn := range props.Processors.Names() {
		cid := routes.Camel(fn)
		alarm(cid+"BatchFailures", rally(fn, streams.MetricBatchFailures), 1, 2,
			fn+" failed batches (or its scheduled maintenance) in two 5-minute periods running: records are being retried toward the dead-letter queue")
		alarm(cid+"DlqDepth", props.Processors.DeadLetterQueue(fn).MetricApproximateNumberOfMessagesVisible(&awscloudwatch.MetricOptions{
			Period: awscdk.Duration_Minutes(jsii.Number(5)), Statistic: jsii.String("Maximum"),
		}), 1, 1, fn+" parked a batch in its dead-letter queue: inspect and redrive it")
		alarm(cid+"IteratorAge", props.Functions.Get(fn).Metric(jsii.String("IteratorAge"), &awscloudwatch.MetricOptions{
			Period: awscdk.Duration_Minutes(jsii.Number(1)), Statistic: jsii.String("Maximum"),
		}), float64(IteratorAgeThreshold.Milliseconds()), 5, fn+" is more than "+IteratorAgeThreshold.String()+" behind a stream it reads")
	}
	if a := props.Analytics; a != nil {
		firehose := func(metric, statistic string) awscloudwatch.IMetric {
			return awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
				Namespace:     jsii.String("AWS/Firehose"),
				MetricName:    jsii.String(metric),
				DimensionsMap: &map[string]*string{"DeliveryStreamName": a.StreamName},
				Period:        awscdk.Duration_Minutes(jsii.Number(5)),
				Statistic:     jsii.String(statistic),
			})
		}
		alarm("AnalyticsDeliveryFreshness", firehose("DeliveryToS3.DataFreshness", "Maximum"),
			AnalyticsFreshnessThreshold.Seconds(), 3,
			"Analytics events wait in Firehose more than "+AnalyticsFreshnessThreshold.String()+
				" (twice the buffer interval): S3 delivery is failing; see the stream's delivery log group")
		alarm("AnalyticsFailedConversion", firehose("FailedConversion.Records", "Sum"), 1, 1,
			"Firehose could not convert analytics events to Parquet (schema mismatch): they are under "+
				ErrorsPrefix+" in the analytics bucket, not in the table")
	}
	return o
}
