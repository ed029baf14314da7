package main

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rallyhq/rally/shared/ranking"
)

// The ranking section: the ranking engine the leaderboard routes read
// (shared/ranking) beside a plain sorted set of the same members and
// scores on the same redis-server.
const (
	rankingK        = 5     // neighbours on each side of a rank read
	rankingTopN     = 100   // entries of a top read
	rankingSamples  = 20000 // timed reads of each kind
	rankingZAddCmd  = 1000  // members per ZADD of the plain set
	rankingZAddPipe = 16    // ZADDs per pipeline
	rankingPlainKey = "bench:ranking:{plain}"
)

var rankingBoard = ranking.Board{Tag: "bench-ranking", Name: "season"}

// rankingAroundScript is ZREVRANK + ZREVRANGE in one bare script.
var rankingAroundScript = redis.NewScript(`
local r = redis.call('ZREVRANK', KEYS[1], ARGV[1])
if not r then return {} end
local k = tonumber(ARGV[2])
return redis.call('ZREVRANGE', KEYS[1], math.max(r - k, 0), r + k, 'WITHSCORES')`)

// rankingMembers is the board size: 1M, or 10M with RALLY_BENCH_SCALE=1.
func rankingMembers() int {
	if os.Getenv("RALLY_BENCH_SCALE") == "1" {
		return 10_000_000
	}
	return 1_000_000
}

// rankingMix is splitmix64: deterministic IDs and scores, so a read can
// name any member without keeping millions of strings.
func rankingMix(i uint64) uint64 {
	i += 0x9e3779b97f4a7c15
	i = (i ^ (i >> 30)) * 0xbf58476d1ce4e5b9
	i = (i ^ (i >> 27)) * 0x94d049bb133111eb
	return i ^ (i >> 31)
}

// rankingID is member i's ID, 36 bytes like a Cognito subject.
func rankingID(i int) string {
	a, c := rankingMix(uint64(i)), rankingMix(uint64(i)+1<<40)
	return fmt.Sprintf("%08x-%04x-4%03x-a%03x-%012x", a>>32, a>>16&0xffff, a&0xfff, c>>52, c&0xffffffffffff)
}

// rankingScore is member i's score: 0..9999, skewed towards high scores
// (the square root of a uniform draw), so a million members share ten
// thousand values and most scores are tied with about a hundred others.
func rankingScore(i int) int64 {
	return int64(math.Sqrt(float64(rankingMix(uint64(i)+7) % 100_000_000)))
}

func rankingReached(i int) time.Time {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	return t0.Add(time.Duration(rankingMix(uint64(i)+9)%(30*24*3600*1000)) * time.Millisecond)
}

