// Package bind wires the players feature (profiles and friend lists) to
// DynamoDB.
package bind

import (
	"github.com/rallyhq/rally/shared/api"
	"github.com/rallyhq/rally/shared/app"
	"github.com/rallyhq/rally/shared/jobs"
	"github.com/rallyhq/rally/shared/players"
	"github.com/rallyhq/rally/shared/players/dynamo"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
)

// Players binds the profile and friends routes.
var Players = app.Feature{Name: routes.Players, Bind: func(d *app.Deps) app.Handlers {
	h := &players.API{Store: Store(d), Clock: d.Clock}
	return app.Handlers{Endpoints: map[string]api.Endpoint{
		routes.PutProfile.Function: h.PutProfile,
		routes.PutFriends.Function: h.PutFriends,
	}}
}}

// Store is the store of profiles and friend lists, which leaderboards and
// streaks read too.
func Store(d *app.Deps) *dynamo.Players {
	return &dynamo.Players{DB: d.DB, Table: d.Table(schema.Players), Clock: d.Clock}
}

// Eraser erases a player's profile and friend-list entries.
func Eraser(d *app.Deps) *players.Eraser { return &players.Eraser{Store: Store(d)} }

// Jobs registers the friends recompute, which indexes the friend lists
// written before their reverse entries existed.
func Jobs(d *app.Deps) jobs.Tasks { return (&players.Jobs{Store: Store(d)}).Tasks() }
