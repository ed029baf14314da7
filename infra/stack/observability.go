package stack

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

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
	"github.com/rallyhq/rally/shared/exports"
	"github.com/rallyhq/rally/shared/jobs"
	"github.com/rallyhq/rally/shared/obs"
	"github.com/rallyhq/rally/shared/privacy"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
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

// APIServerErrorRateThreshold is the share of all requests, in percent,
// the API may answer with a 5xx in 5 minutes (API Gateway's count: handled
// 503s, crashes, timeouts and throttled invocations alike), once at least
// APIServerErrorRateMinRequests came in: below that a single failure is
// already several percent, and the per-function alarms see it.
const (
	APIServerErrorRateThreshold   = 1
	APIServerErrorRateMinRequests = 100
)

// RouteLatencyThreshold is the p99 latency a route may keep for
// RouteLatencyPeriods 5-minute periods running. It is API Gateway's
// Latency per route: what the caller waits, cold starts and authorizers
// included, which the function's own Duration leaves out. A cold start
// (Go in the VPC, TLS to the cache) costs up to about a second, so a p99
// over two seconds for a quarter of an hour is a slow dependency.
const (
	RouteLatencyThreshold = 2 * time.Second
	RouteLatencyPeriods   = 3
)

// TableThrottlesThreshold is how many throttled reads and writes a table
// may have in 5 minutes. The SDK retries them with backoff, so a few are
// absorbed; more mean a hot partition or a table past its on-demand peak,
// and callers waiting or failing.
const TableThrottlesThreshold = 10

// StreamLagThreshold is how stale the oldest change of a processor's
// batches may be (streams.MetricLag) for five minutes running. Counts and
// boards promise seconds; a redrive replays old records, but only for a
// moment, which the five minutes ride out.
const StreamLagThreshold = time.Minute

// DegradedReadsPeriods is how many 5-minute periods running reads may be
// served degraded before someone is told: a processor repairs a lost cache
// on its next tick (a minute), so a quarter of an hour means Redis is down
// or cannot be repaired.
const DegradedReadsPeriods = 3

// OldestPendingErasureThreshold is how long an erasure may stay pending:
// one completes within a few ticks (it waits only for the processors to
// catch up), so an hour means a part keeps failing, long before any
// deadline to erase by.
const OldestPendingErasureThreshold = time.Hour

// OldestPendingExportThreshold is how long a user's export may stay
// pending: one is written within minutes (a run of 20,000 items a
// continuation), so an hour means its runs keep failing.
const OldestPendingExportThreshold = time.Hour

// OldestRunningJobThreshold is how long a job (rebuild, reconcile,
// recompute) may run: each resumes from its checkpoint, and the largest
// rebuild finishes within hours, so longer means one stopped progressing.
const OldestRunningJobThreshold = 6 * time.Hour

// Metrics the job runner emits (shared/jobs; the alarms watch the total
// for all of Rally, which every emitted metric has). Drift counts the
// derived values a reconcile found off their truth (dimension Kind:
// count, redis_count, trending, board, streak_board, member_count,
// streak_index): it repairs them, but drift means something lost or
// misapplied a write.
const (
	MetricDrift               = jobs.MetricDrift
	MetricOldestRunningJobAge = jobs.MetricOldestRunningJobAge
)

// ObservabilityProps configures alarms and dashboards.
type ObservabilityProps struct {
	Stage      string
	Functions  *Functions
	Processors *Processors
	API        *API
	Data       *Data
	// Declared are the declarations the stack was built from; dashboards
	// group them by feature.
	Declared Declared
	// Analytics, when set, adds the delivery stream's alarms.
	Analytics  *Analytics
	AlarmEmail string
	Protect    bool
}

// Declared are the routes, processors, consumers and tables a stack is
// built from.
type Declared struct {
	Routes     []routes.Route
	Processors []routes.Processor
	Consumers  []routes.Consumer
	Tables     []schema.Table
}