func benchRanking(ctx context.Context, env *Env) (Section, error) {
	n := rankingMembers()
	opts, err := redis.ParseURL(env.Redis.URL())
	if err != nil {
		return Section{}, err
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	e := ranking.New(rdb)
	defer func() {
		// Leave the shared redis-server as found.
		cctx := context.WithoutCancel(ctx)
		_ = e.Delete(cctx, rankingBoard)
		_ = rdb.Unlink(cctx, rankingPlainKey).Err()
	}()

	// The plain sorted set: member = ID, score = score.
	base, err := rankingUsedMemory(ctx, rdb)
	if err != nil {
		return Section{}, err
	}
	t := time.Now()
	for i := 0; i < n; {
		pipe := rdb.Pipeline()
		for c := 0; c < rankingZAddPipe && i < n; c++ {
			zs := make([]redis.Z, 0, rankingZAddCmd)
			for ; len(zs) < rankingZAddCmd && i < n; i++ {
				zs = append(zs, redis.Z{Score: float64(rankingScore(i)), Member: rankingID(i)})
			}
			pipe.ZAdd(ctx, rankingPlainKey, zs...)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return Section{}, fmt.Errorf("load the plain sorted set: %w", err)
		}
	}
	plainUsed, err := rankingUsedMemory(ctx, rdb)
	if err != nil {
		return Section{}, err
	}
	plainUsed -= base
	fmt.Fprintf(os.Stderr, "bench: ranking: plain sorted set of %d members loaded in %s\n", n, time.Since(t).Round(time.Millisecond))

	// The board, loaded as a rebuild loads it.
	base = plainUsed + base
	t = time.Now()
	l, err := e.BeginLoad(ctx, rankingBoard, n)
	if err != nil {
		return Section{}, err
	}
	batch := make([]ranking.Item, 0, 8000)
	for i := range n {
		batch = append(batch, ranking.Item{ID: rankingID(i), Score: rankingScore(i), ReachedAt: rankingReached(i), Version: 1})
		if len(batch) == cap(batch) || i == n-1 {
			if err := l.Add(ctx, batch...); err != nil {
				return Section{}, err
			}
			batch = batch[:0]
		}
	}
	if err := l.Commit(ctx); err != nil {
		return Section{}, err
	}
	boardUsed, err := rankingUsedMemory(ctx, rdb)
	if err != nil {
		return Section{}, err
	}
	boardUsed -= base
	fmt.Fprintf(os.Stderr, "bench: ranking: board of %d members loaded in %s\n", n, time.Since(t).Round(time.Millisecond))

	plainUsage, err := rankingMemoryUsage(ctx, rdb, rankingPlainKey)
	if err != nil {
		return Section{}, err
	}
	boardUsage, err := rankingMemoryUsage(ctx, rdb, "rank:{"+rankingBoard.Tag+"}:"+rankingBoard.Name+"|*")
	if err != nil {
		return Section{}, err
	}

	// Rank reads: the members to read, and their ranks in the plain set
	// (asked untimed, so the floor is one round trip of both commands).
	rng := rand.New(rand.NewPCG(1, 2))
	ids := make([]string, rankingSamples)
	ranks := make([]int64, rankingSamples)
	pipe := rdb.Pipeline()
	cmds := make([]*redis.IntCmd, rankingSamples)
	for s := range ids {
		ids[s] = rankingID(rng.IntN(n))
		cmds[s] = pipe.ZRevRank(ctx, rankingPlainKey, ids[s])
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return Section{}, err
	}
	for s, c := range cmds {
		ranks[s] = c.Val()
	}

	fmt.Fprintf(os.Stderr, "bench: ranking: %d rank reads of each kind\n", rankingSamples)
	engineAround := make([]time.Duration, 0, rankingSamples)
	plainAround := make([]time.Duration, 0, rankingSamples)
	scriptAround := make([]time.Duration, 0, rankingSamples)
	for s, id := range ids {
		// Alternate which goes first, so both see the same machine.
		engine := func() error {
			t := time.Now()
			_, window, _, err := e.Around(ctx, rankingBoard, id, rankingK)
			engineAround = append(engineAround, time.Since(t))
			if err == nil && len(window) == 0 {
				err = fmt.Errorf("rank of %s: empty window", id)
			}
			return err
		}
		plain := func() error {
			t := time.Now()
			p := rdb.Pipeline()
			rank := p.ZRevRank(ctx, rankingPlainKey, id)
			window := p.ZRevRangeWithScores(ctx, rankingPlainKey, max(ranks[s]-rankingK, 0), ranks[s]+rankingK)
			_, err := p.Exec(ctx)
			plainAround = append(plainAround, time.Since(t))
			if err == nil && (rank.Val() != ranks[s] || len(window.Val()) == 0) {
				err = fmt.Errorf("plain rank of %s: %d, was %d", id, rank.Val(), ranks[s])
			}
			return err
		}
		if err := rankingBoth(s, engine, plain); err != nil {
			return Section{}, err
		}
		// The same two commands in a bare script: what a script call
		// itself costs, to say where the engine's time goes.
		t := time.Now()
		err := rankingAroundScript.Run(ctx, rdb, []string{rankingPlainKey}, id, rankingK).Err()
		scriptAround = append(scriptAround, time.Since(t))
		if err != nil {
			return Section{}, fmt.Errorf("bare script rank of %s: %w", id, err)
		}
	}

	fmt.Fprintf(os.Stderr, "bench: ranking: %d top-%d reads of each kind\n", rankingSamples, rankingTopN)
	engineTop := make([]time.Duration, 0, rankingSamples)
	plainTop := make([]time.Duration, 0, rankingSamples)
	for s := range rankingSamples {
		engine := func() error {
			t := time.Now()
			top, _, err := e.Top(ctx, rankingBoard, rankingTopN)
			engineTop = append(engineTop, time.Since(t))
			if err == nil && len(top) != rankingTopN {
				err = fmt.Errorf("top %d: %d entries", rankingTopN, len(top))
			}
			return err
		}
		plain := func() error {
			t := time.Now()
			p := rdb.Pipeline()
			top := p.ZRevRangeWithScores(ctx, rankingPlainKey, 0, rankingTopN-1)
			p.ZCard(ctx, rankingPlainKey)
			_, err := p.Exec(ctx)
			plainTop = append(plainTop, time.Since(t))
			if err == nil && len(top.Val()) != rankingTopN {
				err = fmt.Errorf("plain top %d: %d entries", rankingTopN, len(top.Val()))
			}
			return err
		}
		if err := rankingBoth(s, engine, plain); err != nil {
			return Section{}, err
		}
	}

	size := rankingSize(n)
	latency := func(name string, engine, plain []time.Duration, p float64, floorName string) Row {
		v, f := Millis(Percentile(engine, p)), Millis(Percentile(plain, p))
		return Row{
			Name: fmt.Sprintf("%s, p%g", name, p), Value: v, Floor: f, Unit: "ms", FloorName: floorName,
			Goal: "≤ 1.3×", Met: Within(v/f, 1.3),
		}
	}
	rows := []Row{
		latency(fmt.Sprintf("rank + %d each side (Around), %s members", rankingK, size), engineAround, plainAround, 50, "pipelined ZREVRANK + ZREVRANGE"),
		latency(fmt.Sprintf("rank + %d each side (Around), %s members", rankingK, size), engineAround, plainAround, 99, "pipelined ZREVRANK + ZREVRANGE"),
		latency(fmt.Sprintf("top %d (Top), %s members", rankingTopN, size), engineTop, plainTop, 50, "pipelined ZREVRANGE + ZCARD"),
		latency(fmt.Sprintf("top %d (Top), %s members", rankingTopN, size), engineTop, plainTop, 99, "pipelined ZREVRANGE + ZCARD"),
	}
	for i, p := range []float64{50, 99} {
		if !*rows[i].Met {
			bare := Millis(Percentile(scriptAround, p))
			rows[i].Note = fmt.Sprintf("the engine reads in one Lua script (it finds the member's reached-at in its lookup bucket before ZREVRANK): "+
				"the same two commands in a bare script take %s ms (%.2f× the floor), so the script call costs %.0f%% of the gap and the lookup and decoding the rest",
				number(bare), bare/rows[i].Floor, 100*(bare-rows[i].Floor)/(rows[i].Value-rows[i].Floor))
		}
	}
	for i := range rows[2:] {
		if !*rows[2+i].Met {
			rows[2+i].Note = "the engine reads in a MULTI (entries and total consistent) and decodes reached-at from each member"
		}
	}
	memRow := func(name string, board, plain int64, goal bool, note string) Row {
		r := Row{
			Name: name, Value: float64(board) / float64(n), Floor: float64(plain) / float64(n),
			Unit: "B/member", FloorName: "plain ZSET, member = ID", Note: note,
		}
		if goal {
			r.Goal, r.Met = "≤ 1.6×", Within(r.Ratio(), 1.6)
		}
		return r
	}
	memNote := "the board's member is reached-at + ID (ties broken by who reached the score first), and an ID → member lookup in small hashes"
	rows = append(rows,
		memRow(fmt.Sprintf("memory per member, INFO used_memory delta, %s members", size), boardUsed, plainUsed, true, memNote),
		memRow(fmt.Sprintf("memory per member, MEMORY USAGE of the board's keys, %s members", size), boardUsage, plainUsage, false, "every element counted (SAMPLES 0)"),
	)
	return Section{
		Title: "Ranking",
		Intro: fmt.Sprintf("The ranking engine (shared/ranking) the leaderboard routes read, on a board of %s members "+
			"with 36-byte IDs and scores 0–9999 skewed high (about a hundred members share each score: ties are broken by who reached "+
			"the score first, then by ID), beside a plain sorted set of the same IDs and scores on the same redis-server. "+
			"%d reads of each kind from one client, the engine's and the plain set's alternating; latency is the client's, "+
			"round trip included. The plain set's rank read is given the member's rank beforehand, so its floor is one round trip "+
			"of the two commands. RALLY_BENCH_SCALE=1 measures 10M members.", size, rankingSamples),
		Rows: rows,
	}, nil
}

// rankingBoth runs a and b, in turn first.
func rankingBoth(s int, a, b func() error) error {
	if s%2 == 1 {
		a, b = b, a
	}
	if err := a(); err != nil {
		return err
	}
	return b()
}

func rankingSize(n int) string {
	if n%1_000_000 == 0 {
		return strconv.Itoa(n/1_000_000) + "M"
	}
	return strconv.Itoa(n)
}

func rankingUsedMemory(ctx context.Context, rdb *redis.Client) (int64, error) {
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("used_memory missing from INFO memory")
}

// rankingMemoryUsage sums MEMORY USAGE (every element counted) over the
// keys matching pattern.
func rankingMemoryUsage(ctx context.Context, rdb *redis.Client, pattern string) (int64, error) {
	var sum int64
	iter := rdb.Scan(ctx, 0, pattern, 1000).Iterator()
	var keys []string
	flush := func() error {
		pipe := rdb.Pipeline()
		cmds := make([]*redis.IntCmd, len(keys))
		for i, k := range keys {
			cmds[i] = pipe.MemoryUsage(ctx, k, 0)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return err
		}
		for _, c := range cmds {
			sum += c.Val()
		}
		keys = keys[:0]
		return nil
	}
	for iter.Next(ctx) {
		if keys = append(keys, iter.Val()); len(keys) == 1000 {
			if err := flush(); err != nil {
				return 0, err
			}
		}
	}
	if err := iter.Err(); err != nil {
		return 0, err
	}
	return sum, flush()
}
