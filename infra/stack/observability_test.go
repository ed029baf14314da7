package stack_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/aws/jsii-runtime-go"

	"github.com/rallyhq/rally/infra/stack"
	"github.com/rallyhq/rally/shared/api"
	"github.com/rallyhq/rally/shared/exports"
	"github.com/rallyhq/rally/shared/obs"
	"github.com/rallyhq/rally/shared/privacy"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/streams"
)

// alarm is the part of an AWS::CloudWatch::Alarm the tests read: a single
// metric, or Metrics for a math expression.
type alarm struct {
	Namespace, MetricName, Statistic, ExtendedStatistic string
	Dimensions                                          []dimension
	Period, Threshold, EvaluationPeriods                float64
	Metrics                                             []alarmMetric
}

// alarmMetric is an expression of a math alarm, or a metric it reads.
type alarmMetric struct {
	ID         string `json:"Id"`
	Expression string
	MetricStat *struct {
		Metric struct {
			Namespace, MetricName string
			Dimensions            []dimension
		}
		Stat string
	}
}

type dimension struct {
	Name  string
	Value any
}

func (s *synthesized) alarms(t *testing.T) []alarm {
	t.Helper()
	var out []alarm
	for _, r := range s.ofType("AWS::CloudWatch::Alarm") {
		raw, _ := json.Marshal(r.Properties)
		var a alarm
		if err := json.Unmarshal(raw, &a); err != nil {
			t.Fatal(err)
		}
		out = append(out, a)
	}
	return out
}

// dims says whether ds are exactly want (name → value), in any order.
func dims(ds []dimension, want map[string]any) bool {
	if len(ds) != len(want) {
		return false
	}
	for _, d := range ds {
		if w, ok := want[d.Name]; !ok || !reflect.DeepEqual(d.Value, w) {
			return false
		}
	}
	return true
}

// findAlarm returns the alarms on metric in namespace with exactly dimensions want.
func findAlarm(as []alarm, namespace, metric string, want map[string]any) []alarm {
	var out []alarm
	for _, a := range as {
		if a.Namespace == namespace && a.MetricName == metric && dims(a.Dimensions, want) {
			out = append(out, a)
		}
	}
	return out
}

// findMath returns the math alarms whose expression contains expr.
func findMath(as []alarm, expr string) []alarm {
	var out []alarm
	for _, a := range as {
		for _, m := range a.Metrics {
			if strings.Contains(m.Expression, expr) {
				out = append(out, a)
			}
		}
	}
	return out
}

// uses says whether a math alarm reads metric with dimensions want.
func (a alarm) uses(namespace, metric string, want map[string]any) bool {
	return slices.ContainsFunc(a.Metrics, func(m alarmMetric) bool {
		return m.MetricStat != nil && m.MetricStat.Metric.Namespace == namespace &&
			m.MetricStat.Metric.MetricName == metric && dims(m.MetricStat.Metric.Dimensions, want)
	})
}

