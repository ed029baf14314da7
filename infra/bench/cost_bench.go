package main

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/redis/go-redis/v9"

	"github.com/rallyhq/rally/infra/cost"
	"github.com/rallyhq/rally/infra/local/binaries"
	"github.com/rallyhq/rally/infra/local/stack"
	"github.com/rallyhq/rally/infra/local/template"
	"github.com/rallyhq/rally/infra/local/template/synth"
	"github.com/rallyhq/rally/shared/analytics"
	"github.com/rallyhq/rally/shared/config"
	"github.com/rallyhq/rally/shared/ranking"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
)

// costRequests is how many requests of each route the cost section
// measures, after as many warm-up ones (as the capacity section).
const costRequests = routesCapacityRequests

// costMembers is how many members the cache-storage measurement loads.
const costMembers = 100_000

// costFloor is, per route, the least work beyond the capacity section's
// floor: the ECPUs of the Redis commands it cannot avoid (a read Redis
// serves: one command; a write whose processor moves a count, a board or
// a streak board in Redis: one), and the bare call its Lambda must at
// least wait for.
var costFloor = map[string]struct {
	ecpu float64
	call string
}{
	cost.Favorite:       {1, routesPutItem},
	cost.Unfavorite:     {1, routesPutItem},
	cost.FavoriteStatus: {1, costRedisCall},
	cost.FavoriteCount:  {1, costRedisCall},
	cost.FavoritesList:  {0, routesGetItem},
	cost.Like:           {1, routesPutItem},
	cost.LikeToggle:     {1, routesPutItem},
	cost.SubmitScore:    {1, routesTransact},
	cost.Top10:          {1, costRedisCall},
	cost.RankK:          {1, costRedisCall},
	cost.RecordActivity: {1, routesTransact},
	cost.GetStreak:      {1, costRedisCall},
}

// costRedisCall is the floor call of a read Redis serves: one GET.
const costRedisCall = "Redis GET"

