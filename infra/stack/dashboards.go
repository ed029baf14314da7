package stack

import (
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/jsii-runtime-go"

	"github.com/rallyhq/rally/shared/api"
	"github.com/rallyhq/rally/shared/deadletters"
	"github.com/rallyhq/rally/shared/exports"
	"github.com/rallyhq/rally/shared/obs"
	"github.com/rallyhq/rally/shared/privacy"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/streams"
)

// featureView is what one feature's dashboard shows, read from the
// declarations: a route or processor declared with the feature appears on
// its dashboard with nothing else to write.
type featureView struct {
	feature routes.Feature
	routes  []routes.Route
	// functions serve the routes and consumers, each once; reads are those
	// that read through Redis, so count cache hits and degraded reads.
	functions  []string
	reads      []string
	processors []string
}

// featureViews groups the declarations by feature, in declaration order.
func featureViews(d Declared) []*featureView {
	var out []*featureView
	view := func(f routes.Feature) *featureView {
		for _, v := range out {
			if v.feature == f {
				return v
			}
		}
		v := &featureView{feature: f}
		out = append(out, v)
		return v
	}
	for _, r := range d.Routes {
		v := view(r.Feature)
		v.routes = append(v.routes, r)
		v.functions = appendNew(v.functions, r.Function)
		if r.Method == "GET" && r.Uses.Redis {
			v.reads = appendNew(v.reads, r.Function)
		}
	}
	for _, p := range d.Processors {
		v := view(p.Feature)
		v.processors = appendNew(v.processors, p.Function)
	}
	for _, c := range d.Consumers {
		v := view(c.Feature)
		v.functions = appendNew(v.functions, c.Function)
	}
	return out
}

// DashboardName is the name of a feature's dashboard in a stage.
func DashboardName(stage string, f routes.Feature) string {
	return "Rally-" + stage + "-" + string(f)
}

// addDashboards adds one dashboard per feature: its routes (requests, 5xx,
// p99 latency as callers see it), its functions (errors, throttles, cache
// hit ratio, degraded reads), its processors (iterator age, lag, failed
// and parked batches) and what only it has (pending erasures; drift and
// jobs for operations).
func (o *Observability) addDashboards(props ObservabilityProps) {
	o.Dashboards = map[routes.Feature]awscloudwatch.Dashboard{}
	for _, v := range featureViews(props.Declared) {
		d := awscloudwatch.NewDashboard(o.Construct, jsii.String("Dashboard"+routes.Camel(string(v.feature))), &awscloudwatch.DashboardProps{
			DashboardName:   jsii.String(DashboardName(props.Stage, v.feature)),
			DefaultInterval: awscdk.Duration_Hours(jsii.Number(3)),
		})
		d.AddWidgets(awscloudwatch.NewTextWidget(&awscloudwatch.TextWidgetProps{
			Markdown: jsii.String(v.summary(props.Stage)), Width: jsii.Number(24), Height: jsii.Number(2),
		}))
		for _, row := range v.rows(props) {
			d.AddWidgets(row...)
		}
		o.Dashboards[v.feature] = d
	}
}

func (v *featureView) summary(stage string) string {
	parts := []string{fmt.Sprintf("# Rally %s: %s", stage, v.feature)}
	if n := len(v.routes); n > 0 {
		parts = append(parts, fmt.Sprintf("%d routes", n))
	}
	if len(v.processors) > 0 {
		parts = append(parts, "processors "+strings.Join(v.processors, ", "))
	}
	return strings.Join(parts, " · ") + "\n\nAlarms are listed in the README (Operating Rally) and notify the alarm topic."
}