// Observability owns the alarm topic, the alarms and one dashboard per
// feature. Alarms watch what fails loudly (function errors and throttles,
// the API's 5xx rate and latency, table throttles, dead letters, streams
// falling behind) and what Rally handles quietly (5xx answers, failed
// batches, degraded reads, drift, erasures and jobs that do not finish).
type Observability struct {
	constructs.Construct
	Topic awssns.Topic
	// Alarms is the nested stack that holds every alarm: an alarm or two
	// per route, table and processor would otherwise spend a third of
	// CloudFormation's 500 resources a stack.
	Alarms awscdk.NestedStack
	// Dashboards are by feature.
	Dashboards map[routes.Feature]awscloudwatch.Dashboard
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
		suppressServerless(o.Topic, "SNSRedrivePolicy", "The only subscription is the on-call email address: "+
			"an undelivered email cannot be replayed from a queue, and every alarm stays in ALARM, visible in "+
			"CloudWatch, until it recovers (which notifies again).")
	}
	notify := awscloudwatchactions.NewSnsAction(o.Topic)
	o.Alarms = awscdk.NewNestedStack(o.Construct, jsii.String("AlarmStack"), &awscdk.NestedStackProps{
		Description: jsii.String("Rally " + props.Stage + ": alarms (they notify the parent stack's alarm topic)"),
	})
	alarm := func(id string, metric awscloudwatch.IMetric, threshold float64, periods float64, description string) {
		a := awscloudwatch.NewAlarm(o.Alarms, jsii.String(id), &awscloudwatch.AlarmProps{
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

	fiveMinutes := func(statistic string) *awscloudwatch.MetricOptions {
		return &awscloudwatch.MetricOptions{Period: awscdk.Duration_Minutes(jsii.Number(5)), Statistic: jsii.String(statistic)}
	}
	// Invocation errors and throttling are watched per feature, at most
	// ten functions an alarm (its dashboard shows which function): a stack
	// has room for 500 resources, and an alarm per function and signal
	// would spend 70.
	for _, v := range featureViews(props.Declared) {
		fns := append(slices.Clone(v.functions), v.processors...)
		for part, group := range chunks(fns, maxAlarmMetrics) {
			suffix := ""
			if part > 0 {
				suffix = strconv.Itoa(part + 1)
			}
			feature := routes.Camel(string(v.feature))
			alarm(feature+"Errors"+suffix, sumOf(group, func(fn string) awscloudwatch.IMetric {
				return props.Functions.Get(fn).MetricErrors(fiveMinutes("Sum"))
			}), 1, 1, "Lambda invocations of "+strings.Join(group, ", ")+
				" failed (crash, timeout or returned error); the "+string(v.feature)+" dashboard shows which")
			alarm(feature+"Throttles"+suffix, sumOf(group, func(fn string) awscloudwatch.IMetric {
				return props.Functions.Get(fn).MetricThrottles(fiveMinutes("Sum"))
			}), 1, 1, "Lambda throttled "+strings.Join(group, ", ")+
				": it refused invocations for want of concurrency (callers got 5xx, streams waited); the "+string(v.feature)+" dashboard shows which")
		}
	}
	// Failures the handlers answer themselves are no Lambda errors: the
	// metrics they emit (shared/api, shared/streams) are what see them.
	rally := func(fn, metric string) awscloudwatch.IMetric {
		return rallyEvery(props.Functions, fn, metric, "Sum", 5*time.Minute)
	}
	for _, fn := range props.Functions.Routes() {
		alarm(routes.Camel(fn)+"ServerErrors", rally(fn, api.MetricServerErrors), ServerErrorsThreshold, 1,
			fn+" answered "+strconv.Itoa(ServerErrorsThreshold)+" or more requests with a 5xx in 5 minutes (handled: Lambda counts no error)")
	}
	alarm("ApiServerErrorRate", awscloudwatch.NewMathExpression(&awscloudwatch.MathExpressionProps{
		Expression: jsii.String(fmt.Sprintf("IF(requests >= %d, 100 * errors / requests, 0)", APIServerErrorRateMinRequests)),
		UsingMetrics: &map[string]awscloudwatch.IMetric{
			"errors":   props.API.HttpApi.MetricServerError(fiveMinutes("Sum")),
			"requests": props.API.HttpApi.MetricCount(fiveMinutes("Sum")),
		},
		Label:  jsii.String("5xx, % of requests"),
		Period: awscdk.Duration_Minutes(jsii.Number(5)),
	}), APIServerErrorRateThreshold, 1, fmt.Sprintf("The API answered %d%% or more of its requests with a 5xx in 5 minutes (of at least %d)",
		APIServerErrorRateThreshold, APIServerErrorRateMinRequests))
	for _, r := range props.Declared.Routes {
		alarm(routeID(r)+"Latency", routeMetric(props.API, r, "Latency", "p99"), float64(RouteLatencyThreshold.Milliseconds()), RouteLatencyPeriods,
			r.Key()+" took more than "+RouteLatencyThreshold.String()+" at p99 for "+strconv.Itoa(5*RouteLatencyPeriods)+" minutes (as callers wait: API Gateway's latency)")
	}
	for _, t := range props.Declared.Tables {
		table := props.Data.Table(t)
		alarm("Table"+t.Name+"Throttles", awscloudwatch.NewMathExpression(&awscloudwatch.MathExpressionProps{
			Expression: jsii.String("FILL(reads, 0) + FILL(writes, 0)"),
			UsingMetrics: &map[string]awscloudwatch.IMetric{
				"reads":  table.Metric(jsii.String("ReadThrottleEvents"), fiveMinutes("Sum")),
				"writes": table.Metric(jsii.String("WriteThrottleEvents"), fiveMinutes("Sum")),
			},
			Label:  jsii.String(t.Name + " throttled reads and writes"),
			Period: awscdk.Duration_Minutes(jsii.Number(5)),
		}), TableThrottlesThreshold, 1, fmt.Sprintf("DynamoDB throttled %d or more reads and writes of %s in 5 minutes: a hot partition or a table past its on-demand peak",
			TableThrottlesThreshold, t.Name))
	}
	// Signals of the whole service: the totals every metric also has.
	total := totalMetric
	alarm("DegradedReads", total(api.MetricDegradedReads, "Sum"), 1, DegradedReadsPeriods,
		"Reads were served degraded (from DynamoDB, without Redis) for "+strconv.Itoa(5*DegradedReadsPeriods)+
			" minutes running: Redis is unreachable, or the processors cannot repair it")
	alarm("Drift", total(MetricDrift, "Sum"), 1, 1,
		"A reconcile found derived values (counts, trending, boards) different from their truth and repaired them: "+
			"something lost or misapplied writes; its job report names examples")
	alarm("OldestPendingErasure", total(privacy.MetricOldestPendingAge, "Maximum"), OldestPendingErasureThreshold.Seconds(), 1,
		"An erasure has been pending for more than "+OldestPendingErasureThreshold.String()+": see the erasure-processor's logs for the part that fails")
	alarm("OldestPendingExport", total(exports.MetricOldestPendingAge, "Maximum"), OldestPendingExportThreshold.Seconds(), 1,
		"A user's export has been pending for more than "+OldestPendingExportThreshold.String()+": see the export-processor's logs for the run that fails")
	alarm("OldestRunningJob", total(MetricOldestRunningJobAge, "Maximum"), OldestRunningJobThreshold.Seconds(), 1,
		"A job has been running for more than "+OldestRunningJobThreshold.String()+": it stopped progressing from its checkpoint")
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
		alarm(cid+"StreamLag", rallyEvery(props.Functions, fn, streams.MetricLag, "Maximum", time.Minute), StreamLagThreshold.Seconds(), 5,
			fn+" applied changes more than "+StreamLagThreshold.String()+" after they were written, for 5 minutes running: it is retrying or cannot keep up")
	}
	o.addDashboards(props)
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

// rallyEvery is one of Rally's metrics as function fn emits it.
func rallyEvery(fns *Functions, fn, metric, statistic string, period time.Duration) awscloudwatch.IMetric {
	return awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
		Namespace:     jsii.String(obs.Namespace),
		MetricName:    jsii.String(metric),
		DimensionsMap: &map[string]*string{"Function": fns.Get(fn).FunctionName()},
		Period:        awscdk.Duration_Seconds(jsii.Number(period.Seconds())),
		Statistic:     jsii.String(statistic),
	})
}

