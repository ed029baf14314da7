package app

import (
	"github.com/rallyhq/rally/shared/api"
	"github.com/rallyhq/rally/shared/leaderboards"
	"github.com/rallyhq/rally/shared/leaderboards/dynamo"
	"github.com/rallyhq/rally/shared/leaderboards/mirror"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
)

// bindLeaderboards binds the leaderboard and player routes and the
// leaderboard processor.
func bindLeaderboards(d *Deps) {
	tables := d.Config.Tables
	defs := &dynamo.Definitions{DB: d.DB, Table: tables.Of(schema.Leaderboards), Clock: d.Clock}
	scores := &dynamo.Scores{DB: d.DB, Table: tables.Of(schema.Scores), Events: tables.Of(schema.ScoreEvents), Clock: d.Clock}
	players := &dynamo.Players{DB: d.DB, Table: tables.Of(schema.Players), Clock: d.Clock}
	gen := d.tracker(mirror.Scope)
	m := mirror.New(d.Redis, gen)
	svc := leaderboards.NewService(defs, scores, players, m, d.Clock, d.Log)
	h := &leaderboards.API{Service: svc}
	for fn, e := range map[string]api.Endpoint{
		routes.PutLeaderboard.Function: h.PutLeaderboard,
		routes.GetLeaderboard.Function: h.GetLeaderboard,
		routes.SubmitScore.Function:    h.SubmitScore,
		routes.LeaderboardTop.Function: h.LeaderboardTop,
		routes.PlayerRank.Function:     h.PlayerRank,
		routes.FriendsRank.Function:    h.FriendsRank,
		routes.PutFriends.Function:     h.PutFriends,
		routes.PutProfile.Function:     h.PutProfile,
	} {
		d.http[fn] = e
	}
	p := &leaderboards.Processor{
		Decode: dynamo.ScoreFromRecord, Defs: defs, Scores: scores, Sync: m, Gen: gen,
		Clock: d.Clock, Log: d.Log, Metrics: d.Metrics,
	}
	d.handlers[routes.LeaderboardProcessor.Function] = p.Process
}
