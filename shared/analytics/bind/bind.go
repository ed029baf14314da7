// Package bind wires the analytics shipper: the Reactions, ScoreEvents and
// Activity streams, decoded by the stores that write them, shipped to
// Firehose in AWS or to Parquet files locally.
package bind

import (
	"github.com/aws/aws-sdk-go-v2/service/firehose"

	"github.com/rallyhq/rally/shared/analytics"
	"github.com/rallyhq/rally/shared/app"
	lbdynamo "github.com/rallyhq/rally/shared/leaderboards/dynamo"
	privacybind "github.com/rallyhq/rally/shared/privacy/bind"
	rxdynamo "github.com/rallyhq/rally/shared/reactions/dynamo"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
	stdynamo "github.com/rallyhq/rally/shared/streaks/dynamo"
	"github.com/rallyhq/rally/shared/streams"
)

// Analytics binds the analytics shipper: to the delivery stream in AWS,
// to Parquet files under AnalyticsDir locally. Without either it is left
// unbound, and a deployment without analytics simply has no shipper.
var Analytics = app.Feature{Name: routes.Analytics, Bind: func(d *app.Deps) app.Handlers {
	var sink analytics.Sink
	switch {
	case d.Config.FirehoseStream != "":
		sink = &analytics.FirehoseSink{Client: firehose.NewFromConfig(d.AWS), Stream: d.Config.FirehoseStream, Log: d.Log}
	case d.Config.AnalyticsDir != "":
		sink = &analytics.LocalSink{Dir: d.Config.AnalyticsDir}
	default:
		return app.Handlers{}
	}
	s := &analytics.Shipper{
		Tables: d.Config.Tables,
		Decoders: analytics.Decoders{
			Reactions:   rxdynamo.ChangeFromRecord,
			Submissions: lbdynamo.SubmissionFromRecord,
			Activity:    stdynamo.EventFromRecord,
		},
		PIDs: &analytics.Pseudonyms{
			DB: d.DB, Table: d.Table(schema.AnalyticsSecrets), Legacy: d.Table(schema.Players), Guard: privacybind.Records(d),
		},
		Shipped: &analytics.Shipped{DB: d.DB, Table: d.Table(schema.Counters), Clock: d.Clock},
		Sink:    sink,
		Clock:   d.Clock,
		Log:     d.Log,
		Metrics: d.Metrics,
	}
	return app.Handlers{Processors: map[string]streams.BatchFunc{routes.AnalyticsShipper.Function: s.Process}}
}}

// Eraser is the analytics part of an erasure: the user's secret.
func Eraser(d *app.Deps) *analytics.Eraser {
	return &analytics.Eraser{DB: d.DB, Table: d.Table(schema.AnalyticsSecrets)}
}
