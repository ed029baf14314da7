package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/rallyhq/rally/shared/routes"
)

// sizePlayers is how many players the section's stack at size holds
// (RALLY_BENCH_SIZE_PLAYERS overrides it).
func sizePlayers() int { return envInt("RALLY_BENCH_SIZE_PLAYERS", 100_000) }

// envInt is the positive integer the environment variable name holds, or
// def.
func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// sizeIdle is how long idle CPU is measured over.
const sizeIdle = 60 * time.Second

// sizeAPIWrites is how many score submissions, each by a player new to
// the stack, measure the API's write rate at concurrency 16 and how soon
// analytics ships their events, on each stack (RALLY_BENCH_SIZE_WRITES
// overrides it).
var sizeAPIWrites = envInt("RALLY_BENCH_SIZE_WRITES", 10_000)

// sizePhases are the concurrencies the routes are measured at.
var sizePhases = []routesPhase{
	{Concurrency: 1, Warm: routesPool, Requests: 300, Min: 100, For: 5 * time.Second},
	{Concurrency: 16, Warm: routesPool, Requests: 1000, Min: 300, For: 8 * time.Second},
}

// sizeBoards are the two boards every player of the stack at size has a
// score on.
var sizeBoards = []string{"size-a", "size-b"}

func sizePlayer(i int) string { return fmt.Sprintf("size-p%06d", i) }

// sizeMeasures are one stack's figures.
type sizeMeasures struct {
	idleCPU  float64 // share of one core over sizeIdle, every process of the stack
	getItem  []time.Duration
	routes   map[string][]time.Duration // by load name and concurrency
	apiRate  float64                    // score submissions a second at c=16
	shipped  time.Duration              // from the last of them to every processor idle
	imported time.Duration              // the import job, started to done (stack at size only)
	caughtUp time.Duration              // the import, started to every processor idle
	lines    int                        // lines imported
}

// sizeLoads are the routes measured on both stacks.
func sizeLoads(players int) []routesLoad {
	return []routesLoad{
		{"submit score (service)", func(i int) routesCall {
			return routesCall{Route: routes.SubmitScore, Path: "/v1/leaderboards/" + sizeBoards[0] + "/scores",
				Body: fmt.Sprintf(`{"player_id":%q,"match_id":"lat-%d","score":%d}`, sizePlayer(i%players), i, 1_000_000+i)}
		}},
		{"leaderboard top 10", func(i int) routesCall {
			return routesCall{Route: routes.LeaderboardTop, Sub: routesUser(i), Path: "/v1/leaderboards/" + sizeBoards[1] + "/top?n=10"}
		}},
		{"player rank + 4", func(i int) routesCall {
			return routesCall{Route: routes.PlayerRank, Sub: routesUser(i),
				Path: fmt.Sprintf("/v1/leaderboards/%s/players/%s/rank?k=4", sizeBoards[1], sizePlayer((i*7919)%players))}
		}},
	}
}

// sizeSeedAPI seeds players through the API: a score on each board, a
// favorite and a day of activity each, at concurrency 16. It returns the
// rate of requests served.
func sizeSeedAPI(ctx context.Context, st *routesStack, from, n int) (float64, error) {
	var calls []routesCall
	for i := from; i < from+n; i++ {
		p := sizePlayer(i)
		for b, board := range sizeBoards {
			calls = append(calls, routesCall{Route: routes.SubmitScore, Path: "/v1/leaderboards/" + board + "/scores",
				Body: fmt.Sprintf(`{"player_id":%q,"match_id":"seed","score":%d}`, p, (i*7919+b*104729)%1_000_000)})
		}
		calls = append(calls, routesCall{Route: routes.FavoriteGame, Sub: p, Path: "/v1/favorites/" + routesGame("size", i%100)})
		calls = append(calls, routesCall{Route: routes.RecordActivity, Sub: p, Path: "/v1/activity",
			Body:    `{"event_type":"DAILY_OPEN","source":"mobile_app","timezone":"UTC"}`,
			Headers: map[string]string{"Idempotency-Key": "size-open-" + p}})
	}
	t := time.Now()
	if _, err := st.load(ctx, calls, routesPhase{Concurrency: 16}); err != nil {
		return 0, err
	}
	return float64(len(calls)) / time.Since(t).Seconds(), nil
}