func benchCost(ctx context.Context, env *Env) (Section, error) {
	p := cost.OnDemand
	sec := Section{Title: "Cost per operation and per month"}

	// Each function's memory, from the synthesized template.
	root, err := coldstartRoot()
	if err != nil {
		return sec, err
	}
	tpl, err := synth.Load(root, "dev", filepath.Join(root, ".local"), os.Stderr)
	if err != nil {
		return sec, err
	}
	tfns, err := tpl.Functions(template.Local{
		Tables: schema.NamesFromEnv("bench-cost-"), RedisURL: env.Redis.URL(),
		Region: "us-east-1", AccountID: "000000000000", SecretValue: binaries.SecretValue,
	})
	if err != nil {
		return sec, err
	}
	memory := map[string]int{}
	for _, f := range tfns {
		memory[f.Name] = f.MemoryMB
	}

	board, plain, err := costMemberBytes(ctx, env)
	if err != nil {
		return sec, err
	}
	fmt.Fprintf(os.Stderr, "bench: cost: a board member takes %.0f B (a plain sorted set's %.0f B)\n", board, plain)

	const db = 13
	inv := &costInvocations{by: map[string]costDuration{}}
	var meter *routesMeter
	st, err := routesStart(ctx, env, "bench-cost", db, func(c *config.Config) {
		c.CacheCheckEvery, c.SnapshotEvery = time.Hour, time.Hour
	}, func(o *stack.Options) {
		o.Invoked = func(fn string, records int, took time.Duration) {
			if meter != nil {
				// The meter's reads pricing a transaction are not the
				// function's time.
				took -= meter.TakePricing(fn)
			}
			inv.add(fn, records, took)
		}
	})
	if err != nil {
		return sec, err
	}
	defer st.Close()
	st.priceTransactions()
	meter = st.meter
	cmds := &costCommands{}
	st.Deps().Redis.AddHook(cmds)
	if err := routesSeedReads(ctx, st, "lat"); err != nil {
		return sec, err
	}
	if err := st.warmPlayers(ctx); err != nil {
		return sec, err
	}
	opts, err := redis.ParseURL(env.Redis.URL())
	if err != nil {
		return sec, err
	}
	info := redis.NewClient(opts)
	defer info.Close()
	perGET, err := costGETCPU(ctx, info)
	if err != nil {
		return sec, err
	}
	floors, err := newRoutesFloors(ctx, st.Endpoints().DynamoDB, "bench-cost-floor")
	if err != nil {
		return sec, err
	}
	floorMillis := map[string]float64{}
	for _, kind := range []string{routesGetItem, routesPutItem, routesTransact} {
		took, err := routesTimed(ctx, 2*costRequests, routesPhase{Concurrency: 1}, func(ctx context.Context, i int) error { return floors.call(ctx, kind, i) })
		if err != nil {
			return sec, err
		}
		floorMillis[kind] = costBilled(took[costRequests:])
	}
	took, err := routesTimed(ctx, 2*costRequests, routesPhase{Concurrency: 1}, func(ctx context.Context, i int) error {
		return info.Get(ctx, "bench-cost-floor").Err()
	})
	if err != nil && err != redis.Nil {
		return sec, err
	}
	floorMillis[costRedisCall] = costBilled(took[costRequests:])

	type measured struct {
		name, key        string
		units, floor     cost.Units
		commands, kib    float64
		scripts, micros  float64
		processors       string
		events, jsonSize float64
	}
	var all []measured
	next := map[string]int{}
	events := filepath.Join(st.dir, "analytics")
	for _, r := range routesCapacityRoutes() {
		l := r.load
		fl, ok := costFloor[l.name]
		if !ok {
			return sec, fmt.Errorf("cost: no floor for %q", l.name)
		}
		warm, calls := routesCapacityCalls(l, &next, costRequests)
		if _, err := st.load(ctx, warm, routesPhase{Concurrency: 1}); err != nil {
			return sec, fmt.Errorf("%s: %w", l.name, err)
		}
		if err := st.WaitIdle(ctx); err != nil {
			return sec, err
		}
		fn := calls[0].Route.Function
		seen, err := costFiles(events)
		if err != nil {
			return sec, err
		}
		beforeUse := map[string]routesUsage{}
		for _, f := range costFunctions(fn) {
			beforeUse[f] = st.meter.Of(f)
		}
		beforeInv, beforeCmds := inv.snapshot(), cmds.n.Load()
		beforeStats, err := costRedisStats(ctx, info)
		if err != nil {
			return sec, err
		}
		if _, err := st.load(ctx, calls, routesPhase{Concurrency: 1}); err != nil {
			return sec, fmt.Errorf("%s: %w", l.name, err)
		}
		if err := st.WaitIdle(ctx); err != nil {
			return sec, err
		}
		afterStats, err := costRedisStats(ctx, info)
		if err != nil {
			return sec, err
		}
		n := float64(len(calls))
		u := cost.Units{APIRequests: 1}
		var procs []string
		afterInv := inv.snapshot()
		for _, f := range costFunctions(fn) {
			used := st.meter.Of(f).Minus(beforeUse[f])
			u.ReadUnits += used.RCU / n
			u.WriteUnits += used.WCU / n
			d := afterInv[f].minus(beforeInv[f])
			if d.invocations == 0 {
				continue
			}
			mb, ok := memory[f]
			if !ok {
				return sec, fmt.Errorf("cost: the template has no function %s", f)
			}
			u.Lambda = append(u.Lambda, cost.Invocations{Function: f, MemoryMB: mb, Count: float64(d.invocations) / n, BilledMillis: d.billed / n})
			if f != fn {
				procs = append(procs, fmt.Sprintf("%s %.2g × %.3g ms, %.3g records a batch", f, float64(d.invocations)/n, d.billed/float64(d.invocations), float64(d.records)/float64(d.invocations)))
			}
		}
		commands := float64(cmds.n.Load() - beforeCmds)
		scripts := afterStats.scriptCalls - beforeStats.scriptCalls
		scriptCPU := afterStats.scriptMicros - beforeStats.scriptMicros
		transferred := afterStats.netBytes - beforeStats.netBytes - beforeStats.replyBytes
		u.ECPU = costECPU(commands, scripts, scriptCPU, perGET, transferred) / n
		added, err := costEvents(events, seen)
		if err != nil {
			return sec, err
		}
		var jsonBytes float64
		for _, e := range added.events {
			line, err := analytics.FirehoseRecord(e)
			if err != nil {
				return sec, err
			}
			jsonBytes += float64(len(line))
		}
		if k := float64(len(added.events)); k > 0 {
			u.AnalyticsEvents = k / n
			u.EventBytes = jsonBytes / k
			u.StoredBytes = added.parquetBytes / k
		}
		floor := cost.Units{
			Lambda:      []cost.Invocations{{Function: fn, MemoryMB: memory[fn], Count: 1, BilledMillis: floorMillis[fl.call]}},
			APIRequests: 1, ReadUnits: r.rcu, WriteUnits: r.wcu, ECPU: fl.ecpu,
			AnalyticsEvents: u.AnalyticsEvents, EventBytes: u.EventBytes, StoredBytes: u.StoredBytes,
		}
		for _, sh := range routesProcessorShares() {
			if sh.writes.name == l.name {
				floor.ReadUnits += sh.rcu
				floor.WriteUnits += sh.wcu
			}
		}
		all = append(all, measured{name: l.name, key: calls[0].Route.Key(), units: u, floor: floor,
			commands: commands / n, kib: transferred / 1024 / n, scripts: scripts / n, micros: scriptCPU / math.Max(scripts, 1), processors: strings.Join(procs, "; "), events: u.AnalyticsEvents, jsonSize: u.EventBytes})
		fmt.Fprintf(os.Stderr, "bench: cost: %s: $%.2f per million (floor $%.2f)\n", l.name, p.PerMillion(u).Total(), p.PerMillion(floor).Total())
	}

	// The tables.
	var b strings.Builder
	fmt.Fprintf(&b, "Prices: AWS's public on-demand list prices in %s as read on %s (infra/cost.OnDemand; free tiers, volume tiers and savings plans left out), from %s. ", p.Region, p.Date, strings.Join(p.Sources, ", "))
	fmt.Fprintf(&b, "Lambda arm64 $%.10f per GB-second and $%.2f per million requests; HTTP API $%.2f per million requests (first 300M a month); DynamoDB on-demand $%.3f per million write and $%.3f per million read request units; ElastiCache Serverless for Valkey (the stack's default engine) $%.4f per million ECPUs and $%.3f per GB-hour; Firehose Direct PUT $%.3f per GB ingested (each record rounded up to 5 KB), $%.3f per GB converted to Parquet, $%.3f per GB dynamically partitioned and $%.3f per 1,000 objects delivered; S3 Standard $%.3f per 1,000 PUTs and $%.3f per GB-month. ",
		p.LambdaGBSecond, p.LambdaRequest*1e6, p.HTTPAPIRequest*1e6, p.DynamoDBWrite*1e6, p.DynamoDBRead*1e6, p.CacheECPU*1e6, p.CacheGBHour, p.FirehoseGB, p.FirehoseConversionGB, p.FirehosePartitioningGB, p.FirehoseObject*1000, p.S3Put*1000, p.S3GBMonth)
	sec.Intro = fmt.Sprintf("What each route costs on AWS, from units measured through the local stack (gateway, in-process handlers, the stream processors, DynamoDB Local, redis-server) over %d requests of each route after as many warm-up ones, one at a time, the processors applying them before and after (the capacity section's loads, floors and DynamoDB meter). "+
		"Lambda: each invocation's handler time measured around the handler (stack Options.Invoked: the gateway and authorizers apart), rounded up to the millisecond as Lambda bills it, at each function's memory in the synthesized template; a processor's batches shared over the writes they carried (the local pollers' batches are small, so this share is an upper bound). "+
		"DynamoDB: the capacity meter, over the route's function and every stream processor. "+
		"Redis ECPUs: every command the stack's client sent (go-redis hook, pipelines counted per command, budget checks included), each script weighted by its vCPU time (INFO commandstats) over a plain GET's (redis-server CPU per unpipelined GET, %.1f µs here), and never less than the bytes transferred (INFO stats) per KiB: ElastiCache bills 1 ECPU per simple command per KB, more for commands that take more vCPU. "+
		"Firehose+S3: the analytics events the route's writes became (read back from the local export), at the bytes of their Firehose record line, 500 a record, plus Parquet conversion and partitioning of those bytes, an object (and its S3 PUT) per 128 MiB buffer, and the events' Parquet bytes (rewritten into one Snappy file per event type, as Firehose's larger files hold them) kept a month in S3 Standard. "+
		"The floor prices the same route at its floor units: the capacity section's DynamoDB floor, one Redis command where Redis serves the read or a processor moves a count or board (0 otherwise), one invocation billed as long as one bare call of the kind the route must make (here, billed: PutItem %.0f ms, TransactWriteItems of 2 items %.0f ms, GetItem %.0f ms, Redis GET %.0f ms), no processor invocation, one API request, the same analytics. ",
		costRequests, perGET, floorMillis[routesPutItem], floorMillis[routesTransact], floorMillis[routesGetItem], floorMillis[costRedisCall]) + b.String()

	var body strings.Builder
	body.WriteString("**Dollars per million operations**\n\n| route | Lambda | API Gateway | DynamoDB | Redis | Firehose+S3 | total | floor | ratio |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	units := map[string][2]cost.Units{}
	for _, m := range all {
		d, f := p.PerMillion(m.units), p.PerMillion(m.floor)
		units[m.name] = [2]cost.Units{m.units, m.floor}
		fmt.Fprintf(&body, "| %s — %s | %s | %s | %s | %s | %s | **%s** | %s | %.2f× |\n", m.name, m.key,
			costMoney(d.Lambda), costMoney(d.API), costMoney(d.DynamoDB), costMoney(d.Redis), costMoney(d.Analytics), costMoney(d.Total()), costMoney(f.Total()), d.Total()/f.Total())
	}
	body.WriteString("\n**Units per operation** (what the dollars above are made of; every function at its template memory)\n\n| route | its Lambda, billed | processors: invocations per operation × billed ms a batch | RRU | WRU | Redis: commands (scripts × µs each), KiB, ECPU | analytics events × bytes |\n|---|---|---|---:|---:|---|---|\n")
	for _, m := range all {
		f := m.units.Lambda[0]
		procs := m.processors
		if procs == "" {
			procs = "—"
		}
		fmt.Fprintf(&body, "| %s | %s %.3g ms (%d MB) | %s | %.3g | %.3g | %.3g (%.3g × %.0f µs), %.3g, %.3g | %.3g × %.0f B |\n", m.name, f.Function, f.BilledMillis, f.MemoryMB, procs, m.units.ReadUnits, m.units.WriteUnits, m.commands, m.scripts, m.micros, m.kib, m.units.ECPU, m.events, m.jsonSize)
	}
	fmt.Fprintf(&body, "\nCache storage: a board member takes %.0f B (INFO used_memory delta over %d members loaded as a rebuild loads them; floor: a plain sorted set of the same IDs, %.0f B): $%.2f per million members a month.\n", board, costMembers, plain, p.CacheMonth(1e6*board))

	body.WriteString("\n**Dollars per month at the seeds' loads** (a month of 730 hours; a seed's daily volume where it gives one, else 20% of its peak rate sustained)\n\n| seed | load | priced at | mix | Lambda | API Gateway | DynamoDB | Redis | Firehose+S3 | total a month | floor | ratio | biggest line items |\n|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, s := range cost.Seeds() {
		m, err := p.Month(s, units, board, plain)
		if err != nil {
			return sec, err
		}
		t, f := m.Total(), m.FloorTotal()
		var big []string
		for _, it := range m.Biggest(3) {
			big = append(big, fmt.Sprintf("%s %s (%.0f%%)", it.What, costMoney(it.Dollars), 100*it.Dollars/t.Total()))
		}
		fmt.Fprintf(&body, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | **%s** | %s | %.2f× | %s |\n", s.Name, s.Says, s.Basis, s.Mix,
			costMoney(t.Lambda), costMoney(t.API), costMoney(t.DynamoDB), costMoney(t.Redis), costMoney(t.Analytics), costMoney(t.Total()), costMoney(f.Total()), t.Total()/f.Total(), strings.Join(big, "; "))
	}
	body.WriteString("\nRedis storage is priced where a seed states a population (004: its 10M daily actives on the live-streak board); the others' caches hold what their players keep there, at the per-million-members figure above. CloudFront and WAF in front of the API are not priced here.\n")
	sec.Body = body.String()
	return sec, nil
}

// costFunctions are the functions whose work is a route's: its own and
// every stream processor, each once (the analytics shipper reads three
// streams as one function).
func costFunctions(fn string) []string {
	out := []string{fn}
	seen := map[string]bool{fn: true}
	for _, p := range routes.Processors() {
		if !seen[p.Function] {
			seen[p.Function] = true
			out = append(out, p.Function)
		}
	}
	return out
}

// costMoney prints dollars with the precision they deserve.
func costMoney(v float64) string {
	switch {
	case v == 0:
		return "$0"
	case v >= 1000:
		s := strconv.FormatFloat(math.Round(v), 'f', 0, 64)
		for i := len(s) - 3; i > 0; i -= 3 {
			s = s[:i] + "," + s[i:]
		}
		return "$" + s
	case v >= 10:
		return fmt.Sprintf("$%.0f", v)
	case v >= 0.1:
		return fmt.Sprintf("$%.2f", v)
	default:
		return fmt.Sprintf("$%.2g", v)
	}
}

// costBilled is the mean of durations each rounded up to the millisecond.
func costBilled(took []time.Duration) float64 {
	var sum float64
	for _, d := range took {
		sum += math.Ceil(Millis(d))
	}
	return sum / float64(len(took))
}

// costDuration is one function's invocations so far.
type costDuration struct {
	invocations, records int
	// billed is the sum of each invocation's milliseconds rounded up.
	billed float64
}

func (d costDuration) minus(b costDuration) costDuration {
	return costDuration{d.invocations - b.invocations, d.records - b.records, d.billed - b.billed}
}

// costInvocations records the stack's invocations (stack Options.Invoked)
// per function; a processor's tick (no records) is no request's.
type costInvocations struct {
	mu sync.Mutex
	by map[string]costDuration
}

func (c *costInvocations) add(fn string, records int, took time.Duration) {
	if records == 0 && costProcessors[fn] {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.by[fn]
	d.invocations++
	d.records += records
	d.billed += math.Ceil(Millis(took))
	c.by[fn] = d
}

func (c *costInvocations) snapshot() map[string]costDuration {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]costDuration, len(c.by))
	for k, v := range c.by {
		out[k] = v
	}
	return out
}

