package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/rallyhq/rally/infra/cost"
	"github.com/rallyhq/rally/shared/config"
	"github.com/rallyhq/rally/shared/routes"
)

// routesCapacityRequests is how many requests of each route the capacity
// section averages over, after as many warm-up ones.
const routesCapacityRequests = 20

// routesCapacityRoute is one route of the capacity section and the least
// capacity its work can take: the item operations it must make.
type routesCapacityRoute struct {
	load     routesLoad
	rcu, wcu float64
	floor    string
	// capped writes are held to routesCapacityGoal times their floor.
	capped bool
}

// routesCapacityGoal is how far above its floor a write route's capacity
// may be.
const routesCapacityGoal = 1.5

// routesProcessorShare is what a processor consumes per write of a route:
// the writes, the processor, the least it must do per write.
type routesProcessorShare struct {
	writes    routesLoad
	processor routes.Processor
	rcu, wcu  float64
	floor     string
}

func benchCapacity(ctx context.Context, env *Env) (Section, error) {
	sec := Section{
		Title: "DynamoDB consumed capacity per route",
		Intro: "Every DynamoDB call the handlers and processors make asks for ReturnConsumedCapacity=INDEXES (the total, and the indexes' part of it) through an aws-sdk-go-v2 middleware on the stack's clients, and the capacity the outputs report is summed per function, " +
			fmt.Sprintf("over %d requests of each route through the local stack after as many warm-up ones (new writes; for a read, the warm-up's requests again), spread over %d players. ", routesCapacityRequests, routesPool) +
			"Transactions: DynamoDB charges two units per item in a transaction (per KB), its indexes' writes included, but DynamoDB Local reports a transaction per table as if of one item (two small items on one table: 2 WCU, where DynamoDB bills 4), so the meter prices each TransactWriteItems by DynamoDB's rules from its items' images read just before and after it: two units per KB of the larger image, a ConditionCheck as a write of the item it checks, and each index write the change makes (entering, leaving, a changed key: both, a changed projected attribute) two per KB of the projection (infra/bench routes_txprice.go, TestTransactionsAreMeteredAsBilled). " +
			"Writes refused by their condition report no capacity (DynamoDB bills them): the note counts them. " +
			"The floor is the capacity of the item writes the route's features cannot avoid (1 WCU per item write of ≤ 1 KB, 0.5 RCU per eventually consistent read of ≤ 4 KB, 0 for a read Redis serves): the items themselves, and each index entry a feature reads instead of scanning a table — a favorite's place in the newest-first list, a reaction's entry under its target (a count is checked and rebuilt from its target's edges), a score's place in its board's order (ranks when Redis cannot serve them) and under its player (an erasure finds it), a streak's place in the streak order; a like is in no list, and an Idempotency-Key needs no item of its own where the item it guards can keep it. Not in the floor: a transaction's second unit per item (DynamoDB bills each item of a transaction twice; conditional writes in order can keep the same guarantee), and an index entry no read uses. The note gives the part the indexes took. Ratio = value / floor; the write routes' goal is 1.5× their floor." +
			"The processors' rows are the capacity a processor consumed applying the writes of a route, divided by the writes. " +
			"Periodic work is no request's: the cache-generation check (once a second per function) and the processors' top-N snapshots (every 10 s) are set to once an hour for this section, and the processors' scheduled ticks are left out of the meter.",
	}
	// Periodic work is not a request's: the cache-generation check (once
	// a second per function) and the processors' top-N snapshots (every
	// 10 s) wait an hour here.
	st, err := routesStart(ctx, env, "bench-cap", 12, func(c *config.Config) {
		c.CacheCheckEvery, c.SnapshotEvery = time.Hour, time.Hour
	})
	if err != nil {
		return sec, err
	}
	defer st.Close()
	st.priceTransactions()
	// The latency section's loads name their games, players and boards
	// "lat-"; their seed is the same.
	if err := routesSeedReads(ctx, st, "lat"); err != nil {
		return sec, err
	}
	if err := st.warmPlayers(ctx); err != nil {
		return sec, err
	}
	rows := routesCapacityRoutes()
	next := map[string]int{}
	for _, r := range rows {
		used, n, err := st.consumed(ctx, r.load, &next)
		if err != nil {
			return sec, err
		}
		rows := routesCapacityRows(r.load.name+" — "+r.load.call(0).Route.Key(), "per request", used, n, r.rcu, r.wcu, r.floor)
		if w := &rows[len(rows)-1]; r.capped {
			met := w.Ratio() <= routesCapacityGoal
			w.Goal, w.Met = fmt.Sprintf("≤ %.1f×", routesCapacityGoal), &met
		}
		sec.Rows = append(sec.Rows, rows...)
		fmt.Fprintf(os.Stderr, "bench: capacity: %s: %.2f RCU, %.2f WCU per request (%s)\n", r.load.name, used.RCU/float64(n), used.WCU/float64(n), routesPerRequest(used, n))
	}

	shares := routesProcessorShares()
	for _, sh := range shares {
		if err := st.WaitIdle(ctx); err != nil {
			return sec, err
		}
		before := st.meter.Of(sh.processor.Function)
		_, n, err := st.consumed(ctx, sh.writes, &next)
		if err != nil {
			return sec, err
		}
		if err := st.WaitIdle(ctx); err != nil {
			return sec, err
		}
		used := st.meter.Of(sh.processor.Function).Minus(before)
		// The warm-up's writes are applied too: the share is per write.
		n *= 2
		name := fmt.Sprintf("%s applying %s", sh.processor.Function, sh.writes.call(0).Route.Key())
		sec.Rows = append(sec.Rows, routesCapacityRows(name, "per write", used, n, sh.rcu, sh.wcu, sh.floor)...)
		fmt.Fprintf(os.Stderr, "bench: capacity: %s: %.2f RCU, %.2f WCU per write (%s)\n", name, used.RCU/float64(n), used.WCU/float64(n), routesPerRequest(used, n))
	}
	return sec, nil
}

