package app

import (
	"github.com/rallyhq/rally/shared/api"
	"github.com/rallyhq/rally/shared/leaderboards"
	"github.com/rallyhq/rally/shared/leaderboards/dynamo"
	"github.com/rallyhq/rally/shared/leaderboards/mirror"
	"github.com/rallyhq/rally/shared/players"
	"github.com/rallyhq/rally/shared/routes"
)

// bindLeaderboards binds the leaderboard and player routes and the
// leaderboard processor.
func bindLeaderboards(d *Deps) {
	defs, scores, people := d.boardDefinitions(), d.scores(), d.players()
	gen := d.tracker(mirror.Scope)
	m := mirror.New(d.Redis, gen)
	svc := leaderboards.NewService(defs, scores, people, m, d.Clock, d.Log)
	h := &leaderboards.API{Service: svc}
	for fn, e := range map[string]api.Endpoint{
		routes.PutLeaderboard.Function: h.PutLeaderboard,
		routes.GetLeaderboard.Function: h.GetLeaderboard,
		routes.SubmitScore.Function:    h.SubmitScore,
		routes.LeaderboardTop.Function: h.LeaderboardTop,
		routes.PlayerRank.Function:     h.PlayerRank,
		routes.FriendsRank.Function:    h.FriendsRank,
	} {
		d.http[fn] = e
	}
	ph := &players.API{Store: d.players(), Clock: d.Clock}
	d.http[routes.PutFriends.Function] = ph.PutFriends
	d.http[routes.PutProfile.Function] = ph.PutProfile
	p := &leaderboards.Processor{
		Decode: dynamo.ScoreFromRecord, Defs: defs, Scores: scores, Sync: m, Gen: gen,
		Clock: d.Clock, Log: d.Log, Metrics: d.Metrics,
	}
	d.handlers[routes.LeaderboardProcessor.Function] = p.Process
}
