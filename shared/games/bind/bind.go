// Package bind wires the games feature (game metadata) to DynamoDB.
package bind

import (
	"github.com/rallyhq/rally/shared/api"
	"github.com/rallyhq/rally/shared/app"
	"github.com/rallyhq/rally/shared/games"
	"github.com/rallyhq/rally/shared/games/dynamo"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
)

// Games binds PUT /v1/games/{game_id}.
var Games = app.Feature{Name: routes.Games, Bind: func(d *app.Deps) app.Handlers {
	h := &games.API{Store: Store(d), Clock: d.Clock}
	return app.Handlers{Endpoints: map[string]api.Endpoint{routes.PutGame.Function: h.PutGame}}
}}

// Store is the store of game metadata, which lists read too.
func Store(d *app.Deps) *dynamo.Games {
	return &dynamo.Games{DB: d.DB, Table: d.Table(schema.Games)}
}