// sizeBoardsDefined puts the section's boards.
func sizeBoardsDefined(ctx context.Context, st *routesStack) error {
	for _, b := range sizeBoards {
		if _, err := st.do(ctx, routesCall{Route: routes.PutLeaderboard, Path: "/v1/leaderboards/" + b,
			Body: `{"title":"Size","policy":"best","order":"desc","reset":"none","tie_break":"earliest","status":"ACTIVE","max_n":100,"timezone":"UTC"}`}); err != nil {
			return err
		}
	}
	return nil
}

// sizeMeasure takes a stack's figures once its seed is applied.
func sizeMeasure(ctx context.Context, st *routesStack, players int, m *sizeMeasures) error {
	if err := st.WaitIdle(ctx); err != nil {
		return err
	}
	if err := st.awaitTrusted(ctx); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "bench: size: measuring idle CPU over %s\n", sizeIdle)
	cpu, err := sizeIdleCPU(ctx, st, sizeIdle)
	if err != nil {
		return err
	}
	m.idleCPU = cpu
	floors, err := newRoutesFloors(ctx, st.Endpoints().DynamoDB, "bench-size-floor")
	if err != nil {
		return err
	}
	if m.getItem, err = floors.latencies(ctx, routesGetItem, sizePhases[0]); err != nil {
		return err
	}
	m.routes = map[string][]time.Duration{}
	for _, l := range sizeLoads(players) {
		next := 0
		for _, ph := range sizePhases {
			warm, calls := l.calls(&next, ph.Warm), l.calls(&next, ph.Requests)
			if _, err := st.load(ctx, warm, routesPhase{Concurrency: ph.Concurrency}); err != nil {
				return fmt.Errorf("%s: warm-up: %w", l.name, err)
			}
			took, err := st.load(ctx, calls, ph)
			if err != nil {
				return fmt.Errorf("%s at c=%d: %w", l.name, ph.Concurrency, err)
			}
			m.routes[fmt.Sprintf("%s/%d", l.name, ph.Concurrency)] = took
		}
		if err := st.WaitIdle(ctx); err != nil {
			return err
		}
	}
	return nil
}

// sizeIdleCPU is the CPU every process of the stack (this one, which
// runs the gateway, handlers and pollers; DynamoDB Local's JVM;
// redis-server) used over d with no request made, as a share of one core.
func sizeIdleCPU(ctx context.Context, st *routesStack, d time.Duration) (float64, error) {
	pids := []int{os.Getpid(), st.Info().DynamoDBPID, st.redisPID}
	before, err := cpuTicks(pids)
	if err != nil {
		return 0, err
	}
	t := time.Now()
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(d):
	}
	after, err := cpuTicks(pids)
	if err != nil {
		return 0, err
	}
	return float64(after-before) / clockTicks / time.Since(t).Seconds(), nil
}

// clockTicks is the kernel's USER_HZ, the unit of /proc/<pid>/stat's times.
const clockTicks = 100

// cpuTicks sums user and system time of pids from /proc.
func cpuTicks(pids []int) (int64, error) {
	var sum int64
	for _, pid := range pids {
		if pid == 0 {
			continue
		}
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return 0, fmt.Errorf("cpu time of %d: %w", pid, err)
		}
		// The fields after the command (which may hold spaces) start at
		// state; utime and stime are fields 14 and 15.
		s := string(raw)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		for _, i := range []int{11, 12} {
			v, err := strconv.ParseInt(f[i], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("cpu time of %d: %w", pid, err)
			}
			sum += v
		}
	}
	return sum, nil
}