func TestAlarmsWatchTheAPIThrottlesAndWhatRallyHandlesQuietly(t *testing.T) {
	for stage, s := range both() {
		as := s.alarms(t)
		expect := func(what string, found []alarm, threshold, periods float64, statistic string) {
			t.Helper()
			if len(found) != 1 {
				t.Errorf("%s: %d alarms on %s, want 1", stage, len(found), what)
				return
			}
			a := found[0]
			if a.Threshold != threshold || a.EvaluationPeriods != periods || (statistic != "" && a.Statistic+a.ExtendedStatistic != statistic) {
				t.Errorf("%s: alarm on %s: threshold %v over %v periods (%s%s), want %v over %v (%s)",
					stage, what, a.Threshold, a.EvaluationPeriods, a.Statistic, a.ExtendedStatistic, threshold, periods, statistic)
			}
		}
		apiID := s.ref(s.stack.API.HttpApi.ApiId())

		rate := findMath(as, "100 * errors / requests")
		expect("the API's 5xx rate", rate, stack.APIServerErrorRateThreshold, 1, "")
		if len(rate) == 1 && (!rate[0].uses("AWS/ApiGateway", "5xx", map[string]any{"ApiId": apiID}) ||
			!rate[0].uses("AWS/ApiGateway", "Count", map[string]any{"ApiId": apiID})) {
			t.Errorf("%s: the 5xx rate is not 5xx over Count of the API: %+v", stage, rate[0].Metrics)
		}
		for _, r := range s.routes {
			expect("p99 latency of "+r.Key(), findAlarm(as, "AWS/ApiGateway", "Latency", map[string]any{
				"ApiId": apiID, "Stage": stack.StageName, "Route": r.Key(),
			}), float64(stack.RouteLatencyThreshold.Milliseconds()), stack.RouteLatencyPeriods, "p99")
		}
		// Throttles are watched by feature, at most ten functions an alarm.
		for _, fn := range s.declaredFunctions() {
			var found []alarm
			for _, a := range findMath(as, "FILL(m0, 0)") {
				if a.uses("AWS/Lambda", "Throttles", map[string]any{"FunctionName": s.ref(s.stack.Functions.Get(fn.name).FunctionName())}) {
					found = append(found, a)
				}
			}
			expect("throttles of "+fn.name, found, 1, 1, "")
		}
		for _, a := range as {
			if reads := len(a.Metrics); reads > 11 {
				t.Errorf("%s: an alarm reads %d metrics; CloudWatch allows 10", stage, reads-1)
			}
		}
		// CloudFormation deploys at most 500 resources a stack, nested
		// stacks each on their own.
		for path, n := range s.sizes {
			if n > 500 {
				t.Errorf("%s: %s has %d resources; CloudFormation deploys at most 500 a stack", stage, path, n)
			}
			t.Logf("%s: %s has %d resources (room for %d more)", stage, path, n, 500-n)
		}
		if len(s.sizes) < 2 {
			t.Errorf("%s: the alarms are not in a nested stack: %v", stage, s.sizes)
		}
		for _, tb := range declaredTables() {
			table := map[string]any{"TableName": s.ref(s.stack.Data.Table(tb).TableName())}
			var found []alarm
			for _, a := range findMath(as, "FILL(reads, 0) + FILL(writes, 0)") {
				if a.uses("AWS/DynamoDB", "ReadThrottleEvents", table) && a.uses("AWS/DynamoDB", "WriteThrottleEvents", table) {
					found = append(found, a)
				}
			}
			expect("throttles of table "+tb.Name, found, stack.TableThrottlesThreshold, 1, "")
		}
		for _, fn := range s.processorFunctions() {
			expect("stream lag of "+fn.Function, findAlarm(as, obs.Namespace, streams.MetricLag, map[string]any{
				"Function": s.ref(s.stack.Functions.Get(fn.Function).FunctionName()),
			}), stack.StreamLagThreshold.Seconds(), 5, "Maximum")
		}
		// Signals of the whole service watch the total every metric has.
		none := map[string]any{}
		expect("degraded reads", findAlarm(as, obs.Namespace, api.MetricDegradedReads, none), 1, stack.DegradedReadsPeriods, "Sum")
		expect("drift", findAlarm(as, obs.Namespace, stack.MetricDrift, none), 1, 1, "Sum")
		expect("the oldest pending erasure", findAlarm(as, obs.Namespace, privacy.MetricOldestPendingAge, none),
			stack.OldestPendingErasureThreshold.Seconds(), 1, "Maximum")
		expect("the oldest pending export", findAlarm(as, obs.Namespace, exports.MetricOldestPendingAge, none),
			stack.OldestPendingExportThreshold.Seconds(), 1, "Maximum")
		expect("the oldest running job", findAlarm(as, obs.Namespace, stack.MetricOldestRunningJobAge, none),
			stack.OldestRunningJobThreshold.Seconds(), 1, "Maximum")
		// Route metrics exist only if the stage publishes them.
		check(t, stage+": route metrics enabled", func() {
			s.template.HasResourceProperties(jsii.String("AWS::ApiGatewayV2::Stage"), like(
				"StageName", stack.StageName, "DefaultRouteSettings", map[string]any{"DetailedMetricsEnabled": true},
			))
		})
	}
}

