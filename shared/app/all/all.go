// Package all binds every feature at once: the local stack serves every
// route and processor from one process with it, and the erasure processor,
// which erases a user from every feature, is bound here.
package all

import (
	"context"
	"maps"
	"time"

	"github.com/rallyhq/rally/shared/accounts"
	analyticsbind "github.com/rallyhq/rally/shared/analytics/bind"
	"github.com/rallyhq/rally/shared/app"
	deadlettersbind "github.com/rallyhq/rally/shared/deadletters/bind"
	"github.com/rallyhq/rally/shared/exports"
	exportsbind "github.com/rallyhq/rally/shared/exports/bind"
	gamesbind "github.com/rallyhq/rally/shared/games/bind"
	"github.com/rallyhq/rally/shared/idempotency"
	"github.com/rallyhq/rally/shared/imports"
	importsbind "github.com/rallyhq/rally/shared/imports/bind"
	"github.com/rallyhq/rally/shared/jobs"
	leaderboardsbind "github.com/rallyhq/rally/shared/leaderboards/bind"
	leaderboardsdynamo "github.com/rallyhq/rally/shared/leaderboards/dynamo"
	opsbind "github.com/rallyhq/rally/shared/ops/bind"
	playersbind "github.com/rallyhq/rally/shared/players/bind"
	playersdynamo "github.com/rallyhq/rally/shared/players/dynamo"
	"github.com/rallyhq/rally/shared/privacy"
	privacybind "github.com/rallyhq/rally/shared/privacy/bind"
	"github.com/rallyhq/rally/shared/ratelimit"
	"github.com/rallyhq/rally/shared/reactions"
	reactionsbind "github.com/rallyhq/rally/shared/reactions/bind"
	reactionsdynamo "github.com/rallyhq/rally/shared/reactions/dynamo"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
	streaksbind "github.com/rallyhq/rally/shared/streaks/bind"
	streaksdynamo "github.com/rallyhq/rally/shared/streaks/dynamo"
	"github.com/rallyhq/rally/shared/streams"
)

// Features lists every feature, the erasure processor included.
func Features() []app.Feature {
	return []app.Feature{
		reactionsbind.Reactions, gamesbind.Games, playersbind.Players, leaderboardsbind.Leaderboards,
		streaksbind.Streaks, analyticsbind.Analytics, privacybind.Privacy, Erasure, deadlettersbind.DeadLetters, opsbind.Operations,
		Jobs, exportsbind.Exports, Export,
	}
}

// Erasure binds the erasure processor.
var Erasure = app.Feature{Name: routes.Privacy, Bind: func(d *app.Deps) app.Handlers {
	job := ErasureJob(d)
	return app.Handlers{Processors: map[string]streams.BatchFunc{routes.ErasureProcessor.Function: job.Process}}
}}

// ErasureJob is the job behind the erasure processor, with every feature's
// part in the order they are erased: the dead-letter archive first (it
// gates the rest), the profile (with any analytics
// secret a deployment still keeps there) and then the analytics secret
// last, so events shipped meanwhile still carry the user's pseudonym.
func ErasureJob(d *app.Deps) *privacy.Job {
	awaits := &privacy.Awaits{DB: d.DB, Table: d.Table(schema.Counters), Clock: d.Clock, Hasher: privacybind.Hasher(d)}
	return &privacy.Job{
		Records: privacybind.Records(d),
		Parts: []privacy.Part{
			deadlettersbind.Eraser(d),
			reactionsbind.Eraser(d, awaits),
			leaderboardsbind.Eraser(d, exportsbind.Documents(d)),
			streaksbind.Eraser(d),
			&idempotency.Eraser{Store: d.Idempotency()},
			&ratelimit.Eraser{Limiter: d.Limiter(), Budgets: playerBudgets()},
			&accounts.Eraser{Store: d.Accounts()},
			playersbind.Eraser(d),
			exportsbind.Eraser(d),
			analyticsbind.Eraser(d),
			// Once more: a batch parked while the others were erased.
			deadlettersbind.Eraser(d),
		},
		Clock:   d.Clock,
		Log:     d.Log,
		Metrics: d.Metrics,
	}
}

// Export binds the export processor, which reads every feature's part of
// a user.
var Export = app.Feature{Name: routes.Privacy, Bind: func(d *app.Deps) app.Handlers {
	return app.Handlers{Processors: map[string]streams.BatchFunc{routes.ExportProcessor.Function: ExportJob(d).Process}}
}}

// ExportJob is the job behind the export processor, with every feature's
// parts in the order the document holds them. A feature's new part joins
// this list.
func ExportJob(d *app.Deps) *exports.Job {
	players, edges, scores, streaks := playersbind.Store(d), reactionsbind.Edges(d), leaderboardsbind.Scores(d), streaksbind.Store(d)
	parts := []exports.Part{
		&accounts.Export{Store: d.Accounts()},
		playersdynamo.ProfileExport{Players: players},
		playersdynamo.FriendsExport{Players: players},
		reactionsdynamo.Export{Edges: edges, Kind: reactions.Favorite},
		reactionsdynamo.Export{Edges: edges, Kind: reactions.Like},
		leaderboardsdynamo.ScoresExport{Scores: scores},
		leaderboardsdynamo.MatchesExport{Definitions: leaderboardsbind.Definitions(d), Scores: scores},
		streaksdynamo.StreakExport{Store: streaks},
		streaksdynamo.ActivityExport{Store: streaks},
		streaksdynamo.PointsExport{Store: streaks},
		&privacy.Export{Records: privacybind.Records(d)},
	}
	return &exports.Job{
		Records: exportsbind.Records(d), Erasures: privacybind.Records(d), Documents: exportsbind.Documents(d),
		Parts: parts, Clock: d.Clock, Log: d.Log, Metrics: d.Metrics, Owner: jobs.NewID(),
	}
}

// Jobs binds the job runner, which rebuilds, reconciles and recomputes
// every feature's derived state, and imports files.
var Jobs = app.Feature{Name: routes.Operations, Bind: func(d *app.Deps) app.Handlers {
	return app.Handlers{Processors: map[string]streams.BatchFunc{routes.JobRunner.Function: JobRunner(d).Process}}
}}

// JobRunner runs jobs with every feature's tasks, and the import with
// every feature's importer.
func JobRunner(d *app.Deps) *jobs.Runner {
	tasks := jobs.Tasks{}
	closer := leaderboardsbind.Closer(d, exportsbind.Documents(d))
	for _, t := range []jobs.Tasks{reactionsbind.Jobs(d), leaderboardsbind.Jobs(d), streaksbind.Jobs(d), playersbind.Jobs(d), Importer(d).Tasks(), closer.Tasks()} {
		maps.Copy(tasks, t)
	}
	return &jobs.Runner{
		Store: opsbind.Jobs(d), Tasks: tasks, Clock: d.Clock, Log: d.Log, Metrics: d.Metrics,
		Owner: jobs.NewID(), ReconcileEvery: d.Config.ReconcileEvery,
		Due: []func(context.Context, time.Time) ([]jobs.Job, error){closer.Due, leaderboardsbind.Relist(d)},
	}
}

// Importer is the import job's task, with every feature's importer.
func Importer(d *app.Deps) *imports.Task {
	return importsbind.Task(d, leaderboardsbind.Importer(d), reactionsbind.Importer(d), streaksbind.Importer(d))
}

// playerBudgets names the budgets counted per player.
func playerBudgets() []string {
	var names []string
	for _, b := range routes.PlayerBudgets() {
		names = append(names, b.Name)
	}
	return names
}
