package ranking

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rallyhq/rally/shared/ranking/internal/redistest"
)

// BenchmarkScale measures boards of 1M and 10M members on a private
// redis-server: client-side p50/p99 latency of Around(k=4) and Top(100)
// over random calls, and memory per member against a plain sorted set of
// the same IDs and scores (member = ID) in the same run. It loads millions
// of members, so it runs only with RALLY_BENCH_SCALE=1:
//
//	RALLY_BENCH_SCALE=1 go test ./shared/ranking -run '^$' -bench Scale -benchtime 20000x -timeout 60m
//
// RALLY_BENCH_SIZES (comma-separated) and RALLY_BENCH_IDS (uuid: 36-byte
// IDs like Cognito subjects, the default; short: 12-byte IDs) vary it.
func BenchmarkScale(b *testing.B) {
	if os.Getenv("RALLY_BENCH_SCALE") == "" {
		b.Skip("set RALLY_BENCH_SCALE=1 to load boards of millions of members")
	}
	sizes := []int{1_000_000, 10_000_000}
	if s := os.Getenv("RALLY_BENCH_SIZES"); s != "" {
		sizes = sizes[:0]
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(f)
			if err != nil {
				b.Fatalf("RALLY_BENCH_SIZES: %v", err)
			}
			sizes = append(sizes, n)
		}
	}
	idOf := uuidID
	if os.Getenv("RALLY_BENCH_IDS") == "short" {
		idOf = shortID
	}
	for _, n := range sizes {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) { benchBoard(b, n, idOf) })
	}
}

// Deterministic IDs and scores, so random reads can name any member
// without keeping millions of strings.
func mix(i uint64) uint64 {
	i += 0x9e3779b97f4a7c15
	i = (i ^ (i >> 30)) * 0xbf58476d1ce4e5b9
	i = (i ^ (i >> 27)) * 0x94d049bb133111eb
	return i ^ (i >> 31)
}

func uuidID(i int) string {
	a, c := mix(uint64(i)), mix(uint64(i)+1<<40)
	return fmt.Sprintf("%08x-%04x-4%03x-a%03x-%012x", a>>32, a>>16&0xffff, a&0xfff, c>>52, c&0xffffffffffff)
}

func shortID(i int) string { return fmt.Sprintf("p%011d", mix(uint64(i))%100_000_000_000) }

// Scores repeat a lot (many ties), as real leaderboards do.
func benchScore(i int) int64 { return int64(mix(uint64(i)+7) % 100_000) }

func benchReached(i int) time.Time {
	return t0.Add(time.Duration(mix(uint64(i)+9)%(30*24*3600*1000)) * time.Millisecond)
}

func usedMemory(b *testing.B, rdb *redis.Client) int64 {
	info, err := rdb.Info(context.Background(), "memory").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	b.Fatal("used_memory missing from INFO")
	return 0
}

// memoryUsage sums MEMORY USAGE (all elements counted) over keys.
func memoryUsage(b *testing.B, rdb *redis.Client, keys []string) int64 {
	ctx := context.Background()
	var sum int64
	for start := 0; start < len(keys); start += keyBatch {
		pipe := rdb.Pipeline()
		var cmds []*redis.IntCmd
		for _, k := range keys[start:min(start+keyBatch, len(keys))] {
			cmds = append(cmds, pipe.MemoryUsage(ctx, k, 0))
		}
		_, _ = pipe.Exec(ctx)
		for _, c := range cmds {
			sum += c.Val() // 0 for a bucket that does not exist
		}
	}
	return sum
}

