// Package bind wires the operations routes.
package bind

import (
	"github.com/rallyhq/rally/shared/api"
	"github.com/rallyhq/rally/shared/app"
	"github.com/rallyhq/rally/shared/cachegen"
	deadlettersbind "github.com/rallyhq/rally/shared/deadletters/bind"
	freshnessbind "github.com/rallyhq/rally/shared/freshness/bind"
	"github.com/rallyhq/rally/shared/jobs"
	"github.com/rallyhq/rally/shared/ops"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
)

// Operations binds the operations routes.
var Operations = app.Feature{Name: routes.Operations, Bind: func(d *app.Deps) app.Handlers {
	var caches []*cachegen.Tracker
	for _, scope := range cachegen.Scopes() {
		caches = append(caches, d.Generations(scope))
	}
	h := &ops.API{
		Archive:    deadlettersbind.Archive(d),
		Invoker:    deadlettersbind.Invoker(d),
		Jobs:       Jobs(d),
		Clock:      d.Clock,
		Redis:      d.Redis,
		Caches:     caches,
		DB:         d.DB,
		Erasures:   d.Table(schema.Erasures),
		Boards:     d.Table(schema.Leaderboards),
		Watermarks: freshnessbind.Store(d),
	}
	return app.Handlers{Endpoints: map[string]api.Endpoint{
		routes.ListDeadLetters.Function:    h.ListDeadLetters,
		routes.RedriveDeadLetters.Function: h.RedriveDeadLetters,
		routes.OpsHealth.Function:          h.Health,
		routes.StartJob.Function:           h.StartJob,
		routes.GetJob.Function:             h.GetJob,
	}}
}}

// Jobs is the Jobs table.
func Jobs(d *app.Deps) *jobs.Store {
	return &jobs.Store{DB: d.DB, Table: d.Table(schema.Jobs)}
}
