package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/rallyhq/rally/shared/config"
	"github.com/rallyhq/rally/shared/routes"
)

// routesTripSamples is how many warm requests each round-trip row makes;
// the row gives their median (and their range when they differ).
const routesTripSamples = 5

// routesTripRow is one read route's round-trip figure: the request to make
// for sample i, the warm-up before the samples and the floor.
type routesTripRow struct {
	name  string
	call  func(i int) routesCall
	warm  []routesCall
	floor float64
	// floorName says where the floor comes from; goal is set when the
	// floor is a stated goal (DESIGN.md, Redis).
	floorName string
	goal      bool
	// samples bounds the samples when fewer distinct requests exist.
	samples int
	note    string
}

func benchRoundTrips(ctx context.Context, env *Env) (Section, error) {
	sec := Section{
		Title: "Redis round trips per read route",
		Intro: "One warm request at a time through the local stack (gateway, authorizer, handler) over redis-server, counting the Redis round trips the route's handler makes " +
			"(a command, a pipeline or a transaction is one) with a go-redis hook; budget checks (one GCRA script per budget) and connection handshakes are counted apart, " +
			"and so is the cache-generation check each function makes at most once a second (set to once an hour here). " +
			"A player's first request to a function instance also records when Rally first saw them (two round trips, then none): every player here has made one before. " +
			fmt.Sprintf("Each row is the median of %d warm requests (after a first one that loads scripts and fills what a cold cache reads through). ", routesTripSamples) +
			"The floor is the minimum the design states (DESIGN.md, Redis: favorites status for up to 100 games in one, rank + K in one, top-N in at most one and none from the in-process cache, friends rank in at most two); ratio = value / floor. " +
			"Round trips do not depend on the board's size: boards here hold 200 players.",
	}
	st, err := routesStart(ctx, env, "bench-rt", 10, func(c *config.Config) { c.CacheCheckEvery = time.Hour })
	if err != nil {
		return sec, err
	}
	defer st.Close()
	if err := routesSeedReads(ctx, st, "rt"); err != nil {
		return sec, err
	}

	status := routesCall{Route: routes.FavoriteStatus, Sub: "rt-fan", Path: "/v1/favorites/status?game_ids=" + strings.Join(routesGames("rt", 100), ",")}
	count := routesCall{Route: routes.CountFavorites, Sub: "rt-reader", Path: "/v1/games/rt-g000/favorites/count"}
	likes := routesCall{Route: routes.CountLikes, Sub: "rt-reader", Path: "/v1/posts/rt-post/likes/count"}
	list := routesCall{Route: routes.ListFavorites, Sub: "rt-fan", Path: "/v1/users/rt-fan/favorites?limit=50"}
	trending := func(window string) routesCall {
		return routesCall{Route: routes.TopGames, Sub: "rt-reader", Path: "/v1/games/top?limit=100&window=" + window}
	}
	top := func(n int) routesCall {
		return routesCall{Route: routes.LeaderboardTop, Sub: "rt-reader", Path: fmt.Sprintf("/v1/leaderboards/rt-board/top?n=%d", n)}
	}
	page := func(from int) routesCall {
		return routesCall{Route: routes.LeaderboardTop, Sub: "rt-reader", Path: fmt.Sprintf("/v1/leaderboards/rt-board/top?n=10&from_rank=%d", from)}
	}
	rank := func(p int) routesCall {
		return routesCall{Route: routes.PlayerRank, Sub: "rt-reader", Path: fmt.Sprintf("/v1/leaderboards/rt-board/players/%s/rank?k=4", routesPlayer("rt", p))}
	}
	friends := func(p, k int) routesCall {
		return routesCall{Route: routes.FriendsRank, Sub: routesPlayer("rt", p), Path: fmt.Sprintf("/v1/leaderboards/rt-board/players/%s/friends-rank?k=%d", routesPlayer("rt", p), k)}
	}
	// Each player's first request records when Rally first saw them
	// (young accounts); the friends-rank players have made one before.
	var friendsWarm []routesCall
	for p := range routesTripSamples {
		friendsWarm = append(friendsWarm, friends(p, 3))
	}
	streak := routesCall{Route: routes.GetStreak, Sub: routesActor("rt", 0), Path: "/v1/users/" + routesActor("rt", 0) + "/streak"}
	streaksTop := func(n int) routesCall {
		return routesCall{Route: routes.StreaksTop, Sub: "rt-reader", Path: fmt.Sprintf("/v1/streaks/top?n=%d", n)}
	}
	same := func(c routesCall) func(int) routesCall { return func(int) routesCall { return c } }
	stated := "stated"
	rows := []routesTripRow{
		{name: "favorite status, 100 game ids (cache hit)", call: same(status), warm: []routesCall{status}, floor: 1, floorName: stated, goal: true},
		{name: "favorite count (cache hit)", call: same(count), warm: []routesCall{count}, floor: 1, floorName: stated + ": a count is one read", goal: true},
		{name: "like count (cache hit)", call: same(likes), warm: []routesCall{likes}, floor: 1, floorName: stated + ": a count is one read", goal: true},
		{name: "top games (trending), 7d window, computed", call: same(trending("7d")), warm: []routesCall{trending("24h")}, samples: 1, floor: 1, floorName: stated + ": top-N", goal: true,
			note: "a script first refreshes the window's board from its daily buckets, then a pipeline reads it (24h works the same from hourly buckets)"},
		{name: "top games (trending), all time, computed", call: same(trending("all")), samples: 1, floor: 1, floorName: stated + ": top-N", goal: true},
		{name: "top games (trending), from the in-process cache", call: same(trending("24h")), warm: []routesCall{trending("24h")}, floor: 0, floorName: stated + ": top-N cached", goal: true},
		{name: "favorites list, 50 items", call: same(list), warm: []routesCall{list}, floor: 0, floorName: "none: the list is DynamoDB's"},
		{name: "leaderboard top 10, uncached", call: func(i int) routesCall { return top(11 + i) }, warm: []routesCall{top(10)}, floor: 1, floorName: stated + ": top-N", goal: true},
		{name: "leaderboard top 10, from the in-process cache", call: same(top(10)), warm: []routesCall{top(10)}, floor: 0, floorName: stated + ": top-N cached", goal: true,
			note: "within the 250 ms the in-process cache keeps a read"},
		{name: "leaderboard page of 10 from rank 101+, uncached", call: func(i int) routesCall { return page(101 + i) }, warm: []routesCall{page(100)}, floor: 1, floorName: stated + ": top-N", goal: true,
			note: "one script: the page's range, and under shared ties the count of scores better than its first"},
		{name: "player rank + 4 neighbours, uncached", call: func(i int) routesCall { return rank(20 + i) }, warm: []routesCall{rank(10)}, floor: 1, floorName: stated, goal: true},
		{name: "friends rank + 4, 4 friends", call: func(i int) routesCall { return friends(i, 4) }, warm: friendsWarm, floor: 2, floorName: stated + ": at most two", goal: true},
		{name: "streak get", call: same(streak), warm: []routesCall{streak}, floor: 1, floorName: "one read of the cached streak"},
		{name: "streaks top 10, uncached", call: func(i int) routesCall { return streaksTop(11 + i) }, warm: []routesCall{streaksTop(10)}, floor: 1, floorName: "one sorted-set range",
			note: "broken streaks' deadlines are swept before the board is read"},
	}
	for _, r := range rows {
		for _, c := range r.warm {
			if _, err := st.do(ctx, c); err != nil {
				return sec, fmt.Errorf("%s: warm-up: %w", r.name, err)
			}
		}
		n := routesTripSamples
		if r.samples > 0 {
			n = r.samples
		}
		var got []float64
		for i := range n {
			t, err := st.roundTrips(ctx, r.call(i))
			if err != nil {
				return sec, fmt.Errorf("%s: %w", r.name, err)
			}
			got = append(got, float64(t))
		}
		row := Row{Name: r.name + " — " + r.call(0).Route.Key(), Value: routesMedian(got), Floor: r.floor, Unit: "round trips", FloorName: r.floorName, Note: r.note}
		if slices.Min(got) != slices.Max(got) {
			row.Note = strings.TrimPrefix(row.Note+fmt.Sprintf("; %d requests: %g to %g", len(got), slices.Min(got), slices.Max(got)), "; ")
		}
		if r.goal {
			row.Goal = "≤ floor"
			row.Met = Within(row.Value, r.floor)
			if !*row.Met {
				row.Note = strings.TrimPrefix(row.Note+"; more round trips than the design states", "; ")
			}
		}
		fmt.Fprintf(os.Stderr, "bench: roundtrips: %s: %g\n", r.name, row.Value)
		sec.Rows = append(sec.Rows, row)
	}
	return sec, nil
}

