package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rallyhq/rally/infra/local/stack"
	"github.com/rallyhq/rally/shared/leaderboards"
	lbbind "github.com/rallyhq/rally/shared/leaderboards/bind"
	"github.com/rallyhq/rally/shared/routes"
)

// ageingDB is the Redis database of the ageing section's stack.
const ageingDB = 9

// ageingBoard is the daily board the simulation plays.
const ageingBoard = "ageing-daily"

// ageingPlan is a simulation's size: a pool of players, how many of them
// play each day, and how many days.
type ageingPlan struct {
	Players, Active, Days int
}

// ageingFull is the section's plan (RALLY_BENCH_AGEING_PLAYERS,
// _ACTIVE and _DAYS override it). DynamoDB Local takes an import's score
// lines at a few hundred a second here, so 100k players a day for 60
// days would take hours: each day a share of the pool plays.
func ageingFull() ageingPlan {
	return ageingPlan{
		Players: envInt("RALLY_BENCH_AGEING_PLAYERS", 100_000),
		Active:  envInt("RALLY_BENCH_AGEING_ACTIVE", 1_000),
		Days:    envInt("RALLY_BENCH_AGEING_DAYS", 60),
	}
}

// ageingDay is what Redis holds after a day has closed.
type ageingDay struct {
	Day int
	// Used is INFO used_memory over what it was before the board was
	// defined.
	Used int64
	// Periods are the board periods with keys in Redis.
	Periods []string
}

// ageingResult is a simulation's outcome.
type ageingResult struct {
	Plan     ageingPlan
	Baseline int64 // used_memory before the board was defined
	Days     []ageingDay
	// Archived is how many days have an archive head, and their
	// members in all.
	Archived, ArchivedMembers int
	Took                      time.Duration
}

// day is the figures after day d (1-based).
func (r ageingResult) day(d int) ageingDay { return r.Days[d-1] }

func benchAgeing(ctx context.Context, env *Env) (Section, error) {
	plan := ageingFull()
	if plan.Days < 2 {
		return Section{}, fmt.Errorf("the ageing section plays at least 2 days, not %d", plan.Days)
	}
	sec := Section{
		Title: fmt.Sprintf("Ageing: a daily board through %d days", plan.Days),
		Intro: fmt.Sprintf("A daily board on the local stack (its own DynamoDB Local, Redis database %d of the run's redis-server) played through %d simulated days on the stack's clock: ", ageingDB, plan.Days) +
			fmt.Sprintf("each day %d distinct players drawn at random from a pool of %d submit a score (a JSON Lines file through the import job, POST /v1/ops/jobs kind import, the bulk write path; the leaderboard processor applies it to Redis), ", plan.Active, plan.Players) +
			"then the clock moves past the day's end and the schedule closes the day (archive pages in DynamoDB, JSON Lines parts) and takes out of Redis the day whose leave time (the end of the next day) has passed by the stack's clock (the expiry its close set in Redis, counted on Redis's own clock, is still most of a day away). " +
			fmt.Sprintf("Not 100k players a day: DynamoDB Local takes the import's score lines at a few hundred a second on this machine, so %d a day keeps the section within 10 minutes (each day's board is the same size, so memory still has to stay flat across the days for the goal to be met). ", plan.Active) +
			"Memory is INFO used_memory after the day's close, less the server's used_memory before the board was defined (the run's other sections keep data in other databases of the same server), the least of 5 readings 0.1 s apart with the slow log emptied first " +
			"(redis-server keeps its last 128 slow commands with their arguments: on this loaded machine they filled about 300 KiB over the first 40 days, then stayed; not Rally's data, so it is left out); floor: the same after day 2.",
	}
	r, err := ageingSimulate(ctx, env, plan, true)
	if err != nil {
		return sec, err
	}
	d2, last := r.day(2), r.day(plan.Days)
	var mid []string
	for _, d := range []int{10, 20, 30, 40, 50} {
		if d < plan.Days {
			mid = append(mid, fmt.Sprintf("day %d: %.1f KiB", d, float64(r.day(d).Used)/1024))
		}
	}
	ratio := float64(last.Used) / float64(d2.Used)
	sec.Rows = append(sec.Rows, Row{
		Name: "Redis used_memory after day 2", Value: float64(d2.Used) / 1024, Floor: float64(d2.Used) / 1024, Unit: "KiB", FloorName: "itself",
		Note: fmt.Sprintf("board periods in Redis: %s", strings.Join(d2.Periods, ", ")),
	}, Row{
		Name: fmt.Sprintf("Redis used_memory after day %d", plan.Days), Value: float64(last.Used) / 1024, Floor: float64(d2.Used) / 1024, Unit: "KiB", FloorName: "after day 2",
		Goal: "≤ 1.2×", Met: Within(ratio, 1.2),
		Note: fmt.Sprintf("board periods in Redis: %s; %s", strings.Join(last.Periods, ", "), strings.Join(mid, ", ")),
	}, Row{
		Name: "days archived", Value: float64(r.Archived), Floor: float64(plan.Days), Unit: "days", FloorName: "days played",
		Note: fmt.Sprintf("%d members archived in all; the server's used_memory before the board: %.1f MiB; simulation took %s", r.ArchivedMembers, float64(r.Baseline)/(1<<20), r.Took.Round(time.Second)),
	})
	return sec, nil
}

