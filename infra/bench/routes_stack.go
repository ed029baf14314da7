package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/aws/smithy-go/middleware"
	"github.com/redis/go-redis/v9"

	"github.com/rallyhq/rally/infra/local/dynamodblocal"
	"github.com/rallyhq/rally/infra/local/stack"
	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/shared/app"
	"github.com/rallyhq/rally/shared/config"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
)

// routesBudget is every budget while the route sections run: high enough
// that thousands of requests a minute from one address and a few players
// are never refused, while each request still makes its budget checks.
const routesBudget = 10_000_000

// routesStack is a local stack for the route sections: the real gateway,
// authorizers and handlers over a DynamoDB Local of its own and the run's
// redis-server, with Redis round trips counted and DynamoDB's consumed
// capacity metered per function. DynamoDB Local slows down for good once
// it has taken many writes with streams, deleted tables or not (after the
// latency section the stack served a tenth of the requests a second it
// serves on a fresh one), so a section sharing one would measure the
// sections before it.
type routesStack struct {
	*stack.Stack
	trips *routesTrips
	meter *routesMeter
	http  *http.Client
	dir   string
	// redisPID is the redis-server the stack uses, for its CPU time.
	redisPID int

	mu     sync.Mutex
	tokens map[string]string
}

// routesStart starts a stack with its own DynamoDB Local (tables named
// with prefix) and Redis database db of env's redis-server, emptied first:
// each section starts from nothing. configure adjusts the handlers' configuration after the raised
// budgets, adjust the stack's options.
// priceTransactions makes the meter price transactions by DynamoDB's
// rules (txPricer): for the sections that report capacity, where the two
// reads it adds per item do not count, unlike the latency sections.
func (st *routesStack) priceTransactions() {
	tables := map[string]schema.Table{}
	for _, t := range schema.Tables() {
		tables[st.Tables().Of(t)] = t
	}
	st.meter.tx = &txPricer{DB: st.Deps().DB, Tables: tables}
}

func routesStart(ctx context.Context, env *Env, prefix string, db int, configure func(*config.Config), adjust ...func(*stack.Options)) (*routesStack, error) {
	redisURL := fmt.Sprintf("%s/%d", env.Redis.URL(), db)
	opts, err := redis.ParseURL(redisURL)
	if err != nil {
		return nil, err
	}
	rdb := redis.NewClient(opts)
	err = rdb.FlushDB(ctx).Err()
	rdb.Close()
	if err != nil {
		return nil, fmt.Errorf("empty Redis database %d: %w", db, err)
	}
	dir, err := os.MkdirTemp("", "rally-bench-")
	if err != nil {
		return nil, err
	}
	meter := newRoutesMeter()
	so := stack.Options{
		RedisURL:    redisURL,
		TablePrefix: fmt.Sprintf("%s%d-", prefix, time.Now().UnixNano()%1e9), StateDir: dir, Log: io.Discard,
		// As make dev runs it.
		DynamoDBJVM: dynamodblocal.Steady,
		APIOptions:  []func(*middleware.Stack) error{meter.APIOption},
		Configure: func(c *config.Config) {
			c.Budgets = map[string]int{}
			for _, b := range routes.AllBudgets() {
				c.Budgets[b.Name] = routesBudget
			}
			c.LogLevel = "error"
			if configure != nil {
				configure(c)
			}
		},
	}
	for _, a := range adjust {
		a(&so)
	}
	st, err := stack.Start(ctx, so)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	trips := &routesTrips{by: map[string]*testenv.RoundTrips{}}
	st.Deps().Redis.AddHook(trips)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 256, 256
	return &routesStack{
		Stack: st, trips: trips, meter: meter, dir: dir, tokens: map[string]string{},
		http: &http.Client{Transport: tr, Timeout: 30 * time.Second},
	}, nil
}

// Close stops the stack and its DynamoDB Local and removes its state
// directory.
func (s *routesStack) Close() {
	s.Stack.Close()
	os.RemoveAll(s.dir)
}

// token is a player token for sub, minted once.
func (s *routesStack) token(sub string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.tokens[sub]; ok {
		return t, nil
	}
	t, err := s.Token(sub)
	if err != nil {
		return "", err
	}
	s.tokens[sub] = t
	return t, nil
}

// routesCall is one HTTP request to the gateway: a player's (Sub set) or a
// game server's (SigV4 signed).
type routesCall struct {
	Route   routes.Route
	Path    string // the route's path with its parameters and query
	Sub     string
	Body    string
	Headers map[string]string
}

// prepare mints what the call needs ahead of a measurement.
func (s *routesStack) prepare(c routesCall) error {
	if c.Sub == "" {
		return nil
	}
	_, err := s.token(c.Sub)
	return err
}

// do sends c and fails unless it is answered 2xx.
func (s *routesStack) do(ctx context.Context, c routesCall) ([]byte, error) {
	var body io.Reader
	if c.Body != "" {
		body = bytes.NewReader([]byte(c.Body))
	}
	req, err := http.NewRequestWithContext(ctx, c.Route.Method, s.URL()+c.Path, body)
	if err != nil {
		return nil, err
	}
	if c.Body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range c.Headers {
		req.Header.Set(k, v)
	}
	if c.Sub != "" {
		tok, err := s.token(c.Sub)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	} else if err := stack.SignRequestAsRole(c.Route.Role)(req, []byte(c.Body)); err != nil {
		return nil, err
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("%s %s: %d %s", c.Route.Method, c.Path, resp.StatusCode, out)
	}
	return out, nil
}

// routesTrips counts Redis round trips per function, as testenv.RoundTrips
// counts them (budget checks and handshakes apart), so the processors'
// ticks and the bench's own commands are not a route's.
type routesTrips struct {
	mu sync.Mutex
	by map[string]*testenv.RoundTrips
}

func (t *routesTrips) of(fn string) *testenv.RoundTrips {
	t.mu.Lock()
	defer t.mu.Unlock()
	rt, ok := t.by[fn]
	if !ok {
		rt = &testenv.RoundTrips{}
		t.by[fn] = rt
	}
	return rt
}

// Count is function fn's round trips so far, budget checks apart.
func (t *routesTrips) Count(fn string) int64 { return t.of(fn).Count() }

// DialHook passes dials through.
func (t *routesTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook counts a command in the function that made it.
func (t *routesTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if fn := app.FunctionOf(ctx); fn != "" {
			return t.of(fn).ProcessHook(next)(ctx, cmd)
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook counts a pipeline in the function that made it.
func (t *routesTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if fn := app.FunctionOf(ctx); fn != "" {
			return t.of(fn).ProcessPipelineHook(next)(ctx, cmds)
		}
		return next(ctx, cmds)
	}
}

// warmPlayers makes one request of each player of the pool, so what a
// player's first request does (recording when Rally first saw them) is
// not in what is measured after.
func (s *routesStack) warmPlayers(ctx context.Context) error {
	calls := make([]routesCall, routesPool)
	for i := range calls {
		calls[i] = routesCall{Route: routes.GetStreak, Sub: routesUser(i), Path: "/v1/users/" + routesUser(i) + "/streak"}
	}
	_, err := s.load(ctx, calls, routesPhase{Concurrency: 8})
	return err
}

// routesLoadAverage is this machine's load average over the last minute,
// as /proc/loadavg gives it ("?" where there is none).
func routesLoadAverage() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(raw)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "?"
}
