// Package bind wires the operations routes.
package bind

import (
	"github.com/rallyhq/rally/shared/api"
	"github.com/rallyhq/rally/shared/app"
	"github.com/rallyhq/rally/shared/deadletters"
	deadlettersbind "github.com/rallyhq/rally/shared/deadletters/bind"
	"github.com/rallyhq/rally/shared/ops"
	"github.com/rallyhq/rally/shared/routes"
)

// Operations binds the operations routes.
var Operations = app.Feature{Name: routes.Operations, Bind: func(d *app.Deps) app.Handlers {
	deployed := map[string]string{}
	for name, declared := range d.Config.Functions {
		deployed[declared] = name
	}
	h := &ops.API{
		Archive: deadlettersbind.Archive(d),
		Invoker: deadletters.LambdaInvoker{Client: d.Lambda(), Deployed: deployed},
	}
	return app.Handlers{Endpoints: map[string]api.Endpoint{
		routes.ListDeadLetters.Function:    h.ListDeadLetters,
		routes.RedriveDeadLetters.Function: h.RedriveDeadLetters,
	}}
}}
