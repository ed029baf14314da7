package app

import (
	"time"

	"github.com/rallyhq/rally/shared/api"
	"github.com/rallyhq/rally/shared/cachegen"
	"github.com/rallyhq/rally/shared/games"
	gmdynamo "github.com/rallyhq/rally/shared/games/dynamo"
	"github.com/rallyhq/rally/shared/idempotency"
	"github.com/rallyhq/rally/shared/ratelimit"
	"github.com/rallyhq/rally/shared/reactions"
	"github.com/rallyhq/rally/shared/reactions/dynamo"
	"github.com/rallyhq/rally/shared/reactions/mirror"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
)

func (d *Deps) idempotency() *idempotency.Store {
	return &idempotency.Store{DB: d.DB, Table: d.Config.Tables.Of(schema.Idempotency), Clock: d.Clock}
}

func (d *Deps) tracker(scope string) *cachegen.Tracker {
	return &cachegen.Tracker{
		DB: d.DB, Table: d.Config.Tables.Of(schema.Counters), Redis: d.Redis, Scope: scope,
		CheckEvery: d.Config.CacheCheckEvery,
	}
}

func perMinute(name string, n int64) ratelimit.Rule {
	return ratelimit.Rule{Name: name, Limit: n, Window: time.Minute}
}

// reactionBudgets are the per-player rate limits of reactions.
func (d *Deps) reactionBudgets() map[reactions.Kind]ratelimit.Rule {
	return map[reactions.Kind]ratelimit.Rule{
		reactions.Favorite: perMinute("favorite", d.Config.Limits.FavoritesPerPlayer),
		reactions.Like:     perMinute("like", d.Config.Limits.LikesPerPlayer),
	}
}

// bindReactions binds the favorites and likes routes and the counter
// processor.
func bindReactions(d *Deps) {
	idem := d.idempotency()
	gen := d.tracker(mirror.Scope)
	m := mirror.New(d.Redis, gen)
	counts := d.reactionCounts()
	svc := &reactions.Service{
		Edges:   d.edges(),
		Counts:  counts,
		Games:   d.games(),
		Mirror:  m,
		Limits:  &ratelimit.Limiter{Redis: d.Redis, Clock: d.Clock},
		Budgets: d.reactionBudgets(),
		IPRule:  perMinute("reaction-ip", d.Config.Limits.WritesPerIP),
		Clock:   d.Clock,
		Log:     d.Log,
	}
	h := &reactions.API{Service: svc, Idempotency: idem, Cursors: d.Cursors}
	for fn, e := range map[string]api.Endpoint{
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
	} {
		d.http[fn] = e
	}
	gh := &games.API{Store: d.games(), Clock: d.Clock}
	d.http[routes.PutGame.Function] = gh.PutGame
	p := &reactions.CounterProcessor{
		Decode:        dynamo.ChangeFromRecord,
		Counts:        counts,
		Mirror:        m,
		Gen:           gen,
		Rebuild:       mirror.RebuildCursor{Redis: d.Redis},
		Clock:         d.Clock,
		Log:           d.Log,
		Metrics:       d.Metrics,
		Trending:      []reactions.Kind{reactions.Favorite},
		SnapshotEvery: d.Config.SnapshotEvery,
	}
	d.handlers[routes.CounterProcessor.Function] = p.Process
}

func (d *Deps) games() *gmdynamo.Games {
	return &gmdynamo.Games{DB: d.DB, Table: d.Config.Tables.Of(schema.Games)}
}
