package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/rallyhq/rally/shared/routes"
)

// The throughput section's run: concurrency, how long, and the warm-up.
const (
	routesMixConcurrency = 32
	routesMixFor         = 20 * time.Second
	routesMixFloorFor    = 10 * time.Second
	routesMixWarm        = 200
)

// routesMix is the mixed workload, one slot per request in turn: 16 reads
// (favorite status of 100 ids, a favorite count, a leaderboard's top 10, a
// player's rank + 4, four each) and 4 writes (a favorite and its removal,
// a score, an activity) of every 20.
const routesMixSlots = 20

// routesMixRead reports whether the i-th request of the mix is a read.
func routesMixRead(i int) bool { return i%routesMixSlots < 16 }

// routesMixCall is the mix's i-th request.
func routesMixCall(i int) routesCall {
	user := routesUser(i)
	switch slot := i % routesMixSlots; {
	case slot < 4:
		return routesCall{Route: routes.FavoriteStatus, Sub: user, Path: "/v1/favorites/status?game_ids=" + routesMixStatusIDs}
	case slot < 8:
		return routesCall{Route: routes.CountFavorites, Sub: user, Path: "/v1/games/" + routesGame("lat", i%100) + "/favorites/count"}
	case slot < 12:
		return routesCall{Route: routes.LeaderboardTop, Sub: user, Path: "/v1/leaderboards/lat-board/top?n=10"}
	case slot < 16:
		return routesCall{Route: routes.PlayerRank, Sub: user, Path: fmt.Sprintf("/v1/leaderboards/lat-board/players/%s/rank?k=4", routesPlayer("lat", i%routesSeedPlayers))}
	case slot == 16:
		return routesCall{Route: routes.FavoriteGame, Sub: user, Path: fmt.Sprintf("/v1/favorites/mix-f%07d", i/routesMixSlots)}
	case slot == 17:
		return routesCall{Route: routes.SubmitScore, Path: "/v1/leaderboards/lat-board/scores",
			Body: fmt.Sprintf(`{"player_id":"mix-s%07d","match_id":"m","score":%d}`, i/routesMixSlots, (i*7919)%1000000)}
	case slot == 18:
		return routesCall{Route: routes.RecordActivity, Sub: user, Path: "/v1/activity",
			Body:    `{"event_type":"LEVEL_COMPLETED","source":"web","timezone":"UTC"}`,
			Headers: map[string]string{"Idempotency-Key": fmt.Sprintf("mix-activity-%d", i)}}
	default:
		// The favorite three slots before, by the same player, removed.
		return routesCall{Route: routes.UnfavoriteGame, Sub: routesUser(i - 3), Path: fmt.Sprintf("/v1/favorites/mix-f%07d", i/routesMixSlots)}
	}
}

// routesMixStatusIDs are the games whose status the mix reads.
var routesMixStatusIDs = strings.Join(routesGames("lat", 100), ",")

func benchThroughput(ctx context.Context, env *Env) (Section, error) {
	sec := Section{
		Title: "Throughput of a mixed workload",
		Intro: fmt.Sprintf("Requests a second the local stack serves at concurrency %d for %s (after %d warm-up requests) of a mix of 80%% reads ", routesMixConcurrency, routesMixFor, routesMixWarm) +
			"(favorite status of 100 ids, a favorite count, a leaderboard's top 10, a player's rank + 4, a fifth each) and 20% writes (a favorite and its removal, a submitted score, an activity, a quarter each), " +
			fmt.Sprintf("spread over %d players, every budget raised as in the latency section. ", routesPool) +
			fmt.Sprintf("The floor is bare calls to the stack's DynamoDB Local (the section's own) at the same concurrency for %s: GetItem for the reads and PutItem for the writes in the same proportions. ", routesMixFloorFor) +
			"Ratio = value / floor: the share of bare DynamoDB Local's request rate the whole stack (gateway, authorizers, handlers, Redis, the processors applying the writes) keeps on the same two cores.",
	}
	sec.Intro += " The machine's load average was " + routesLoadAverage() + " as the section started."
	st, err := routesStart(ctx, env, "bench-mix", 13, nil)
	if err != nil {
		return sec, err
	}
	defer st.Close()
	if err := routesSeedReads(ctx, st, "lat"); err != nil {
		return sec, err
	}
	warm := make([]routesCall, routesMixWarm)
	for i := range warm {
		warm[i] = routesMixCall(i)
	}
	if _, err := st.load(ctx, warm, routesPhase{Concurrency: routesMixConcurrency}); err != nil {
		return sec, fmt.Errorf("warm-up: %w", err)
	}
	if err := st.WaitIdle(ctx); err != nil {
		return sec, err
	}
	rate, took, err := routesRun(ctx, routesMixFor, func(ctx context.Context, i int) error {
		_, err := st.do(ctx, routesMixCall(routesMixWarm+i))
		return err
	})
	if err != nil {
		return sec, err
	}
	fmt.Fprintf(os.Stderr, "bench: throughput: stack %.0f requests/s\n", rate)

	floors, err := newRoutesFloors(ctx, st.Endpoints().DynamoDB, "bench-floor")
	if err != nil {
		return sec, err
	}
	floorCall := func(ctx context.Context, i int) error {
		if routesMixRead(i) {
			return floors.call(ctx, routesGetItem, i)
		}
		return floors.call(ctx, routesPutItem, i)
	}
	if _, _, err := routesRun(ctx, time.Second, floorCall); err != nil {
		return sec, err
	}
	floorRate, floorTook, err := routesRun(ctx, routesMixFloorFor, floorCall)
	if err != nil {
		return sec, err
	}
	fmt.Fprintf(os.Stderr, "bench: throughput: bare DynamoDB Local %.0f requests/s\n", floorRate)
	floorName := "bare DynamoDB Local GetItem 80% / PutItem 20%"
	sec.Rows = append(sec.Rows, Row{
		Name: fmt.Sprintf("mixed workload, c=%d", routesMixConcurrency), Value: rate, Floor: floorRate, Unit: "requests/s", FloorName: floorName,
		Note: fmt.Sprintf("%d requests in %s", len(took), routesMixFor),
	})
	for _, p := range []float64{50, 99} {
		sec.Rows = append(sec.Rows, Row{
			Name:  fmt.Sprintf("mixed workload, c=%d, latency p%g", routesMixConcurrency, p),
			Value: Millis(Percentile(took, p)), Floor: Millis(Percentile(floorTook, p)), Unit: "ms", FloorName: floorName,
		})
	}
	return sec, nil
}

// routesRun calls do with routesMixConcurrency workers for d and returns
// the calls completed a second and each one's latency.
func routesRun(ctx context.Context, d time.Duration, do func(ctx context.Context, i int) error) (float64, []time.Duration, error) {
	var mu sync.Mutex
	var took []time.Duration
	start := time.Now()
	err := routesWorkers(ctx, math.MaxInt32, routesMixConcurrency, 0, start.Add(d), func(ctx context.Context, i int) error {
		t := time.Now()
		err := do(ctx, i)
		el := time.Since(t)
		mu.Lock()
		took = append(took, el)
		mu.Unlock()
		return err
	})
	elapsed := time.Since(start)
	if err != nil {
		return 0, nil, err
	}
	return float64(len(took)) / elapsed.Seconds(), took, nil
}