// dashboardBody renders a dashboard's body with every reference spelled
// ${Ref:<logical id>}, so a test can look for a function in it.
func dashboardBody(t *testing.T, body any) string {
	t.Helper()
	join, ok := body.(map[string]any)["Fn::Join"].([]any)
	if !ok {
		s, _ := body.(string)
		return s
	}
	var b strings.Builder
	for _, part := range join[1].([]any) {
		switch p := part.(type) {
		case string:
			b.WriteString(p)
		default:
			fmt.Fprintf(&b, "${Ref:%s}", logicalID(p))
		}
	}
	return b.String()
}

// Each feature has its dashboard, built from the declarations: every route
// and function of the feature is on it, no other feature's route function
// is, and the read functions' cache hit ratio is a math expression.
func TestOneDashboardPerFeatureShowsItsRoutesAndFunctions(t *testing.T) {
	for stage, s := range both() {
		bodies := map[string]string{}
		for _, r := range s.ofType("AWS::CloudWatch::Dashboard") {
			name, _ := r.Properties["DashboardName"].(string)
			bodies[name] = dashboardBody(t, r.Properties["DashboardBody"])
		}
		features := map[routes.Feature]bool{}
		for _, r := range s.routes {
			features[r.Feature] = true
		}
		for _, p := range s.processors {
			features[p.Feature] = true
		}
		for _, c := range s.consumers {
			features[c.Feature] = true
		}
		if len(bodies) != len(features) {
			t.Errorf("%s: %d dashboards for %d features", stage, len(bodies), len(features))
		}
		deployed := *s.stack.StackName()
		for f := range features {
			name := stack.DashboardName(strings.TrimPrefix(deployed, "Rally-"), f)
			body, ok := bodies[name]
			if !ok {
				t.Errorf("%s: no dashboard %s (have %v)", stage, name, keys(bodies))
				continue
			}
			on := func(fn string) bool { return strings.Contains(body, "${Ref:"+s.functionID(fn)+"}") }
			reads := 0
			for _, r := range s.routes {
				switch {
				case r.Feature != f && on(r.Function):
					t.Errorf("%s: %s of %s is on the %s dashboard", stage, r.Function, r.Feature, f)
				case r.Feature != f:
				case !on(r.Function) || !strings.Contains(body, `"`+r.Key()+`"`):
					t.Errorf("%s: route %s (%s) is not on the %s dashboard", stage, r.Key(), r.Function, f)
				case r.Method == "GET" && r.Uses.Redis:
					reads++
				}
			}
			for _, p := range s.processors {
				if p.Feature == f && (!on(p.Function) || !strings.Contains(body, streams.MetricLag) || !strings.Contains(body, "IteratorAge")) {
					t.Errorf("%s: processor %s has no iterator age and lag on the %s dashboard", stage, p.Function, f)
				}
			}
			for _, c := range s.consumers {
				if c.Feature == f && !on(c.Function) {
					t.Errorf("%s: consumer %s is not on the %s dashboard", stage, c.Function, f)
				}
			}
			hasRatio := strings.Contains(body, "100 * hits0 / (hits0 + misses0)") && strings.Contains(body, obs.MetricCacheMisses)
			if hasRatio != (reads > 0) || strings.Contains(body, api.MetricDegradedReads) != (reads > 0 || f == routes.Operations) {
				t.Errorf("%s: the %s dashboard has %d cache reads; hit ratio shown %v", stage, f, reads, hasRatio)
			}
		}
		if b := bodies[stack.DashboardName(strings.TrimPrefix(deployed, "Rally-"), routes.Privacy)]; !strings.Contains(b, privacy.MetricOldestPendingAge) {
			t.Errorf("%s: the privacy dashboard does not show the oldest pending erasure", stage)
		}
		if b := bodies[stack.DashboardName(strings.TrimPrefix(deployed, "Rally-"), routes.Operations)]; !strings.Contains(b, stack.MetricDrift) ||
			!strings.Contains(b, stack.MetricOldestRunningJobAge) {
			t.Errorf("%s: the operations dashboard does not show drift and running jobs", stage)
		}
	}
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