func benchBoard(b *testing.B, n int, idOf func(int) string) {
	ctx := context.Background()
	rdb := redistest.Server(b)
	e := New(rdb)
	board := Board{Tag: "lb:bench", Name: "season"}

	// The plain sorted set: member = ID, score = score.
	plainKey := "bench:{plain}"
	base := usedMemory(b, rdb)
	start := time.Now()
	const perCmd = 1000
	for i := 0; i < n; {
		pipe := rdb.Pipeline()
		for c := 0; c < 16 && i < n; c++ {
			zs := make([]redis.Z, 0, perCmd)
			for ; len(zs) < perCmd && i < n; i++ {
				zs = append(zs, redis.Z{Score: float64(-benchScore(i)), Member: idOf(i)})
			}
			pipe.ZAdd(ctx, plainKey, zs...)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			b.Fatal(err)
		}
	}
	plainLoad := time.Since(start)
	plainUsed := usedMemory(b, rdb) - base

	// The board, loaded as a rebuild would.
	base = usedMemory(b, rdb)
	start = time.Now()
	l, err := e.BeginLoad(ctx, board, n)
	if err != nil {
		b.Fatal(err)
	}
	batch := make([]Item, 0, loadChunk*loadPipeline)
	for i := 0; i < n; i++ {
		batch = append(batch, Item{ID: idOf(i), Score: benchScore(i), ReachedAt: benchReached(i), Version: 1})
		if len(batch) == cap(batch) || i == n-1 {
			if err := l.Add(ctx, batch...); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	if err := l.Commit(ctx); err != nil {
		b.Fatal(err)
	}
	boardLoad := time.Since(start)
	boardUsed := usedMemory(b, rdb) - base

	plainUsage := memoryUsage(b, rdb, []string{plainKey})
	k := board.keys()
	slot, _ := rdb.HGet(ctx, k.meta(), "live").Result()
	level, _ := strconv.Atoi(rdb.HGet(ctx, k.meta(), "l"+slot).Val())
	boardKeys := []string{k.meta(), k.live()}
	k.eachBucket(slot, level, func(key string) { boardKeys = append(boardKeys, key) })
	boardUsage := memoryUsage(b, rdb, boardKeys)
	zsetUsage := memoryUsage(b, rdb, []string{k.live()})

	b.Logf("%d members, %d-byte IDs: plain sorted set loaded in %s, board in %s (%.0f items/s); lookup level %d",
		n, len(idOf(0)), plainLoad.Round(time.Millisecond), boardLoad.Round(time.Millisecond), float64(n)/boardLoad.Seconds(), level)
	b.Logf("used_memory delta: plain %.1f B/member, board %.1f B/member, ratio %.3f",
		float64(plainUsed)/float64(n), float64(boardUsed)/float64(n), float64(boardUsed)/float64(plainUsed))
	b.Logf("MEMORY USAGE: plain %.1f B/member, board %.1f B/member (sorted set %.1f, lookup %.1f), ratio %.3f",
		float64(plainUsage)/float64(n), float64(boardUsage)/float64(n), float64(zsetUsage)/float64(n),
		float64(boardUsage-zsetUsage)/float64(n), float64(boardUsage)/float64(plainUsage))

	b.Run("Memory", func(b *testing.B) {
		b.ReportMetric(float64(plainUsed)/float64(n), "plain-B/member")
		b.ReportMetric(float64(boardUsed)/float64(n), "board-B/member")
		b.ReportMetric(float64(boardUsed)/float64(plainUsed), "ratio")
	})
	rng := rand.New(rand.NewPCG(1, 2))
	b.Run("Around-k4", func(b *testing.B) {
		lat := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for range b.N {
			id := idOf(rng.IntN(n))
			t := time.Now()
			if _, _, _, err := e.Around(ctx, board, id, 4); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t))
		}
		reportLatency(b, lat)
	})
	b.Run("Top100", func(b *testing.B) {
		lat := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for range b.N {
			t := time.Now()
			if _, _, err := e.Top(ctx, board, 100); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t))
		}
		reportLatency(b, lat)
	})
}

func reportLatency(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	at := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))].Microseconds()) }
	b.ReportMetric(at(0.50), "p50-µs")
	b.ReportMetric(at(0.99), "p99-µs")
	b.ReportMetric(at(0.999), "p999-µs")
}