func (v *featureView) rows(props ObservabilityProps) [][]awscloudwatch.IWidget {
	fns := props.Functions
	var rows [][]awscloudwatch.IWidget
	if len(v.routes) > 0 {
		perRoute := func(metric, statistic string) []awscloudwatch.IMetric {
			out := make([]awscloudwatch.IMetric, len(v.routes))
			for i, r := range v.routes {
				out[i] = labelled(routeMetric(props.API, r, metric, statistic), r.Key())
			}
			return out
		}
		rows = append(rows, []awscloudwatch.IWidget{
			graph("Requests per route", perRoute("Count", "Sum")),
			graph("5xx per route", perRoute("5xx", "Sum")),
			graph("p99 latency per route (ms)", perRoute("Latency", "p99"),
				annotation("alarm", float64(RouteLatencyThreshold.Milliseconds()))),
		})
	}
	if len(v.functions) > 0 {
		var failures []awscloudwatch.IMetric
		for _, fn := range v.functions {
			failures = append(failures,
				labelled(fns.Get(fn).MetricErrors(nil), fn+" errors"),
				labelled(fns.Get(fn).MetricThrottles(nil), fn+" throttles"),
				labelled(rallyEvery(fns, fn, api.MetricServerErrors, "Sum", 5*time.Minute), fn+" handled 5xx"))
		}
		row := []awscloudwatch.IWidget{graph("Function errors, throttles, handled 5xx", failures)}
		if len(v.reads) > 0 {
			ratios := make([]awscloudwatch.IMetric, len(v.reads))
			degraded := make([]awscloudwatch.IMetric, len(v.reads))
			for i, fn := range v.reads {
				ratios[i] = hitRatio(fns, fn, i)
				degraded[i] = labelled(rallyEvery(fns, fn, api.MetricDegradedReads, "Sum", 5*time.Minute), fn)
			}
			row = append(row, graph("Cache hit ratio (%)", ratios), graph("Degraded reads (served without Redis)", degraded))
		}
		rows = append(rows, row)
	}
	if len(v.processors) > 0 {
		var age, lag, failed []awscloudwatch.IMetric
		for _, fn := range v.processors {
			age = append(age, labelled(fns.Get(fn).Metric(jsii.String("IteratorAge"), &awscloudwatch.MetricOptions{Statistic: jsii.String("Maximum")}), fn))
			lag = append(lag, labelled(rallyEvery(fns, fn, streams.MetricLag, "Maximum", time.Minute), fn))
			failed = append(failed,
				labelled(rallyEvery(fns, fn, streams.MetricBatchFailures, "Sum", 5*time.Minute), fn+" failed batches"),
				labelled(props.Processors.DeadLetterQueue(fn).MetricApproximateNumberOfMessagesVisible(nil), fn+" in dead-letter queue"))
			for _, c := range props.Declared.Consumers {
				if c.Function == routes.DlqArchiver.Function {
					failed = append(failed, labelled(parkedMetric(fns, c.Function, fn, deadletters.MetricArchived), fn+" parked"))
				}
			}
		}
		rows = append(rows, []awscloudwatch.IWidget{
			graph("Iterator age, newest record (ms)", age, annotation("alarm", float64(IteratorAgeThreshold.Milliseconds()))),
			graph("Stream lag, oldest change (s)", lag, annotation("alarm", StreamLagThreshold.Seconds())),
			graph("Failed and parked batches", failed),
		})
	}
	switch v.feature {
	case routes.Privacy:
		rows = append(rows, []awscloudwatch.IWidget{
			graph("Oldest pending erasure (s)", []awscloudwatch.IMetric{totalMetric(privacy.MetricOldestPendingAge, "Maximum")},
				annotation("alarm", OldestPendingErasureThreshold.Seconds())),
			graph("Oldest pending export (s)", []awscloudwatch.IMetric{totalMetric(exports.MetricOldestPendingAge, "Maximum")},
				annotation("alarm", OldestPendingExportThreshold.Seconds())),
		})
	case routes.Operations:
		rows = append(rows, []awscloudwatch.IWidget{
			graph("Drift found by reconciles, by kind", []awscloudwatch.IMetric{awscloudwatch.NewMathExpression(&awscloudwatch.MathExpressionProps{
				Expression: jsii.String(fmt.Sprintf(`SEARCH('{%s,Function,Kind} MetricName="%s"', 'Sum', 300)`, obs.Namespace, MetricDrift)),
				Label:      jsii.String(""),
				Period:     awscdk.Duration_Minutes(jsii.Number(5)),
			})}),
			graph("Oldest running job (s)", []awscloudwatch.IMetric{totalMetric(MetricOldestRunningJobAge, "Maximum")},
				annotation("alarm", OldestRunningJobThreshold.Seconds())),
			graph("All of Rally: degraded reads, 5xx", []awscloudwatch.IMetric{
				labelled(totalMetric(api.MetricDegradedReads, "Sum"), "degraded reads"),
				labelled(props.API.HttpApi.MetricServerError(&awscloudwatch.MetricOptions{Statistic: jsii.String("Sum")}), "5xx (API Gateway)"),
			}),
		})
	}
	return rows
}

