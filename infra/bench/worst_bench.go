package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/rallyhq/rally/shared/config"
	"github.com/rallyhq/rally/shared/leaderboards"
	"github.com/rallyhq/rally/shared/leaderboards/dynamo"
	"github.com/rallyhq/rally/shared/players"
	"github.com/rallyhq/rally/shared/routes"
)

// The worst-case section builds each read route's worst case on the local
// stack and measures the DynamoDB reads it costs beside a typical request.
const (
	worstBoards  = 1_000 // boards defined, ten per game
	worstMembers = 5_000 // players on the big board
	worstFavs    = 100   // games one player favorites
)

// worstCase is one measured request: what it is, and the call.
type worstCase struct {
	what string
	call routesCall
	// degraded is true for a read served without Redis: Redis is emptied
	// before it, and the answer must say it was degraded.
	degraded bool
	// warm is the request that warms the function first (call when
	// empty): for a read without Redis, another one, which the handler's
	// hot cache of reads does not answer the measured one with.
	warm string
}

// worstRoute is a route's typical and worst request, and the bound the
// code keeps its reads within.
type worstRoute struct {
	route          routes.Route
	typical, worst worstCase
	bound          string
}

func benchWorst(ctx context.Context, env *Env) (Section, error) {
	sec := Section{
		Title: "Worst case per route",
		Intro: "Each read route's worst case, built on the local stack (its own DynamoDB Local and Redis database) and measured beside a typical request: the DynamoDB read capacity the route's function consumed (ReturnConsumedCapacity through the capacity section's meter) and its calls. " +
			fmt.Sprintf("The stack holds %d boards (%d games of ten, statuses mixed), a board of %d players (scores in a crowd, many tied), one player with %d favorites and %d friends. ", worstBoards, worstBoards/10, worstMembers, worstFavs, players.MaxFriends) +
			"A read marked without Redis is measured with Redis emptied just before it (the board missing from Redis: the route reads DynamoDB and answers `degraded`), the way an outage or a lost board serves it. " +
			"The bound is what the code holds the route to whatever the data: the worst case is built to reach it. Ranks without Redis are estimated from a board of 1,000 members on (`RALLY_RANK_ESTIMATE_FROM`, 10,000 by default) so a 5,000-player board reaches the estimate.",
	}
	st, err := routesStart(ctx, env, "bench-worst", 15, func(c *config.Config) {
		c.CacheCheckEvery, c.SnapshotEvery = time.Hour, time.Hour
		c.RankEstimateFrom = 1_000
	})
	if err != nil {
		return sec, err
	}
	defer st.Close()
	st.priceTransactions()
	start := time.Now()
	if err := worstSeed(ctx, st); err != nil {
		return sec, err
	}
	fmt.Fprintf(os.Stderr, "bench: worst: seeded in %s\n", time.Since(start).Round(time.Second))

	var b strings.Builder
	b.WriteString("| route | typical request | reads | worst case built | reads | bound |\n|---|---|---:|---|---:|---|\n")
	for _, r := range worstRoutes() {
		typ, err := st.worstReads(ctx, r.typical)
		if err != nil {
			return sec, err
		}
		worst, err := st.worstReads(ctx, r.worst)
		if err != nil {
			return sec, err
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", r.route.Key(), r.typical.what, worstCell(typ), r.worst.what, worstCell(worst), r.bound)
		fmt.Fprintf(os.Stderr, "bench: worst: %s: %.1f RCU typical, %.1f RCU worst\n", r.route.Key(), typ.RCU, worst.RCU)
	}
	sec.Body = b.String()
	return sec, nil
}

func worstCell(u routesUsage) string {
	if len(u.Calls) == 0 {
		return "0 RCU (no DynamoDB call)"
	}
	return fmt.Sprintf("%s RCU (%s)", trimFloat(u.RCU), u)
}

func trimFloat(v float64) string {
	return strings.TrimSuffix(strings.TrimSuffix(fmt.Sprintf("%.1f", v), "0"), ".")
}

// worstReads sends c once warm (a first request of it apart), and
// returns what its function read.
func (s *routesStack) worstReads(ctx context.Context, c worstCase) (routesUsage, error) {
	warm := c.call
	if c.warm != "" {
		warm.Path = c.warm
	}
	if _, err := s.do(ctx, warm); err != nil {
		return routesUsage{}, fmt.Errorf("%s: %w", c.what, err)
	}
	fn := c.call.Route.Function
	for attempt := 0; ; attempt++ {
		if c.degraded {
			if err := s.Deps().Redis.FlushDB(ctx).Err(); err != nil {
				return routesUsage{}, err
			}
		}
		before := s.meter.Of(fn)
		out, err := s.do(ctx, c.call)
		if err != nil {
			return routesUsage{}, fmt.Errorf("%s: %w", c.what, err)
		}
		used := s.meter.Of(fn).Minus(before)
		if !c.degraded || bytes.Contains(out, []byte(`"degraded":true`)) {
			return used, nil
		}
		if attempt == 3 {
			return routesUsage{}, fmt.Errorf("%s: served from Redis though Redis was emptied: %s", c.what, out)
		}
	}
}

// worstRoutes are the read routes and their cases.
func worstRoutes() []worstRoute {
	fan, big := "worst-fan", "worst-big"
	deep := worstMembers * 4 / 5
	top := func(from, n int) string {
		return fmt.Sprintf("/v1/leaderboards/%s/top?n=%d&from_rank=%d", big, n, from)
	}
	rank := func(i, k int) string {
		return fmt.Sprintf("/v1/leaderboards/%s/players/%s/rank?k=%d", big, worstPlayer(i), k)
	}
	friendsOf := func(i, k int) string {
		return fmt.Sprintf("/v1/leaderboards/%s/players/%s/friends-rank?k=%d", big, worstPlayer(i), k)
	}
	return []worstRoute{
		{
			route:   routes.ListLeaderboards,
			typical: worstCase{what: "one game's 10 boards", call: routesCall{Route: routes.ListLeaderboards, Sub: fan, Path: "/v1/leaderboards?game=worst-g007"}},
			worst:   worstCase{what: fmt.Sprintf("a full page of 100 of %d boards by status", worstBoards), call: routesCall{Route: routes.ListLeaderboards, Sub: fan, Path: "/v1/leaderboards?status=ACTIVE&limit=100"}},
			bound:   "limit + 1 boards (an index Query; none for a game with no board)",
		},
		{
			route:   routes.LeaderboardTop,
			typical: worstCase{what: "top 10 without Redis", degraded: true, warm: top(2, 10), call: routesCall{Route: routes.LeaderboardTop, Sub: fan, Path: top(1, 10)}},
			worst: worstCase{what: fmt.Sprintf("100 from rank %d of %d without Redis", deep, worstMembers), degraded: true, warm: top(deep+1, 100),
				call: routesCall{Route: routes.LeaderboardTop, Sub: fan, Path: top(deep, 100)}},
			bound: fmt.Sprintf("8 × (%d + n) index keys and the histogram (≤ 96 items); down to rank 1,000, 8 × (from_rank − 1 + n) keys", dynamo.SeekWithin),
		},
		{
			route: routes.PlayerRank,
			typical: worstCase{what: "the first player, k=4, without Redis", degraded: true, warm: rank(2, 4),
				call: routesCall{Route: routes.PlayerRank, Sub: fan, Path: fmt.Sprintf("/v1/leaderboards/%s/players/%s/rank?k=4", big, worstPlayer(0))}},
			worst: worstCase{what: fmt.Sprintf("a player deep in %d, k=%d, without Redis", worstMembers, leaderboards.MaxK), degraded: true, warm: rank(worstMembers-8, leaderboards.MaxK),
				call: routesCall{Route: routes.PlayerRank, Sub: fan, Path: fmt.Sprintf("/v1/leaderboards/%s/players/%s/rank?k=%d", big, worstPlayer(worstMembers-7), leaderboards.MaxK)}},
			bound: "the score, the member count, the histogram and 2k + 1 index keys per shard (the rank counted down to rank 1,000)",
		},
		{
			route: routes.FriendsRank,
			typical: worstCase{what: "5 friends, k=4, without Redis", degraded: true, warm: friendsOf(1, 3),
				call: routesCall{Route: routes.FriendsRank, Sub: worstPlayer(1), Path: friendsOf(1, 4)}},
			worst: worstCase{what: fmt.Sprintf("%d friends, k=%d, without Redis", players.MaxFriends, leaderboards.MaxK), degraded: true, warm: friendsOf(0, leaderboards.MaxK-1),
				call: routesCall{Route: routes.FriendsRank, Sub: worstPlayer(0), Path: friendsOf(0, leaderboards.MaxK)}},
			bound: fmt.Sprintf("the friend list and one score per friend (≤ %d)", players.MaxFriends),
		},
		{
			route:   routes.ListFavorites,
			typical: worstCase{what: "20 favorites", call: routesCall{Route: routes.ListFavorites, Sub: fan, Path: "/v1/users/" + fan + "/favorites?limit=20"}},
			worst:   worstCase{what: fmt.Sprintf("a page of 100 of %d favorites", worstFavs), call: routesCall{Route: routes.ListFavorites, Sub: fan, Path: "/v1/users/" + fan + "/favorites?limit=100"}},
			bound:   "limit edges (a Query) and one read of each listed game",
		},
	}
}

func worstPlayer(i int) string { return fmt.Sprintf("worst-p%05d", i) }

// worstSeed defines the boards, plays the big board, and gives the first
// players their friends and the fan their favorites, through the API.
func worstSeed(ctx context.Context, st *routesStack) error {
	statuses := []leaderboards.Status{leaderboards.Active, leaderboards.Active, leaderboards.Frozen, leaderboards.Archived}
	var calls []routesCall
	for i := range worstBoards {
		body, _ := json.Marshal(map[string]any{
			"title": "b", "policy": "best", "order": "desc", "reset": "none", "tie_break": "earliest", "max_n": 100, "timezone": "UTC",
			"scope": map[string]any{"game": fmt.Sprintf("worst-g%03d", i/10)}, "status": statuses[i%len(statuses)],
		})
		calls = append(calls, routesCall{Route: routes.PutLeaderboard, Path: fmt.Sprintf("/v1/leaderboards/worst-b%04d", i), Body: string(body)})
	}
	body, _ := json.Marshal(map[string]any{"title": "big", "policy": "best", "order": "desc", "reset": "none", "tie_break": "earliest", "max_n": 1000, "timezone": "UTC"})
	calls = append(calls, routesCall{Route: routes.PutLeaderboard, Path: "/v1/leaderboards/worst-big", Body: string(body)})
	if err := st.worstAll(ctx, calls); err != nil {
		return err
	}
	calls = calls[:0]
	at := time.Now().UTC().Add(-time.Hour)
	for i := range worstMembers {
		// A crowd of scores, a tenth of them tied at the top of it.
		score := 4000 + (i*7919)%3000
		if i%10 == 0 {
			score = 6000
		}
		body, _ := json.Marshal(map[string]any{"player_id": worstPlayer(i), "match_id": "m1", "score": score, "occurred_at": at.Format(time.RFC3339)})
		calls = append(calls, routesCall{Route: routes.SubmitScore, Path: "/v1/leaderboards/worst-big/scores", Body: string(body)})
	}
	for i := range worstFavs {
		calls = append(calls, routesCall{Route: routes.FavoriteGame, Sub: "worst-fan", Path: fmt.Sprintf("/v1/favorites/worst-g%03d", i)})
	}
	if err := st.worstAll(ctx, calls); err != nil {
		return err
	}
	friends := make([]string, players.MaxFriends)
	for i := range friends {
		friends[i] = worstPlayer(1 + i*(worstMembers-1)/players.MaxFriends)
	}
	for _, f := range []struct {
		player string
		list   []string
	}{{worstPlayer(0), friends}, {worstPlayer(1), friends[:5]}} {
		body, _ := json.Marshal(map[string]any{"friend_ids": f.list})
		if _, err := st.do(ctx, routesCall{Route: routes.PutFriends, Path: "/v1/players/" + f.player + "/friends", Body: string(body)}); err != nil {
			return err
		}
	}
	return st.WaitIdle(ctx)
}

// worstAll sends calls at concurrency 16 and fails on the first error.
func (s *routesStack) worstAll(ctx context.Context, calls []routesCall) error {
	work := make(chan routesCall)
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for range 16 {
		wg.Go(func() {
			for c := range work {
				if _, err := s.do(ctx, c); err != nil {
					once.Do(func() { first = err; cancel() })
				}
			}
		})
	}
	for _, c := range calls {
		select {
		case work <- c:
		case <-ctx.Done():
		}
	}
	close(work)
	wg.Wait()
	return first
}