// costProcessors names the stream processors.
var costProcessors = func() map[string]bool {
	out := map[string]bool{}
	for _, p := range routes.Processors() {
		out[p.Function] = true
	}
	return out
}()

// costCommands counts every command the stack's Redis client sends, each
// command of a pipeline apart.
type costCommands struct{ n atomic.Int64 }

func (c *costCommands) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *costCommands) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !stack.IsTick(ctx) {
			c.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (c *costCommands) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !stack.IsTick(ctx) {
			c.n.Add(int64(len(cmds)))
		}
		return next(ctx, cmds)
	}
}

// costStats are redis-server's counters the ECPU estimate reads.
type costStats struct {
	scriptCalls, scriptMicros, netBytes, replyBytes float64
	cpuMicros                                       float64
}

// costScripts are the commands that run a script.
var costScripts = map[string]bool{"evalsha": true, "eval": true, "evalsha_ro": true, "eval_ro": true, "fcall": true, "fcall_ro": true}

// costRedisStats reads INFO commandstats, stats and cpu; replyBytes is
// the size of the INFO reply itself, which the next reading's net bytes
// count.
func costRedisStats(ctx context.Context, rdb *redis.Client) (costStats, error) {
	raw, err := rdb.Info(ctx, "commandstats", "stats", "cpu").Result()
	if err != nil {
		return costStats{}, err
	}
	s := costStats{replyBytes: float64(len(raw) + 64)}
	for _, line := range strings.Split(raw, "\r\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch {
		case strings.HasPrefix(k, "cmdstat_") && costScripts[strings.TrimPrefix(k, "cmdstat_")]:
			for _, kv := range strings.Split(v, ",") {
				name, val, _ := strings.Cut(kv, "=")
				f, _ := strconv.ParseFloat(val, 64)
				switch name {
				case "calls":
					s.scriptCalls += f
				case "usec":
					s.scriptMicros += f
				}
			}
		case k == "total_net_input_bytes" || k == "total_net_output_bytes":
			f, _ := strconv.ParseFloat(v, 64)
			s.netBytes += f
		case k == "used_cpu_user" || k == "used_cpu_sys":
			f, _ := strconv.ParseFloat(v, 64)
			s.cpuMicros += f * 1e6
		}
	}
	return s, nil
}

