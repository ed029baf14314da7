package app

import (
	"context"

	"github.com/rallyhq/rally/shared/api"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/streaks"
	"github.com/rallyhq/rally/shared/streaks/dynamo"
	"github.com/rallyhq/rally/shared/streaks/mirror"
)

// bindStreaks binds the activity, streak and points routes and the streak
// processor.
func bindStreaks(d *Deps) {
	store, players := d.streakStore(), d.players()
	gen := d.tracker(mirror.Scope)
	m := mirror.New(d.Redis, gen)
	svc := &streaks.Service{
		Store: store, Cache: m, Gen: gen, Clock: d.Clock, Log: d.Log, Metrics: d.Metrics,
		RegionOf: func(ctx context.Context, user string) (string, error) {
			profiles, err := players.Profiles(ctx, []string{user})
			return profiles[user].Region, err
		},
	}
	h := &streaks.API{Service: svc}
	for fn, e := range map[string]api.Endpoint{
		routes.RecordActivity.Function: h.RecordActivity,
		routes.GetStreak.Function:      h.GetStreak,
		routes.PointsHistory.Function:  h.PointsHistory,
		routes.StreaksTop.Function:     h.StreaksTop,
	} {
		d.http[fn] = e
	}
	p := &streaks.Processor{
		Decode: dynamo.StateFromRecord, Store: store, Cache: m, Gen: gen,
		Clock: d.Clock, Log: d.Log, Metrics: d.Metrics,
	}
	d.handlers[routes.StreakProcessor.Function] = p.Process
}
