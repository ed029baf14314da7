package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/infra/local/stack"
	"github.com/rallyhq/rally/shared/routes"
)

// routesPhase is one concurrency of the latency section: warm-up requests,
// then measured ones: Requests, or as many past Min as For allows, which
// keeps the run short where a route is slow on a busy machine.
type routesPhase struct {
	Concurrency, Warm, Requests, Min int
	For                              time.Duration
}

// routesPhases are the latency section's concurrencies.
var routesPhases = []routesPhase{
	{Concurrency: 1, Warm: routesPool, Requests: 300, Min: 100, For: 5 * time.Second},
	{Concurrency: 32, Warm: routesPool, Requests: 2000, Min: 400, For: 8 * time.Second},
}

// routesPool is how many players the load is spread over: each has made a
// request in the warm-up.
const routesPool = 64

// routesLoad is one route of the latency section: its i-th request.
type routesLoad struct {
	name string
	call func(i int) routesCall
}

// calls are the load's next n requests, from *next on.
func (l routesLoad) calls(next *int, n int) []routesCall {
	out := make([]routesCall, n)
	for i := range out {
		out[i] = l.call(*next)
		*next++
	}
	return out
}

func routesUser(i int) string { return fmt.Sprintf("lat-u%02d", i%routesPool) }

// routesLatencyLoads are the routes measured, in order: each reads what
// the ones before wrote (unfavorite removes what favorite added, rank and
// streak read the scores and activity submitted).
func routesLatencyLoads() []routesLoad {
	status := "/v1/favorites/status?game_ids=" + strings.Join(routesGames("lat", 100), ",")
	kinds := []string{"DAILY_OPEN", "LEVEL_COMPLETED", "SOCIAL_SHARE"}
	return []routesLoad{
		{"favorite", func(i int) routesCall {
			return routesCall{Route: routes.FavoriteGame, Sub: routesUser(i), Path: fmt.Sprintf("/v1/favorites/lat-f%05d", i)}
		}},
		{"unfavorite", func(i int) routesCall {
			return routesCall{Route: routes.UnfavoriteGame, Sub: routesUser(i), Path: fmt.Sprintf("/v1/favorites/lat-f%05d", i)}
		}},
		{"favorite status, 100 ids", func(i int) routesCall {
			return routesCall{Route: routes.FavoriteStatus, Sub: routesUser(i), Path: status}
		}},
		{"favorite count", func(i int) routesCall {
			return routesCall{Route: routes.CountFavorites, Sub: routesUser(i), Path: "/v1/games/" + routesGame("lat", i%100) + "/favorites/count"}
		}},
		{"like toggle", func(i int) routesCall {
			return routesCall{Route: routes.ToggleLike, Sub: routesUser(i), Path: fmt.Sprintf("/v1/posts/lat-t%05d/like/toggle", i),
				Headers: map[string]string{"Idempotency-Key": fmt.Sprintf("lat-toggle-%d", i)}}
		}},
		{"submit score (service)", func(i int) routesCall {
			return routesCall{Route: routes.SubmitScore, Path: "/v1/leaderboards/lat-board/scores",
				Body: fmt.Sprintf(`{"player_id":"lat-s%05d","match_id":"m%d","score":%d}`, i, i, (i*7919)%1000000)}
		}},
		{"leaderboard top 10", func(i int) routesCall {
			return routesCall{Route: routes.LeaderboardTop, Sub: routesUser(i), Path: "/v1/leaderboards/lat-board/top?n=10"}
		}},
		{"player rank + 4", func(i int) routesCall {
			return routesCall{Route: routes.PlayerRank, Sub: routesUser(i), Path: fmt.Sprintf("/v1/leaderboards/lat-board/players/%s/rank?k=4", routesPlayer("lat", i%routesSeedPlayers))}
		}},
		{"record activity", func(i int) routesCall {
			return routesCall{Route: routes.RecordActivity, Sub: routesUser(i), Path: "/v1/activity",
				Body:    fmt.Sprintf(`{"event_type":%q,"source":"mobile_app","timezone":"UTC"}`, kinds[(i/routesPool)%len(kinds)]),
				Headers: map[string]string{"Idempotency-Key": fmt.Sprintf("lat-activity-%d", i)}}
		}},
		{"get streak", func(i int) routesCall {
			return routesCall{Route: routes.GetStreak, Sub: routesUser(i), Path: "/v1/users/" + routesUser(i) + "/streak"}
		}},
	}
}

