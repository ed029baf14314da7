package app

import (
	"github.com/aws/aws-sdk-go-v2/service/firehose"

	"github.com/rallyhq/rally/shared/analytics"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
)

// bindAnalytics binds the analytics shipper: to the delivery stream in
// AWS, to Parquet files under AnalyticsDir locally. Without either it is
// left unbound, and a deployment without analytics simply has no shipper.
func bindAnalytics(d *Deps) {
	var sink analytics.Sink
	switch {
	case d.Config.FirehoseStream != "":
		sink = &analytics.FirehoseSink{Client: firehose.NewFromConfig(d.AWS), Stream: d.Config.FirehoseStream, Log: d.Log}
	case d.Config.AnalyticsDir != "":
		sink = &analytics.LocalSink{Dir: d.Config.AnalyticsDir}
	default:
		return
	}
	tables := d.Config.Tables
	s := &analytics.Shipper{
		Tables:  tables,
		PIDs:    &analytics.Pseudonyms{DB: d.DB, Table: tables.Of(schema.Players), Guard: d.erasureRecords()},
		Shipped: &analytics.Shipped{DB: d.DB, Table: tables.Of(schema.Counters), Clock: d.Clock},
		Sink:    sink,
		Clock:   d.Clock,
		Log:     d.Log,
		Metrics: d.Metrics,
	}
	d.handlers[routes.AnalyticsShipper.Function] = s.Process
}