// consumed makes the warm-up and measured requests of l, one at a time,
// and returns what l's function consumed in the measured ones and how many
// there were: a write's measured requests are new ones, a read's are the
// warm-up's again (what a cache serves). next keeps each load's next request, so a load measured
// again goes on with new games and players.
func (s *routesStack) consumed(ctx context.Context, l routesLoad, next *map[string]int) (routesUsage, int, error) {
	warm, measured := routesCapacityCalls(l, next, routesCapacityRequests)
	if _, err := s.load(ctx, warm, routesPhase{Concurrency: 1}); err != nil {
		return routesUsage{}, 0, fmt.Errorf("%s: %w", l.name, err)
	}
	fn := measured[0].Route.Function
	before := s.meter.Of(fn)
	if _, err := s.load(ctx, measured, routesPhase{Concurrency: 1}); err != nil {
		return routesUsage{}, 0, fmt.Errorf("%s: %w", l.name, err)
	}
	return s.meter.Of(fn).Minus(before), len(measured), nil
}

// routesCapacityCalls are n warm-up requests of l and n measured ones: a
// write's measured requests are new ones, a read's are the warm-up's
// again (what a cache serves). next keeps each load's next request.
func routesCapacityCalls(l routesLoad, next *map[string]int, n int) (warm, measured []routesCall) {
	calls := make([]routesCall, 2*n)
	for i := range calls {
		calls[i] = l.call((*next)[l.name])
		(*next)[l.name]++
	}
	if calls[0].Route.Method == "GET" {
		// A read is measured warm: the same requests again.
		copy(calls[n:], calls[:n])
	}
	return calls[:n], calls[n:]
}

