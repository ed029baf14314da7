// Package bind wires the leaderboards feature to DynamoDB and the Redis
// ranking engine: what the functions of its routes and the leaderboard
// processor start.
package bind

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/rallyhq/rally/shared/api"
	"github.com/rallyhq/rally/shared/app"
	"github.com/rallyhq/rally/shared/cachegen"
	freshnessbind "github.com/rallyhq/rally/shared/freshness/bind"
	"github.com/rallyhq/rally/shared/jobs"
	"github.com/rallyhq/rally/shared/leaderboards"
	"github.com/rallyhq/rally/shared/leaderboards/dynamo"
	"github.com/rallyhq/rally/shared/leaderboards/mirror"
	playersbind "github.com/rallyhq/rally/shared/players/bind"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
	"github.com/rallyhq/rally/shared/streams"
)

// Leaderboards binds the leaderboard routes and the leaderboard processor.
var Leaderboards = app.Feature{Name: routes.Leaderboards, Bind: func(d *app.Deps) app.Handlers {
	defs, scores := Definitions(d), Scores(d)
	gen := d.Generations(mirror.Scope)
	m := Mirror(d, gen)
	svc := leaderboards.NewService(defs, scores, playersbind.Store(d), m, d.Clock, d.Log)
	svc.Metrics, svc.Archive = d.Metrics, Archives(d)
	svc.Freshness = freshnessbind.Reads(d, routes.LeaderboardProcessor)
	h := &leaderboards.API{Service: svc, Cursors: d.Cursors}
	p := &leaderboards.Processor{
		Decode: dynamo.ScoreFromRecord, Defs: defs, Sync: m, Histograms: scores, Gen: gen,
		Rebuilds: &leaderboards.Jobs{Defs: defs, Scores: scores, Cache: m, Clock: d.Clock},
		Progress: cachegen.Progress{Redis: d.Redis, Scope: mirror.Scope},
		Clock:    d.Clock, Log: d.Log, Metrics: d.Metrics,
		Freshness: freshnessbind.Recorder(d, routes.LeaderboardProcessor),
	}
	return app.Handlers{
		Endpoints: map[string]api.Endpoint{
			routes.PutLeaderboard.Function:    h.PutLeaderboard,
			routes.ListLeaderboards.Function:  h.ListLeaderboards,
			routes.GetLeaderboard.Function:    h.GetLeaderboard,
			routes.SubmitScore.Function:       h.SubmitScore,
			routes.RemovePlayerScore.Function: h.RemovePlayerScore,
			routes.BanPlayer.Function:         h.BanPlayer,
			routes.UnbanPlayer.Function:       h.UnbanPlayer,
			routes.LeaderboardTop.Function:    h.LeaderboardTop,
			routes.PlayerRank.Function:        h.PlayerRank,
			routes.FriendsRank.Function:       h.FriendsRank,
		},
		Processors: map[string]streams.BatchFunc{routes.LeaderboardProcessor.Function: p.Process},
	}
}}

// Definitions is the store of board definitions.
func Definitions(d *app.Deps) *dynamo.Definitions {
	return &dynamo.Definitions{DB: d.DB, Table: d.Table(schema.Leaderboards), Clock: d.Clock}
}

// Scores is the store of scores and submissions, and of the boards'
// score histograms.
func Scores(d *app.Deps) *dynamo.Scores {
	return &dynamo.Scores{
		DB: d.DB, Table: d.Table(schema.Scores), Events: d.Table(schema.ScoreEvents), Counters: d.Table(schema.Counters), Clock: d.Clock,
		EstimateFrom: d.Config.RankEstimateFrom, ExactTop: d.Config.RankExactTop,
	}
}

// Eraser erases a player's scores and submissions, and strikes them from
// closed periods' archives (the JSON Lines in docs among them).
func Eraser(d *app.Deps, docs leaderboards.ArchiveDocuments) *leaderboards.Eraser {
	return &leaderboards.Eraser{
		Definitions: Definitions(d), Scores: Scores(d), Archive: Archives(d), Documents: docs,
		Sync: Mirror(d, d.Generations(mirror.Scope)),
	}
}

// Mirror is the leaderboards' Redis side, trusted while gen says so, with
// the deployment's partitioning threshold.
func Mirror(d *app.Deps, gen *cachegen.Tracker) *mirror.Mirror {
	m := mirror.New(d.Redis, gen)
	m.Log, m.PartitionAt = d.Log, d.Config.PartitionAt
	return m
}

// Jobs are the leaderboards' rebuild, reconcile and recompute tasks.
func Jobs(d *app.Deps) jobs.Tasks {
	j := &leaderboards.Jobs{Defs: Definitions(d), Scores: Scores(d), Cache: Mirror(d, d.Generations(mirror.Scope)), Clock: d.Clock}
	return j.Tasks()
}

// Importer loads an import file's score lines.
func Importer(d *app.Deps) *leaderboards.Importer {
	defs, scores, m := Definitions(d), Scores(d), Mirror(d, d.Generations(mirror.Scope))
	j := &leaderboards.Jobs{Defs: defs, Scores: scores, Cache: m, Clock: d.Clock}
	return &leaderboards.Importer{Defs: defs, Scores: scores, Boards: m, Jobs: j, Clock: d.Clock}
}

// Archives is the store of closed periods' final standings.
func Archives(d *app.Deps) *dynamo.Archives {
	return &dynamo.Archives{DB: d.DB, Table: d.Table(schema.Archives)}
}

// Closer closes ended periods into their archive, writing its JSON Lines
// to docs.
func Closer(d *app.Deps, docs leaderboards.Documents) *leaderboards.Closer {
	return &leaderboards.Closer{
		Defs: Definitions(d), Scores: Scores(d), Archive: Archives(d),
		Cache: Mirror(d, d.Generations(mirror.Scope)), Documents: docs, Clock: d.Clock, Log: d.Log,
	}
}

// Relist is a schedule hook of the job runner: it keys the boards defined
// before by_game in it, at every tick until a pass finds none left (the
// hook starts no job).
func Relist(d *app.Deps) func(context.Context, time.Time) ([]jobs.Job, error) {
	defs := Definitions(d)
	var clean atomic.Bool
	return func(ctx context.Context, _ time.Time) ([]jobs.Job, error) {
		if clean.Load() {
			return nil, nil
		}
		keyed, err := defs.Relist(ctx)
		if err != nil {
			return nil, err
		}
		if keyed > 0 {
			d.Log.InfoContext(ctx, "boards keyed for listing", "boards", keyed)
		}
		clean.Store(keyed == 0)
		return nil, nil
	}
}
