package ranking

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rallyhq/rally/shared/ranking/internal/redistest"
)

// BenchmarkPartitionedScale measures one board of 25M members (by
// default) over 8 partitions on a local three-node Redis Cluster against
// the same members on one unpartitioned board in the same cluster (one
// shard), in one run: client-side p50/p99 of Around(k=4) and Top(100),
// and memory per member (used_memory summed over the nodes). It loads
// tens of millions of members, so it runs only with RALLY_BENCH_SCALE=1:
//
//	RALLY_BENCH_SCALE=1 go test ./shared/ranking -run '^$' -bench PartitionedScale -benchtime 20000x -timeout 120m
//
// RALLY_BENCH_SIZES (comma-separated) changes the size.
func BenchmarkPartitionedScale(b *testing.B) {
	if os.Getenv("RALLY_BENCH_SCALE") == "" {
		b.Skip("set RALLY_BENCH_SCALE=1 to load boards of millions of members")
	}
	sizes := []int{25_000_000}
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
	for _, n := range sizes {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) { benchPartitioned(b, n) })
	}
}

func clusterMemory(b *testing.B, rdb *redis.ClusterClient) int64 {
	var sum int64
	err := rdb.ForEachMaster(context.Background(), func(ctx context.Context, n *redis.Client) error {
		sum += usedMemory(b, n)
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return sum
}

// loadBoard loads members 0..n-1 into board as a rebuild would.
func loadBoard(b *testing.B, e *Engine, board Board, n int) time.Duration {
	ctx := context.Background()
	start := time.Now()
	l, err := e.BeginLoad(ctx, board, n)
	if err != nil {
		b.Fatal(err)
	}
	batch := make([]Item, 0, loadChunk*loadPipeline)
	for i := 0; i < n; i++ {
		batch = append(batch, Item{ID: uuidID(i), Score: benchScore(i), ReachedAt: benchReached(i), Version: 1})
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
	return time.Since(start)
}

func benchPartitioned(b *testing.B, n int) {
	ctx := context.Background()
	rdb := redistest.Cluster(b)
	e := New(rdb)
	single := Board{Tag: "lb:single", Name: "season"}
	parted := Board{Tag: "lb:parted", Name: "season", Partitions: 8}

	base := clusterMemory(b, rdb)
	singleLoad := loadBoard(b, e, single, n)
	singleUsed := clusterMemory(b, rdb) - base

	// Bounds first, from a sample of the same members; then the load
	// fills the partitions they make.
	base = clusterMemory(b, rdb)
	start := time.Now()
	sample := make([]Item, 0, 8000)
	for i := 0; i < 8000; i++ {
		j := i * max(n/8000, 1) % n
		sample = append(sample, Item{ID: uuidID(j), Score: benchScore(j), ReachedAt: benchReached(j), Version: 1})
	}
	if _, err := e.UpsertMany(ctx, parted, sample); err != nil {
		b.Fatal(err)
	}
	for moved := true; moved; {
		var err error
		if moved, err = e.Rebalance(ctx, parted); err != nil {
			b.Fatal(err)
		}
	}
	loadBoard(b, e, parted, n)
	partedLoad := time.Since(start)
	partedUsed := clusterMemory(b, rdb) - base
	parts, err := e.Partitions(ctx, parted)
	if err != nil {
		b.Fatal(err)
	}
	sizes := make([]string, len(parts))
	for i, p := range parts {
		sizes[i] = strconv.FormatInt(p.Members, 10)
	}
	b.Logf("%d members: one board loaded in %s, %d partitions (%s members) in %s",
		n, singleLoad.Round(time.Second), len(parts), strings.Join(sizes, "/"), partedLoad.Round(time.Second))
	b.Logf("used_memory delta: one board %.1f B/member, partitioned %.1f B/member, ratio %.3f",
		float64(singleUsed)/float64(n), float64(partedUsed)/float64(n), float64(partedUsed)/float64(singleUsed))
	b.Run("Memory", func(b *testing.B) {
		b.ReportMetric(float64(singleUsed)/float64(n), "single-B/member")
		b.ReportMetric(float64(partedUsed)/float64(n), "partitioned-B/member")
	})
	// The floor of a read that touches every partition: one pipeline of a
	// ZCARD per partition over the cluster's nodes, against one ZCARD.
	floor := func(name string, keys []string) {
		b.Run("floor/"+name, func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				t := time.Now()
				pipe := rdb.Pipeline()
				for _, k := range keys {
					pipe.ZCard(ctx, k)
				}
				if _, err := pipe.Exec(ctx); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t))
			}
			reportLatency(b, lat)
		})
	}
	floor("ZCARD-single", []string{single.keys().live()})
	partKeys := make([]string, len(parts))
	for i, p := range parts {
		partKeys[i] = Board{Tag: p.Tag, Name: parted.Name}.keys().live()
	}
	floor("ZCARD-every-partition", partKeys)
	for _, board := range []Board{single, parted} {
		name := "single"
		if board.Partitions > 0 {
			name = "partitioned"
		}
		rng := rand.New(rand.NewPCG(1, 2))
		b.Run(name+"/Around-k4", func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				id := uuidID(rng.IntN(n))
				t := time.Now()
				if _, _, _, err := e.Around(ctx, board, id, 4); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t))
			}
			reportLatency(b, lat)
		})
		b.Run(name+"/Top100", func(b *testing.B) {
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
}