func benchLatency(ctx context.Context, env *Env) (Section, error) {
	sec := Section{
		Title: "Route latency through the local stack",
		Intro: "HTTP requests to the local gateway (request validation, JWT or SigV4 authorizer, the real handler in process) over a DynamoDB Local of the section's own and redis-server, " +
			fmt.Sprintf("%d requests at concurrency 1 and %d at concurrency 32 (or as many past %d and %d as %s and %s allow: the note gives the count), each after %d warm-up requests, spread over %d players with real tokens (service routes SigV4-signed). ",
				routesPhases[0].Requests, routesPhases[1].Requests, routesPhases[0].Min, routesPhases[1].Min, routesPhases[0].For, routesPhases[1].For, routesPhases[0].Warm, routesPool) +
			fmt.Sprintf("Every budget is raised to %d a minute for the run (stack Configure), so the budget checks are made but never refuse. ", routesBudget) +
			"The floor is one bare call to that DynamoDB Local at the same concurrency, of the kind the route's heaviest call is (observed while it runs): " +
			"TransactWriteItems of 2 items for a route that makes a transaction, PutItem of one small item for other writes, GetItem for reads; ratio = value / floor. " +
			"The load generator, the gateway, the handlers, the processors applying the writes, redis-server and DynamoDB Local's JVM all share this machine's cores.",
	}
	sec.Intro += " The machine's load average was " + routesLoadAverage() + " as the section started: on a busy machine the p99s are mostly scheduling, the p50s compare better."
	st, err := routesStart(ctx, env, "bench-lat", 11, nil)
	if err != nil {
		return sec, err
	}
	defer st.Close()
	if err := routesSeedReads(ctx, st, "lat"); err != nil {
		return sec, err
	}
	floors, err := newRoutesFloors(ctx, st.Endpoints().DynamoDB, "bench-floor")
	if err != nil {
		return sec, err
	}
	for _, l := range routesLatencyLoads() {
		next := 0
		var kind string
		for _, ph := range routesPhases {
			warm, calls := l.calls(&next, ph.Warm), l.calls(&next, ph.Requests)
			if _, err := st.load(ctx, warm, routesPhase{Concurrency: ph.Concurrency}); err != nil {
				return sec, fmt.Errorf("%s: warm-up: %w", l.name, err)
			}
			fn := calls[0].Route.Function
			before := st.meter.Of(fn)
			took, err := st.load(ctx, calls, ph)
			if err != nil {
				return sec, fmt.Errorf("%s at c=%d: %w", l.name, ph.Concurrency, err)
			}
			used := st.meter.Of(fn).Minus(before)
			if kind == "" {
				kind = routesFloorKind(used)
			}
			floor, err := floors.latencies(ctx, kind, ph)
			if err != nil {
				return sec, err
			}
			note := fmt.Sprintf("%d requests; DynamoDB calls per request: %s", len(took), routesPerRequest(used, len(took)))
			for _, p := range []float64{50, 99} {
				v, f := Percentile(took, p), Percentile(floor, p)
				sec.Rows = append(sec.Rows, Row{
					Name:  fmt.Sprintf("%s — %s, p%g, c=%d", l.name, calls[0].Route.Key(), p, ph.Concurrency),
					Value: Millis(v), Floor: Millis(f), Unit: "ms", FloorName: fmt.Sprintf("bare %s, p%g, c=%d", kind, p, ph.Concurrency), Note: note,
				})
			}
			fmt.Fprintf(os.Stderr, "bench: latency: %s c=%d: p50 %s p99 %s (floor %s: %s / %s)\n", l.name, ph.Concurrency,
				Percentile(took, 50).Round(10*time.Microsecond), Percentile(took, 99).Round(10*time.Microsecond), kind,
				Percentile(floor, 50).Round(10*time.Microsecond), Percentile(floor, 99).Round(10*time.Microsecond))
		}
		// What the processors do with the writes is not the next route's.
		if err := st.WaitIdle(ctx); err != nil {
			return sec, err
		}
	}
	return sec, nil
}

// load makes calls as ph says (its concurrency, and its time limit when
// set) and returns the latency of each call made. Tokens are minted
// first, outside the measurement.
func (s *routesStack) load(ctx context.Context, calls []routesCall, ph routesPhase) ([]time.Duration, error) {
	for _, call := range calls {
		if err := s.prepare(call); err != nil {
			return nil, err
		}
	}
	return routesTimed(ctx, len(calls), ph, func(ctx context.Context, i int) error {
		_, err := s.do(ctx, calls[i])
		return err
	})
}

// routesTimed runs do for up to n indices as ph says and returns the
// latency of each run, in index order.
func routesTimed(ctx context.Context, n int, ph routesPhase, do func(ctx context.Context, i int) error) ([]time.Duration, error) {
	took := make([]time.Duration, n)
	var until time.Time
	if ph.For > 0 {
		until = time.Now().Add(ph.For)
	}
	err := routesWorkers(ctx, n, ph.Concurrency, ph.Min, until, func(ctx context.Context, i int) error {
		t := time.Now()
		err := do(ctx, i)
		took[i] = max(time.Since(t), time.Nanosecond)
		return err
	})
	done := took[:0]
	for _, d := range took {
		if d > 0 {
			done = append(done, d)
		}
	}
	return done, err
}