// routeMetric is API Gateway's metric of one route over 5 minutes (the
// stage publishes route metrics: DetailedMetricsEnabled).
func routeMetric(a *API, r routes.Route, metric, statistic string) awscloudwatch.IMetric {
	return awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
		Namespace:  jsii.String("AWS/ApiGateway"),
		MetricName: jsii.String(metric),
		DimensionsMap: &map[string]*string{
			"ApiId": a.HttpApi.ApiId(), "Stage": jsii.String(StageName), "Route": jsii.String(r.Key()),
		},
		Period:    awscdk.Duration_Minutes(jsii.Number(5)),
		Statistic: jsii.String(statistic),
	})
}

// routeID spells a route key as a construct id: GET /v1/games/top →
// GetV1GamesTop.
func routeID(r routes.Route) string {
	words := strings.FieldsFunc(strings.ToLower(r.Key()), func(c rune) bool {
		return !unicode.IsLetter(c) && !unicode.IsDigit(c)
	})
	return routes.Camel(strings.Join(words, "-"))
}

// maxAlarmMetrics is how many metrics one alarm's math may read.
const maxAlarmMetrics = 10

// sumOf is the sum of each name's metric, a missing value counted 0.
func sumOf(names []string, metric func(string) awscloudwatch.IMetric) awscloudwatch.IMetric {
	using := map[string]awscloudwatch.IMetric{}
	terms := make([]string, len(names))
	for i, name := range names {
		id := fmt.Sprintf("m%d", i)
		using[id] = metric(name)
		terms[i] = "FILL(" + id + ", 0)"
	}
	return awscloudwatch.NewMathExpression(&awscloudwatch.MathExpressionProps{
		Expression:   jsii.String(strings.Join(terms, " + ")),
		UsingMetrics: &using,
		Period:       awscdk.Duration_Minutes(jsii.Number(5)),
	})
}

// chunks splits list into runs of at most n.
func chunks(list []string, n int) [][]string {
	var out [][]string
	for len(list) > n {
		out = append(out, list[:n])
		list = list[n:]
	}
	if len(list) > 0 {
		out = append(out, list)
	}
	return out
}