func benchSize(ctx context.Context, env *Env) (Section, error) {
	players := sizePlayers()
	sec := Section{
		Title: "The local stack at a studio's size",
		Intro: fmt.Sprintf("Two local stacks in the same run, each with a DynamoDB Local of its own and redis-server: a fresh one, and one holding %d players ", players) +
			fmt.Sprintf("(a score on each of two boards, a favorite and a day's streak each: the first %d through the API, the rest through the import job from a JSON Lines file) with every stream record their writes made, all applied by every processor before anything is measured. ", routesSeedPlayers) +
			fmt.Sprintf("Then each stack takes a score from each of %d players new to it through the API at concurrency 16 (the write rate), and the time from the last of them until every processor, the analytics shipper among them, has applied them is measured. ", sizeAPIWrites) +
			fmt.Sprintf("Idle CPU is every process of the stack (the gateway, handlers and pollers; DynamoDB Local's JVM; redis-server) over %s with no request, as a share of one core. ", sizeIdle) +
			"Routes are measured as in the latency section, on the second board; the floor of each figure at size is the same figure on the fresh stack; ratio = at size / fresh.",
	}
	fresh, err := sizeStack(ctx, env, "bench-fresh", 13, 0)
	if err != nil {
		return sec, fmt.Errorf("fresh stack: %w", err)
	}
	big, err := sizeStack(ctx, env, "bench-size", 14, players)
	if err != nil {
		return sec, fmt.Errorf("stack at size: %w", err)
	}
	sec.Rows = append(sec.Rows, Row{
		Name: "idle CPU, whole stack", Value: big.idleCPU * 100, Floor: fresh.idleCPU * 100, Unit: "% of a core", FloorName: "fresh stack",
		Goal: "≤ 5 % of a core", Met: Within(big.idleCPU*100, 5),
	})
	get := func(d []time.Duration, p float64) float64 { return Millis(Percentile(d, p)) }
	sec.Rows = append(sec.Rows, Row{
		Name: "bare GetItem, p50, c=1", Value: get(big.getItem, 50), Floor: get(fresh.getItem, 50), Unit: "ms", FloorName: "fresh stack",
		Goal: "≤ 1.5×", Met: Within(get(big.getItem, 50)/get(fresh.getItem, 50), 1.5),
	})
	for _, l := range sizeLoads(players) {
		for _, ph := range sizePhases {
			key := fmt.Sprintf("%s/%d", l.name, ph.Concurrency)
			for _, p := range []float64{50, 99} {
				v, f := get(big.routes[key], p), get(fresh.routes[key], p)
				sec.Rows = append(sec.Rows, Row{
					Name:  fmt.Sprintf("%s — %s, p%g, c=%d", l.name, l.call(0).Route.Key(), p, ph.Concurrency),
					Value: v, Floor: f, Unit: "ms", FloorName: "fresh stack", Goal: "≤ 1.5×", Met: Within(v/f, 1.5),
					Note: fmt.Sprintf("%d and %d requests", len(big.routes[key]), len(fresh.routes[key])),
				})
			}
		}
	}
	sec.Rows = append(sec.Rows, Row{
		Name: fmt.Sprintf("score submissions through the API, %d new players, c=16", sizeAPIWrites), Value: big.apiRate, Floor: fresh.apiRate,
		Unit: "writes/s", FloorName: "fresh stack",
	}, Row{
		Name:  fmt.Sprintf("analytics: %d new players' events shipped, after the last write", sizeAPIWrites),
		Value: big.shipped.Seconds(), Floor: fresh.shipped.Seconds(), Unit: "s", FloorName: "fresh stack",
		Goal: "≤ 30 s", Met: Within(big.shipped.Seconds(), 30),
		Note: "until every processor has applied every record written: the leaderboard processor, and the analytics shipper a pseudonym secret for each new player",
	})
	sec.Rows = append(sec.Rows, Row{
		Name: fmt.Sprintf("import of %d players (%d lines), job started to done", players, big.lines), Value: big.imported.Seconds(), Unit: "s",
		Goal: "≤ 60 s", Met: Within(big.imported.Seconds(), 60),
		Note: "POST /v1/ops/jobs kind import from a local file: two scores, a favorite and a streak per player",
	}, Row{
		Name: "the same import, started to every processor caught up (boards, counts, streak boards, analytics)", Value: big.caughtUp.Seconds(), Unit: "s",
	})
	return sec, nil
}

// sizeStack starts a stack, seeds players (none for the fresh one) and
// measures it, then stops it.
func sizeStack(ctx context.Context, env *Env, prefix string, db, players int) (sizeMeasures, error) {
	var m sizeMeasures
	st, err := routesStart(ctx, env, prefix, db, nil)
	if err != nil {
		return m, err
	}
	defer st.Close()
	st.redisPID = env.Redis.PID()
	if err := st.awaitTrusted(ctx); err != nil {
		return m, err
	}
	if err := sizeBoardsDefined(ctx, st); err != nil {
		return m, err
	}
	// Both stacks hold the players the routes read: the fresh one only
	// those.
	base := min(routesSeedPlayers, max(players, routesSeedPlayers))
	if _, err := sizeSeedAPI(ctx, st, 0, base); err != nil {
		return m, err
	}
	if players > base {
		t := time.Now()
		if err := sizeImport(ctx, st, base, players, &m); err != nil {
			return m, err
		}
		if err := st.WaitIdle(ctx); err != nil {
			return m, err
		}
		m.caughtUp = time.Since(t)
		fmt.Fprintf(os.Stderr, "bench: size: %d players imported in %s, applied by every processor after %s\n",
			players-base, m.imported.Round(time.Second), m.caughtUp.Round(time.Second))
	}
	if err := st.WaitIdle(ctx); err != nil {
		return m, err
	}
	if err := sizeAPIRate(ctx, st, max(players, base), &m); err != nil {
		return m, err
	}
	return m, sizeMeasure(ctx, st, max(players, base), &m)
}