// hitRatio is the share of fn's reads a cache served, in percent. Its ids
// are numbered: one graph holds several.
func hitRatio(fns *Functions, fn string, i int) awscloudwatch.IMetric {
	hits, misses := fmt.Sprintf("hits%d", i), fmt.Sprintf("misses%d", i)
	return awscloudwatch.NewMathExpression(&awscloudwatch.MathExpressionProps{
		Expression: jsii.String(fmt.Sprintf("100 * %s / (%s + %s)", hits, hits, misses)),
		UsingMetrics: &map[string]awscloudwatch.IMetric{
			hits:   rallyEvery(fns, fn, obs.MetricCacheHits, "Sum", 5*time.Minute),
			misses: rallyEvery(fns, fn, obs.MetricCacheMisses, "Sum", 5*time.Minute),
		},
		Label:  jsii.String(fn),
		Period: awscdk.Duration_Minutes(jsii.Number(5)),
	})
}

// totalMetric is one of Rally's metrics for the whole service.
func totalMetric(metric, statistic string) awscloudwatch.IMetric {
	return awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
		Namespace:  jsii.String(obs.Namespace),
		MetricName: jsii.String(metric),
		Period:     awscdk.Duration_Minutes(jsii.Number(5)),
		Statistic:  jsii.String(statistic),
	})
}

// parkedMetric is what the dlq-archiver counts of processor's parked
// batches.
func parkedMetric(fns *Functions, archiver, processor, metric string) awscloudwatch.IMetric {
	return awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
		Namespace:  jsii.String(obs.Namespace),
		MetricName: jsii.String(metric),
		DimensionsMap: &map[string]*string{
			"Function": fns.Get(archiver).FunctionName(), "Processor": jsii.String(processor),
		},
		Period:    awscdk.Duration_Minutes(jsii.Number(5)),
		Statistic: jsii.String("Sum"),
	})
}

func labelled(m awscloudwatch.IMetric, label string) awscloudwatch.IMetric {
	if metric, ok := m.(awscloudwatch.Metric); ok {
		return metric.With(&awscloudwatch.MetricOptions{Label: jsii.String(label)})
	}
	return m
}

func annotation(label string, value float64) *awscloudwatch.HorizontalAnnotation {
	return &awscloudwatch.HorizontalAnnotation{Label: jsii.String(label), Value: jsii.Number(value)}
}

// graph is a third of a dashboard row.
func graph(title string, metrics []awscloudwatch.IMetric, annotations ...*awscloudwatch.HorizontalAnnotation) awscloudwatch.IWidget {
	props := &awscloudwatch.GraphWidgetProps{
		Title: jsii.String(title), Left: &metrics, Width: jsii.Number(8), Height: jsii.Number(6),
	}
	if len(annotations) > 0 {
		props.LeftAnnotations = &annotations
	}
	return awscloudwatch.NewGraphWidget(props)
}