// roundTrips makes c and returns the Redis round trips its handler made.
// A read served without Redis (degraded) says nothing of them: an error.
func (s *routesStack) roundTrips(ctx context.Context, c routesCall) (int64, error) {
	before := s.trips.Count(c.Route.Function)
	body, err := s.do(ctx, c)
	if err != nil {
		return 0, err
	}
	if bytes.Contains(body, []byte(`"degraded":true`)) {
		return 0, fmt.Errorf("%s was served without Redis: %s", c.Path, body)
	}
	return s.trips.Count(c.Route.Function) - before, nil
}

// routesMedian is the median of v (the mean of the middle two when even).
func routesMedian(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Names of what the read sections seed, by section prefix.
func routesGame(prefix string, i int) string   { return fmt.Sprintf("%s-g%03d", prefix, i) }
func routesPlayer(prefix string, i int) string { return fmt.Sprintf("%s-p%04d", prefix, i) }
func routesActor(prefix string, i int) string  { return fmt.Sprintf("%s-a%04d", prefix, i) }

func routesGames(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = routesGame(prefix, i)
	}
	return out
}

// routesSeedPlayers is how many players the seeded board holds.
const routesSeedPlayers = 200

// routesSeedReads gives the read routes something to read, through the
// routes themselves: <prefix>-fan favorites every other one of 100 games
// (half of them described), likes on <prefix>-post, a board
// <prefix>-board of 200 players where each of the first ten has four
// friends, and ten players' activity. It returns once the processors have
// applied it all and Redis is trusted.
func routesSeedReads(ctx context.Context, st *routesStack, prefix string) error {
	if err := st.awaitTrusted(ctx); err != nil {
		return err
	}
	var calls []routesCall
	for i := 0; i < 100; i += 2 {
		g := routesGame(prefix, i)
		calls = append(calls, routesCall{Route: routes.FavoriteGame, Sub: prefix + "-fan", Path: "/v1/favorites/" + g})
		if i%4 == 0 {
			calls = append(calls, routesCall{Route: routes.PutGame, Path: "/v1/games/" + g, Body: fmt.Sprintf(`{"title":"Game %d","thumbnail_url":"https://example.com/%d.png"}`, i, i)})
		}
	}
	for i := range 20 {
		calls = append(calls, routesCall{Route: routes.LikePost, Sub: fmt.Sprintf("%s-liker%02d", prefix, i), Path: "/v1/posts/" + prefix + "-post/like"})
	}
	board := "/v1/leaderboards/" + prefix + "-board"
	calls = append(calls, routesCall{Route: routes.PutLeaderboard, Path: board, Body: `{"title":"Bench","policy":"best","order":"desc","reset":"none","tie_break":"earliest","status":"ACTIVE","max_n":100,"timezone":"UTC"}`})
	for i := range routesSeedPlayers {
		calls = append(calls, routesCall{Route: routes.SubmitScore, Path: board + "/scores",
			Body: fmt.Sprintf(`{"player_id":%q,"match_id":"seed","score":%d}`, routesPlayer(prefix, i), (i*7919)%100000)})
	}
	for i := range 10 {
		friends, _ := json.Marshal([]string{routesPlayer(prefix, 100+i), routesPlayer(prefix, 120+i), routesPlayer(prefix, 140+i), routesPlayer(prefix, 160+i)})
		calls = append(calls, routesCall{Route: routes.PutFriends, Path: "/v1/players/" + routesPlayer(prefix, i) + "/friends", Body: fmt.Sprintf(`{"friend_ids":%s}`, friends)})
	}
	for i := range 10 {
		calls = append(calls, routesActivity(prefix, i))
	}
	for _, c := range calls {
		if _, err := st.do(ctx, c); err != nil {
			return fmt.Errorf("seed: %w", err)
		}
	}
	if err := st.WaitIdle(ctx); err != nil {
		return err
	}
	return st.awaitTrusted(ctx)
}

// routesActivity is player <prefix>-a<i>'s daily open, with an
// Idempotency-Key of its own.
func routesActivity(prefix string, i int) routesCall {
	return routesCall{Route: routes.RecordActivity, Sub: routesActor(prefix, i), Path: "/v1/activity",
		Body:    `{"event_type":"DAILY_OPEN","source":"mobile_app","timezone":"UTC"}`,
		Headers: map[string]string{"Idempotency-Key": fmt.Sprintf("%s-open-%d", prefix, i)}}
}

// awaitTrusted waits until the health report says Redis is trusted: every
// processor has built its cache and marked it current.
func (s *routesStack) awaitTrusted(ctx context.Context) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		body, err := s.do(ctx, routesCall{Route: routes.OpsHealth, Path: "/v1/ops/health"})
		if err != nil {
			return err
		}
		var h struct {
			Redis struct{ Trusted bool } `json:"redis"`
		}
		if err := json.Unmarshal(body, &h); err != nil {
			return err
		}
		if h.Redis.Trusted {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis is still not trusted after a minute: %s", body)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
