// Package bind wires the dead-letter archive: the dlq-archiver, fed by
// every processor's dead-letter queue.
package bind

import (
	"slices"

	"github.com/rallyhq/rally/shared/app"
	"github.com/rallyhq/rally/shared/deadletters"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
	"github.com/rallyhq/rally/shared/streamread"
)

// DeadLetters binds the dlq-archiver.
var DeadLetters = app.Feature{Name: routes.Operations, Bind: func(d *app.Deps) app.Handlers {
	a := Archiver(d)
	return app.Handlers{Consumers: map[string]app.QueueHandler{routes.DlqArchiver.Function: a.HandleSQS}}
}}

// Archive is the DeadLetters table.
func Archive(d *app.Deps) *deadletters.Archive {
	return &deadletters.Archive{DB: d.DB, Table: d.Table(schema.DeadLetters), Clock: d.Clock}
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
