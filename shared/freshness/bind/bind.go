// Package bind wires freshness watermarks to Redis and DynamoDB: what a
// processor records them with, what the reads of its data consult, and the
// durable store operations read.
package bind

import (
	"github.com/rallyhq/rally/shared/app"
	"github.com/rallyhq/rally/shared/freshness"
	"github.com/rallyhq/rally/shared/freshness/dynamo"
	"github.com/rallyhq/rally/shared/freshness/mirror"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
)

// Store is the durable copy of every processor's watermark.
func Store(d *app.Deps) *dynamo.Store {
	return &dynamo.Store{DB: d.DB, Table: d.Table(schema.Counters)}
}

// Recorder records p's watermark after each batch.
func Recorder(d *app.Deps, p routes.Processor) *freshness.Recorder {
	return &freshness.Recorder{
		Processor: p.Function, Fast: mirror.Watermarks{Redis: d.Redis}, Durable: Store(d),
		Clock: d.Clock, Log: d.Log, Metrics: d.Metrics,
	}
}

// Reads says how fresh the reads of what p derives are.
func Reads(d *app.Deps, p routes.Processor) freshness.Reads {
	return freshness.Reads{Processor: p.Function, Durable: Store(d), Clock: d.Clock, Log: d.Log}
}