// sizeImport imports players [from, to) through the import job: a JSON
// Lines file of a score on each board, a favorite and a day's streak
// each, then waits for the job to be done.
func sizeImport(ctx context.Context, st *routesStack, from, to int, m *sizeMeasures) error {
	path := filepath.Join(st.dir, "size-import.jsonl")
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	today := st.Clock().Now().UTC().Format(time.DateOnly)
	for i := from; i < to; i++ {
		p := sizePlayer(i)
		for b, board := range sizeBoards {
			fmt.Fprintf(w, `{"type":"score","leaderboard_id":%q,"player_id":%q,"score":%d}`+"\n", board, p, (i*7919+b*104729)%1_000_000)
		}
		fmt.Fprintf(w, `{"type":"favorite","user_id":%q,"game_id":%q}`+"\n", p, routesGame("size", i%100))
		fmt.Fprintf(w, `{"type":"streak","user_id":%q,"current_streak":1,"longest_streak":1,"last_activity_date":%q,"timezone":"UTC","total_points":10}`+"\n", p, today)
		m.lines += 4
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	t := time.Now()
	if err := st.importFile(ctx, path); err != nil {
		return err
	}
	m.imported = time.Since(t)
	return nil
}

// importFile imports a JSON Lines file through the import job (POST
// /v1/ops/jobs kind import) and waits for the job to be done, every line
// taken.
func (s *routesStack) importFile(ctx context.Context, path string) error {
	return s.runJob(ctx, fmt.Sprintf(`{"kind":"import","source":%q}`, "file://"+path))
}

// runJob starts an ops job (POST /v1/ops/jobs with body) and waits for it
// to be done, nothing rejected.
func (s *routesStack) runJob(ctx context.Context, start string) error {
	body, err := s.do(ctx, routesCall{Route: routes.StartJob, Path: "/v1/ops/jobs", Body: start})
	if err != nil {
		return err
	}
	var job struct {
		JobID    string `json:"job_id"`
		State    string `json:"state"`
		Rejected int64  `json:"rejected"`
		Error    string `json:"error"`
	}
	if err := json.Unmarshal(body, &job); err != nil {
		return err
	}
	for job.State == "RUNNING" {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		body, err = s.do(ctx, routesCall{Route: routes.GetJob, Path: "/v1/ops/jobs/" + job.JobID})
		if err != nil {
			return err
		}
		if err := json.Unmarshal(body, &job); err != nil {
			return err
		}
	}
	if job.State != "DONE" || job.Rejected > 0 {
		return fmt.Errorf("the job %s ended %s with %d rejected: %s", start, job.State, job.Rejected, body)
	}
	return nil
}

// sizeAPIRate submits a score for each of sizeAPIWrites new players at
// concurrency 16, then waits for every processor (the analytics shipper
// among them) to have applied them.
func sizeAPIRate(ctx context.Context, st *routesStack, from int, m *sizeMeasures) error {
	calls := make([]routesCall, sizeAPIWrites)
	for i := range calls {
		calls[i] = routesCall{Route: routes.SubmitScore, Path: "/v1/leaderboards/" + sizeBoards[0] + "/scores",
			Body: fmt.Sprintf(`{"player_id":%q,"match_id":"rate","score":%d}`, sizePlayer(from+i), (i*7919)%1_000_000)}
	}
	t := time.Now()
	if _, err := st.load(ctx, calls, routesPhase{Concurrency: 16}); err != nil {
		return err
	}
	m.apiRate = float64(len(calls)) / time.Since(t).Seconds()
	last := time.Now()
	if err := st.WaitIdle(ctx); err != nil {
		return err
	}
	m.shipped = time.Since(last)
	fmt.Fprintf(os.Stderr, "bench: size: %d scores of new players at %.0f/s, every processor idle %s after the last\n",
		len(calls), m.apiRate, m.shipped.Round(10*time.Millisecond))
	return nil
}