// routesWorkers runs do for 0..n-1 with c workers taking the next index
// as they finish; past index min, none is started after until (when
// set). The first error stops them all.
func routesWorkers(ctx context.Context, n, c, min int, until time.Time, do func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range c {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil || (i >= min && !until.IsZero() && time.Now().After(until)) {
					return
				}
				if err := do(ctx, i); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}

// The floors' kinds of call.
const (
	routesGetItem  = "GetItem"
	routesPutItem  = "PutItem"
	routesTransact = "TransactWriteItems (2 items)"
)

// routesWriteOps are the operations that write.
var routesWriteOps = map[string]bool{"PutItem": true, "UpdateItem": true, "DeleteItem": true, "BatchWriteItem": true}

// routesFloorKind is the floor a route is compared with, by the calls it
// made: a transaction's, a single write's, else a read's.
func routesFloorKind(u routesUsage) string {
	if u.Calls["TransactWriteItems"] > 0 {
		return routesTransact
	}
	for op := range u.Calls {
		if routesWriteOps[op] {
			return routesPutItem
		}
	}
	return routesGetItem
}

// routesPerRequest says how many calls of each operation a request made
// on average: "GetItem×1, TransactWriteItems×1", or "no DynamoDB call".
func routesPerRequest(u routesUsage, requests int) string {
	if len(u.Calls) == 0 {
		return "no DynamoDB call"
	}
	var parts []string
	for op, n := range u.Calls {
		parts = append(parts, fmt.Sprintf("%s×%.3g", op, float64(n)/float64(requests)))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// routesFloors measures bare calls to a section's DynamoDB Local on a
// table of their own, once per kind and concurrency.
type routesFloors struct {
	db    *dynamodb.Client
	table string
	n     atomic.Int64

	mu   sync.Mutex
	done map[string][]time.Duration
}

// routesFloorItems are the items GetItem reads.
const routesFloorItems = 100

func newRoutesFloors(ctx context.Context, endpoint, table string) (*routesFloors, error) {
	db := dynamodb.New(dynamodb.Options{
		Region: stack.Region, BaseEndpoint: aws.String(endpoint),
		Credentials: credentials.NewStaticCredentialsProvider("local", "local", ""),
		// As the handlers' client: enough idle connections for 32 at once.
		HTTPClient: awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) { tr.MaxIdleConnsPerHost = 64 }),
	})
	table = fmt.Sprintf("%s-%d", table, time.Now().UnixNano()%1e9)
	if _, err := db.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(table),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	}); err != nil {
		return nil, fmt.Errorf("floor table: %w", err)
	}
	f := &routesFloors{db: db, table: table, done: map[string][]time.Duration{}}
	for i := range routesFloorItems {
		if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: f.item(fmt.Sprintf("read-%03d", i))}); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// item is a small item, as an edge or a score is: a key and a few
// attributes, about 150 bytes.
func (f *routesFloors) item(pk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		"pk":         &types.AttributeValueMemberS{Value: pk},
		"state":      &types.AttributeValueMemberS{Value: "ACTIVE"},
		"created_at": &types.AttributeValueMemberS{Value: "2026-11-24T12:00:00.000000000Z"},
		"version":    &types.AttributeValueMemberN{Value: "1"},
		"payload":    &types.AttributeValueMemberS{Value: strings.Repeat("x", 64)},
	}
}

// call makes one bare call of kind.
func (f *routesFloors) call(ctx context.Context, kind string, i int) error {
	t := aws.String(f.table)
	var err error
	switch kind {
	case routesGetItem:
		_, err = f.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: t, Key: map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: fmt.Sprintf("read-%03d", i%routesFloorItems)}}})
	case routesPutItem:
		_, err = f.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: t, Item: f.item(fmt.Sprintf("put-%d", f.n.Add(1)))})
	case routesTransact:
		n := f.n.Add(1)
		_, err = f.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
			{Put: &types.Put{TableName: t, Item: f.item(fmt.Sprintf("tx-%d-a", n))}},
			{Put: &types.Put{TableName: t, Item: f.item(fmt.Sprintf("tx-%d-b", n))}},
		}})
	default:
		err = fmt.Errorf("no floor of kind %q", kind)
	}
	return err
}

// latencies measures kind as ph says once (as many requests as a route's
// phase, after the same warm-up) and returns them.
func (f *routesFloors) latencies(ctx context.Context, kind string, ph routesPhase) ([]time.Duration, error) {
	key := fmt.Sprintf("%s/%d", kind, ph.Concurrency)
	f.mu.Lock()
	defer f.mu.Unlock()
	if d, ok := f.done[key]; ok {
		return d, nil
	}
	call := func(ctx context.Context, i int) error { return f.call(ctx, kind, i) }
	if _, err := routesTimed(ctx, ph.Warm, routesPhase{Concurrency: ph.Concurrency}, call); err != nil {
		return nil, fmt.Errorf("floor %s: %w", kind, err)
	}
	took, err := routesTimed(ctx, ph.Requests, ph, call)
	if err != nil {
		return nil, fmt.Errorf("floor %s: %w", kind, err)
	}
	f.done[key] = took
	return took, nil
}
