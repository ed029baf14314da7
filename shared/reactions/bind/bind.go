// Package bind wires the reactions feature (favorites and likes, their
// counts and trending) to DynamoDB and Redis: what the functions of its
// routes and the counter processor start.
package bind

import (
	"github.com/rallyhq/rally/shared/api"
	"github.com/rallyhq/rally/shared/app"
	"github.com/rallyhq/rally/shared/cachegen"
	freshnessbind "github.com/rallyhq/rally/shared/freshness/bind"
	gamesbind "github.com/rallyhq/rally/shared/games/bind"
	"github.com/rallyhq/rally/shared/jobs"
	"github.com/rallyhq/rally/shared/reactions"
	"github.com/rallyhq/rally/shared/reactions/dynamo"
	"github.com/rallyhq/rally/shared/reactions/mirror"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
	"github.com/rallyhq/rally/shared/streams"
)

// Reactions binds the favorites and likes routes and the counter processor.
var Reactions = app.Feature{Name: routes.Reactions, Bind: bindReactions}

func bindReactions(d *app.Deps) app.Handlers {
	gen := d.Generations(mirror.Scope)
	m := mirror.New(d.Redis, gen)
	counts := Counts(d)
	svc := &reactions.Service{
		Edges:     Edges(d),
		Counts:    counts,
		Games:     gamesbind.Store(d),
		Mirror:    m,
		Clock:     d.Clock,
		Log:       d.Log,
		Metrics:   d.Metrics,
		Freshness: freshnessbind.Reads(d, routes.CounterProcessor),
		Flips:     &reactions.Flips{Store: m},
	}
	h := &reactions.API{Service: svc, Idempotency: d.Idempotency(), Cursors: d.Cursors}
	p := &reactions.CounterProcessor{
		Decode:        dynamo.ChangeFromRecord,
		Counts:        counts,
		Mirror:        m,
		Gen:           gen,
		Rebuilds:      rebuilds(d, m),
		Progress:      cachegen.Progress{Redis: d.Redis, Scope: mirror.Scope},
		Clock:         d.Clock,
		Log:           d.Log,
		Metrics:       d.Metrics,
		Trending:      []reactions.Kind{reactions.Favorite},
		Freshness:     freshnessbind.Recorder(d, routes.CounterProcessor),
		SnapshotEvery: d.Config.SnapshotEvery,
	}
	return app.Handlers{
		Endpoints: map[string]api.Endpoint{
			routes.FavoriteGame.Function:   h.FavoriteGame,
			routes.UnfavoriteGame.Function: h.UnfavoriteGame,
			routes.ListFavorites.Function:  h.ListFavorites,
			routes.FavoriteStatus.Function: h.FavoriteStatus,
			routes.CountFavorites.Function: h.CountFavorites,
			routes.TopGames.Function:       h.TopGames,
			routes.LikePost.Function:       h.LikePost,
			routes.UnlikePost.Function:     h.UnlikePost,
			routes.ToggleLike.Function:     h.ToggleLike,
			routes.CountLikes.Function:     h.CountLikes,
		},
		Processors: map[string]streams.BatchFunc{routes.CounterProcessor.Function: p.Process},
	}
}

// Edges is the store of reaction edges.
func Edges(d *app.Deps) *dynamo.Edges {
	return &dynamo.Edges{DB: d.DB, Table: d.Table(schema.Reactions)}
}

// Counts is the store of durable counts and trending buckets.
func Counts(d *app.Deps) *dynamo.Counts {
	return &dynamo.Counts{DB: d.DB, Table: d.Table(schema.Counters)}
}

// Eraser erases a user's reactions; awaits keeps the versions it waits for
// (the erasure job's, shared/privacy).
func Eraser(d *app.Deps, awaits reactions.ErasureAwaits) *reactions.Eraser {
	gen := d.Generations(mirror.Scope)
	return &reactions.Eraser{
		Edges: Edges(d), Counts: Counts(d), Cache: mirror.New(d.Redis, gen), Gen: gen,
		Awaits: awaits,
	}
}

// Jobs are the reactions' rebuild, reconcile and recompute tasks.
func Jobs(d *app.Deps) jobs.Tasks {
	return rebuilds(d, mirror.New(d.Redis, d.Generations(mirror.Scope))).Tasks()
}

func rebuilds(d *app.Deps, m *mirror.Mirror) *reactions.Jobs {
	return &reactions.Jobs{Edges: Edges(d), Counts: Counts(d), Mirror: m, Clock: d.Clock, Settle: d.Config.ReconcileSettle}
}

// Importer loads an import file's favorite and like lines.
func Importer(d *app.Deps) *reactions.Importer {
	return &reactions.Importer{Edges: Edges(d)}
}