// ageingSimulate plays plan on a stack of its own and returns what Redis
// held after each day's close.
func ageingSimulate(ctx context.Context, env *Env, plan ageingPlan, progress bool) (ageingResult, error) {
	res := ageingResult{Plan: plan}
	start := time.Now()
	st, err := routesStart(ctx, env, "bench-ageing", ageingDB, nil, func(o *stack.Options) { o.TickEvery = 100 * time.Millisecond })
	if err != nil {
		return res, err
	}
	defer st.Close()
	opts, err := redis.ParseURL(fmt.Sprintf("%s/%d", env.Redis.URL(), ageingDB))
	if err != nil {
		return res, err
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	// The first day is today by the wall clock: what the stores keep
	// for a while (counted on the wall clock) outlives the simulation.
	first := time.Now().UTC().Truncate(24 * time.Hour)
	st.Clock().Set(first.Add(time.Minute))
	if err := st.awaitTrusted(ctx); err != nil {
		return res, err
	}
	if res.Baseline, err = ageingUsedMemory(ctx, rdb); err != nil {
		return res, err
	}
	if _, err := st.do(ctx, routesCall{Route: routes.PutLeaderboard, Path: "/v1/leaderboards/" + ageingBoard,
		Body: `{"title":"Ageing","policy":"best","order":"desc","reset":"daily","tie_break":"earliest","status":"ACTIVE","max_n":100,"timezone":"UTC"}`}); err != nil {
		return res, err
	}
	rng := rand.New(rand.NewPCG(uint64(plan.Players), uint64(plan.Days)))
	for d := range plan.Days {
		day := first.AddDate(0, 0, d)
		if err := ageingPlay(ctx, st, rng, plan, day, d); err != nil {
			return res, fmt.Errorf("day %d: %w", d+1, err)
		}
		if err := ageingClose(ctx, st, rdb, day); err != nil {
			return res, fmt.Errorf("day %d: %w", d+1, err)
		}
		periods, err := ageingPeriods(ctx, rdb)
		if err != nil {
			return res, err
		}
		used, err := ageingUsedMemory(ctx, rdb)
		if err != nil {
			return res, err
		}
		res.Days = append(res.Days, ageingDay{Day: d + 1, Used: used - res.Baseline, Periods: periods})
		if progress {
			fmt.Fprintf(os.Stderr, "bench: ageing: day %d closed after %s: used_memory +%.1f KiB, periods in Redis %v\n",
				d+1, time.Since(start).Round(time.Second), float64(used-res.Baseline)/1024, periods)
		}
	}
	archives := lbbind.Archives(st.Deps())
	for d := range plan.Days {
		h, found, err := archives.Head(ctx, ageingBoard, first.AddDate(0, 0, d).Format(time.DateOnly))
		if err != nil {
			return res, err
		}
		if found {
			res.Archived++
			res.ArchivedMembers += int(h.Total)
		}
	}
	res.Took = time.Since(start)
	return res, nil
}

// ageingPlay imports day d's scores: plan.Active distinct players of the
// pool, reached across the day, with the clock late in the day; then
// waits for the processors to have applied them.
func ageingPlay(ctx context.Context, st *routesStack, rng *rand.Rand, plan ageingPlan, day time.Time, d int) error {
	st.Clock().Set(day.Add(23 * time.Hour))
	path := filepath.Join(st.dir, fmt.Sprintf("ageing-day-%02d.jsonl", d+1))
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	players := rng.Perm(plan.Players)[:min(plan.Active, plan.Players)]
	step := 22 * time.Hour / time.Duration(len(players))
	for i, p := range players {
		line, _ := json.Marshal(map[string]any{
			"type": "score", "leaderboard_id": ageingBoard, "player_id": fmt.Sprintf("age-p%06d", p),
			"score": rng.Int64N(1_000_000), "reached_at": day.Add(time.Duration(i) * step).Format(time.RFC3339Nano),
		})
		w.Write(append(line, '\n'))
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := st.importFile(ctx, path); err != nil {
		return err
	}
	return st.WaitIdle(ctx)
}

// ageingClose moves the clock past the day's end and waits for the
// schedule to have closed it (the close's settling follows the clock,
// moved on while it waits) and taken the day before out of Redis.
func ageingClose(ctx context.Context, st *routesStack, rdb *redis.Client, day time.Time) error {
	period := day.Format(time.DateOnly)
	st.Clock().Set(day.AddDate(0, 0, 1).Add(leaderboards.CloseAfter))
	id := leaderboards.CloseJobID(ageingBoard, period)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var j struct {
			State string `json:"state"`
			Error string `json:"error"`
		}
		body, err := st.do(ctx, routesCall{Route: routes.GetJob, Path: "/v1/ops/jobs/" + id})
		switch {
		case err != nil && !strings.Contains(err.Error(), ": 404 "):
			return err
		case err == nil:
			if err := json.Unmarshal(body, &j); err != nil {
				return err
			}
		}
		if j.State != "" && j.State != "RUNNING" {
			if j.State != "DONE" {
				return fmt.Errorf("close %s ended %s: %s", id, j.State, j.Error)
			}
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("close %s not done after 2 minutes (%s)", id, j.State)
		}
		st.Clock().Advance(2 * time.Second)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	// The day before leaves Redis at the schedule's next tick.
	before := day.AddDate(0, 0, -1).Format(time.DateOnly)
	for deadline := time.Now().Add(30 * time.Second); ; {
		left, err := ageingKeys(ctx, rdb, before)
		if err != nil || left == 0 {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s still has %d keys in Redis 30 s after the next day's end", before, left)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// ageingKeys counts the keys of one period of the board in the
// section's database.
func ageingKeys(ctx context.Context, rdb *redis.Client, period string) (int, error) {
	keys, err := rdb.Keys(ctx, "rank:{lb:"+ageingBoard+"#"+period+"*").Result()
	return len(keys), err
}

// ageingPeriods lists the board's periods with keys in the database
// (a scan of the section's own small database).
func ageingPeriods(ctx context.Context, rdb *redis.Client) ([]string, error) {
	seen := map[string]bool{}
	var periods []string
	iter := rdb.Scan(ctx, 0, "rank:{lb:"+ageingBoard+"#*", 1000).Iterator()
	for iter.Next(ctx) {
		k := strings.TrimPrefix(iter.Val(), "rank:{lb:"+ageingBoard+"#")
		p, _, _ := strings.Cut(k, "}")
		p, _, _ = strings.Cut(p, "~")
		if !seen[p] {
			seen[p] = true
			periods = append(periods, p)
		}
	}
	slices.Sort(periods)
	return periods, iter.Err()
}

// ageingUsedMemory is the least INFO used_memory of a few readings a
// tenth of a second apart, the slow log emptied first: what the keys
// hold, without the moment's client buffers (a pipeline or a script's
// reply in flight) or the server's log of its last 128 slow commands
// (each with its arguments: a few KiB that fill up over the first weeks
// on a loaded machine, then stay).
func ageingUsedMemory(ctx context.Context, rdb *redis.Client) (int64, error) {
	if err := rdb.Do(ctx, "SLOWLOG", "RESET").Err(); err != nil {
		return 0, err
	}
	least := int64(-1)
	for i := range 5 {
		if i > 0 {
			select {
			case <-ctx.Done():
				return 0, ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
		used, err := rankingUsedMemory(ctx, rdb)
		if err != nil {
			return 0, err
		}
		if least < 0 || used < least {
			least = used
		}
	}
	return least, nil
}
