// Package bind wires the dead-letter archive: the dlq-archiver, fed by
// every processor's dead-letter queue.
package bind

import (
	"context"
	"slices"

	"github.com/rallyhq/rally/shared/app"
	"github.com/rallyhq/rally/shared/deadletters"
	"github.com/rallyhq/rally/shared/privacy"
	privacybind "github.com/rallyhq/rally/shared/privacy/bind"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
	"github.com/rallyhq/rally/shared/streamread"
)

// DeadLetters binds the dlq-archiver.
var DeadLetters = app.Feature{Name: routes.Operations, Bind: func(d *app.Deps) app.Handlers {
	a := Archiver(d)
	return app.Handlers{Consumers: map[string]app.QueueHandler{routes.DlqArchiver.Function: a.HandleSQS}}
}}

// Archive is the DeadLetters table, indexed by the erasure's keyed hash
// of each user its records name.
func Archive(d *app.Deps) *deadletters.Archive {
	records := privacybind.Records(d)
	return &deadletters.Archive{
		DB: d.DB, Table: d.Table(schema.DeadLetters), Clock: d.Clock,
		UserKeys: records.Hasher.Hashes, Erasures: erasures{records},
	}
}

// Eraser is the erasure's part of the archive: it scrubs a user from every
// parked batch, invoking the processors that compensate deletions with
// the user's parked deletions first.
func Eraser(d *app.Deps) *deadletters.Eraser {
	compensates := map[string]bool{}
	for _, p := range routes.Processors() {
		compensates[p.Function] = compensates[p.Function] || p.Compensates
	}
	return &deadletters.Eraser{
		Archive: Archive(d), Invoker: Invoker(d),
		Compensates: func(function string) bool { return compensates[function] },
	}
}

// Invoker invokes processors through Lambda, by their deployed names.
func Invoker(d *app.Deps) deadletters.LambdaInvoker {
	deployed := map[string]string{}
	for name, declared := range d.Config.Functions {
		deployed[declared] = name
	}
	return deadletters.LambdaInvoker{Client: d.Lambda(), Deployed: deployed}
}

// erasures reads the erasure records for the archive.
type erasures struct{ records *privacy.Records }

func (e erasures) States(ctx context.Context, users []string) (map[string]deadletters.ErasureState, error) {
	records, err := e.records.States(ctx, users)
	if err != nil {
		return nil, err
	}
	out := make(map[string]deadletters.ErasureState, len(records))
	for u, r := range records {
		out[u] = deadletters.ErasureState{Pending: r.Status == privacy.Pending, CompletedAt: r.CompletedAt}
	}
	return out, nil
}

// Archiver archives what the dead-letter queues receive.
func Archiver(d *app.Deps) *deadletters.Archiver {
	return &deadletters.Archiver{
		Streams: d.Streams(), Archive: Archive(d), Region: d.Config.Region, Log: d.Log, Metrics: d.Metrics,
		Function: func(arn string) (string, bool) {
			name := deadletters.FunctionName(arn)
			if declared, ok := d.Config.Functions[name]; ok {
				return declared, true
			}
			// The local stack runs functions under their declared names.
			return name, slices.ContainsFunc(routes.Processors(), func(p routes.Processor) bool { return p.Function == name })
		},
		Source: func(arn string) string {
			physical := streamread.TableOf(arn)
			for _, t := range schema.Tables() {
				if d.Table(t) == physical {
					return t.Name
				}
			}
			return physical
		},
	}
}