// costGETCPU is redis-server's CPU time per plain GET of a small key,
// sent one at a time: what ElastiCache bills as one ECPU.
func costGETCPU(ctx context.Context, rdb *redis.Client) (float64, error) {
	const n = 5000
	if err := rdb.Set(ctx, "bench-cost-floor", "x", 0).Err(); err != nil {
		return 0, err
	}
	before, err := costRedisStats(ctx, rdb)
	if err != nil {
		return 0, err
	}
	for range n {
		if err := rdb.Get(ctx, "bench-cost-floor").Err(); err != nil {
			return 0, err
		}
	}
	after, err := costRedisStats(ctx, rdb)
	if err != nil {
		return 0, err
	}
	return (after.cpuMicros - before.cpuMicros) / n, nil
}

// costECPU estimates the ECPUs of commands, scripts of them taking
// scriptMicros of vCPU, a plain GET perGET, transferring bytes: a command
// 1, a script its vCPU time over a GET's (at least 1 each), and never less
// than the KiB transferred.
func costECPU(commands, scripts, scriptMicros, perGET, bytes float64) float64 {
	cpu := commands - scripts + math.Max(scripts, scriptMicros/perGET)
	return math.Max(cpu, bytes/1024)
}

// costFiles lists the Parquet files under dir.
func costFiles(dir string) (map[string]bool, error) {
	seen := map[string]bool{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) {
				return nil
			}
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".parquet") {
			seen[path] = true
		}
		return nil
	})
	return seen, err
}