// routesCapacityRoutes are the routes the capacity section measures, with
// the least capacity each one's work can take (the cost section prices
// the same routes at the same floors).
func routesCapacityRoutes() []routesCapacityRoute {
	loads := map[string]routesLoad{}
	for _, l := range routesLatencyLoads() {
		loads[l.name] = l
	}
	list := routesLoad{"favorites list, 50 items", func(i int) routesCall {
		return routesCall{Route: routes.ListFavorites, Sub: "lat-fan", Path: "/v1/users/lat-fan/favorites?limit=50"}
	}}
	like := routesLoad{cost.Like, func(i int) routesCall {
		return routesCall{Route: routes.LikePost, Sub: routesUser(i), Path: fmt.Sprintf("/v1/posts/lat-l%05d/like", i)}
	}}
	return []routesCapacityRoute{
		{load: loads["favorite"], wcu: 3, capped: true, floor: "the edge, its place in the player's newest-first list and its entry under the game: one item write and two index entries"},
		{load: loads["unfavorite"], wcu: 3, capped: true, floor: "the edge, and its leaving the newest-first list and the game's entries: one item write and two index entries"},
		{load: loads["favorite status, 100 ids"], floor: "none: Redis serves it"},
		{load: loads["favorite count"], floor: "none: Redis serves it"},
		{load: list, rcu: 0.5 + 25*0.5, floor: "one eventually consistent Query of 50 small edges (≤ 4 KB) and one read of each of the 25 described games"},
		{load: like, wcu: 2, capped: true, floor: "the edge and its entry under the post (a like is in no list): one item write and one index entry"},
		{load: loads["like toggle"], wcu: 2, capped: true, floor: "the edge (which keeps the flip's Idempotency-Key) and its entry under the post: one item write and one index entry"},
		{load: loads["submit score (service)"], wcu: 5, capped: true, floor: "the match (a repeated match_id is not applied twice), the player's first score on the board with its place in the board's order and its entry under the player, and the period's member count: three item writes and two index entries"},
		{load: loads["leaderboard top 10"], floor: "none: Redis serves it"},
		{load: loads["player rank + 4"], floor: "none: Redis serves it"},
		{load: loads["record activity"], wcu: 4, capped: true, floor: "the event (which can keep its Idempotency-Key), the day's totals, the player's streak and points, and its place in the streak order: three item writes and one index entry"},
		{load: loads["get streak"], floor: "none: Redis serves it"},
	}
}

// routesProcessorShares are the processors' work the capacity section
// measures per write, with their floors.
func routesProcessorShares() []routesProcessorShare {
	loads := map[string]routesLoad{}
	for _, l := range routesLatencyLoads() {
		loads[l.name] = l
	}
	return []routesProcessorShare{
		{writes: loads["favorite"], processor: routes.CounterProcessor, wcu: 1, floor: "the game's count: one item write"},
		{writes: loads["submit score (service)"], processor: routes.LeaderboardProcessor, floor: "none: the board is Redis's"},
		{writes: loads["record activity"], processor: routes.StreakProcessor, floor: "none: the live-streak board is Redis's"},
	}
}

// routesCapacityRows are a route's (or a processor's) read and write
// capacity per request beside their floors: the write row only when it
// writes or must, the read row of a write only when it reads.
func routesCapacityRows(name, per string, used routesUsage, n int, rcu, wcu float64, floor string) []Row {
	calls := per + ": " + routesPerRequest(used, n)
	if used.Failed > 0 {
		calls += fmt.Sprintf("; %.3g refused by a condition (billed by DynamoDB, not counted)", float64(used.Failed)/float64(n))
	}
	index := func(units float64) string {
		if units == 0 {
			return calls
		}
		return calls + fmt.Sprintf("; %.3g of the units on secondary indexes", units/float64(n))
	}
	var rows []Row
	writes := used.WCU > 0 || wcu > 0
	if !writes || used.RCU > 0 || rcu > 0 {
		rows = append(rows, Row{Name: name + ", read", Value: used.RCU / float64(n), Floor: rcu, Unit: "RCU", FloorName: routesFloorOrNone(rcu, floor), Note: index(used.IndexRCU)})
	}
	if writes {
		rows = append(rows, Row{Name: name + ", write", Value: used.WCU / float64(n), Floor: wcu, Unit: "WCU", FloorName: routesFloorOrNone(wcu, floor), Note: index(used.IndexWCU)})
	}
	return rows
}

// routesFloorOrNone names a floor of zero "none" whatever the route's floor
// says of its other unit.
func routesFloorOrNone(v float64, floor string) string {
	if v == 0 && !strings.HasPrefix(floor, "none") {
		return "none"
	}
	return floor
}
