// Package bind wires the streaks feature (activity, streaks and points) to
// DynamoDB and Redis: what the functions of its routes and the streak
// processor start.
package bind

import (
	"context"

	"github.com/rallyhq/rally/shared/api"
	"github.com/rallyhq/rally/shared/app"
	"github.com/rallyhq/rally/shared/cachegen"
	freshnessbind "github.com/rallyhq/rally/shared/freshness/bind"
	"github.com/rallyhq/rally/shared/jobs"
	"github.com/rallyhq/rally/shared/obs"
	playersbind "github.com/rallyhq/rally/shared/players/bind"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
	"github.com/rallyhq/rally/shared/streaks"
	"github.com/rallyhq/rally/shared/streaks/dynamo"
	"github.com/rallyhq/rally/shared/streaks/mirror"
	"github.com/rallyhq/rally/shared/streams"
)

// Streaks binds the activity, streak and points routes and the streak
// processor.
var Streaks = app.Feature{Name: routes.Streaks, Bind: func(d *app.Deps) app.Handlers {
	store, profiles := Store(d), playersbind.Store(d)
	gen := d.Generations(mirror.Scope)
	m := mirror.New(d.Redis, gen)
	svc := &streaks.Service{
		Store: store, Cache: m, Gen: gen, Clock: d.Clock, Log: d.Log, Metrics: d.Metrics,
		Freshness: freshnessbind.Reads(d, routes.StreakProcessor),
		RegionOf: func(ctx context.Context, user string) (string, error) {
			found, err := profiles.Profiles(ctx, []string{user})
			return found[user].Region, err
		},
	}
	h := &streaks.API{Service: svc}
	p := &streaks.Processor{
		Decode: dynamo.StateFromRecord, Store: store, Cache: m, Gen: gen,
		Clock: d.Clock, Log: d.Log, Metrics: d.Metrics,
		Freshness: freshnessbind.Recorder(d, routes.StreakProcessor),
		Rebuilds:  &streaks.Jobs{Store: store, Cache: m, Clock: d.Clock},
		Progress:  cachegen.Progress{Redis: d.Redis, Scope: mirror.Scope},
	}
	return app.Handlers{
		Endpoints: map[string]api.Endpoint{
			routes.RecordActivity.Function: h.RecordActivity,
			routes.ReportActivity.Function: h.ReportActivity,
			routes.GetStreak.Function:      h.GetStreak,
			routes.PointsHistory.Function:  h.PointsHistory,
			routes.StreaksTop.Function:     h.StreaksTop,
		},
		Processors: map[string]streams.BatchFunc{routes.StreakProcessor.Function: p.Process},
	}
}}

// Store is the store of streaks and activity.
func Store(d *app.Deps) *dynamo.Store {
	return &dynamo.Store{
		DB: d.DB, Streaks: d.Table(schema.Streaks), Activity: d.Table(schema.Activity), Clock: d.Clock,
		Capacity: func(op string, units float64) {
			d.Metrics.Emit("StreaksCapacityUnits", units, obs.Count, map[string]string{"Operation": op})
		},
	}
}

// Eraser erases a player's streak and activity.
func Eraser(d *app.Deps) *streaks.Eraser {
	gen := d.Generations(mirror.Scope)
	return &streaks.Eraser{Store: Store(d), Cache: mirror.New(d.Redis, gen), Gen: gen}
}

// Jobs are the streaks' rebuild, reconcile and recompute tasks.
func Jobs(d *app.Deps) jobs.Tasks {
	j := &streaks.Jobs{Store: Store(d), Cache: mirror.New(d.Redis, d.Generations(mirror.Scope)), Clock: d.Clock}
	return j.Tasks()
}

// Importer loads an import file's streak lines.
func Importer(d *app.Deps) *streaks.Importer {
	return &streaks.Importer{Streaks: Store(d), Clock: d.Clock}
}