// costExport is what the local export gained: the events, and their
// Parquet bytes when each event type's are written into one file.
type costExport struct {
	events       []analytics.Event
	parquetBytes float64
}

// costEvents reads the events of the Parquet files under dir not in seen.
func costEvents(dir string, seen map[string]bool) (costExport, error) {
	now, err := costFiles(dir)
	if err != nil {
		return costExport{}, err
	}
	var paths []string
	for p := range now {
		if !seen[p] {
			paths = append(paths, p)
		}
	}
	sort.Strings(paths)
	byType := map[string][]analytics.Event{}
	var out costExport
	for _, path := range paths {
		rows, err := parquet.ReadFile[analytics.Event](path)
		if err != nil {
			return out, err
		}
		// …/events/event_type=<type>/dt=…/hour=…/<file>
		typ := strings.TrimPrefix(filepath.Base(filepath.Dir(filepath.Dir(filepath.Dir(path)))), "event_type=")
		for i := range rows {
			rows[i].EventType = typ
		}
		byType[typ] = append(byType[typ], rows...)
		out.events = append(out.events, rows...)
	}
	for _, rows := range byType {
		var buf bytes.Buffer
		w := parquet.NewGenericWriter[analytics.Event](&buf, parquet.Compression(&parquet.Snappy))
		if _, err := w.Write(rows); err != nil {
			return out, err
		}
		if err := w.Close(); err != nil {
			return out, err
		}
		out.parquetBytes += float64(buf.Len())
	}
	return out, nil
}

// costMemberBytes loads costMembers members into a board (as a rebuild
// loads it) and into a plain sorted set of the same IDs and scores, and
// returns each one's INFO used_memory delta per member.
func costMemberBytes(ctx context.Context, env *Env) (board, plain float64, err error) {
	opts, err := redis.ParseURL(env.Redis.URL())
	if err != nil {
		return 0, 0, err
	}
	opts.DB = 14
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	if err := rdb.FlushDB(ctx).Err(); err != nil {
		return 0, 0, err
	}
	defer rdb.FlushDB(context.WithoutCancel(ctx))
	base, err := rankingUsedMemory(ctx, rdb)
	if err != nil {
		return 0, 0, err
	}
	for i := 0; i < costMembers; {
		zs := make([]redis.Z, 0, 1000)
		for ; len(zs) < cap(zs) && i < costMembers; i++ {
			zs = append(zs, redis.Z{Score: float64(rankingScore(i)), Member: rankingID(i)})
		}
		if err := rdb.ZAdd(ctx, "bench-cost-plain", zs...).Err(); err != nil {
			return 0, 0, err
		}
	}
	mid, err := rankingUsedMemory(ctx, rdb)
	if err != nil {
		return 0, 0, err
	}
	e := ranking.New(rdb)
	b := ranking.Board{Tag: "bench-cost", Name: "members"}
	l, err := e.BeginLoad(ctx, b, costMembers)
	if err != nil {
		return 0, 0, err
	}
	batch := make([]ranking.Item, 0, 8000)
	for i := range costMembers {
		batch = append(batch, ranking.Item{ID: rankingID(i), Score: rankingScore(i), ReachedAt: rankingReached(i), Version: 1})
		if len(batch) == cap(batch) || i == costMembers-1 {
			if err := l.Add(ctx, batch...); err != nil {
				return 0, 0, err
			}
			batch = batch[:0]
		}
	}
	if err := l.Commit(ctx); err != nil {
		return 0, 0, err
	}
	end, err := rankingUsedMemory(ctx, rdb)
	if err != nil {
		return 0, 0, err
	}
	return float64(end-mid) / costMembers, float64(mid-base) / costMembers, nil
}
