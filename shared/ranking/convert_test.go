package ranking

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rallyhq/rally/shared/ranking/internal/redistest"
)

// smallSteps makes conversions copy a few lookup buckets per step and
// allows a new one right after one was abandoned, for the test.
func smallSteps(t *testing.T, buckets int64) {
	oldBuckets, oldAfter := convertBuckets, reconvertAfter
	convertBuckets, reconvertAfter = buckets, 0
	t.Cleanup(func() { convertBuckets, reconvertAfter = oldBuckets, oldAfter })
}

// convertFully runs Rebalance until the auto board is partitioned.
func convertFully(t *testing.T, e *Engine, b Board) {
	t.Helper()
	for i := 0; ; i++ {
		if _, err := e.Rebalance(context.Background(), b); err != nil {
			t.Fatalf("Rebalance: %v", err)
		}
		sh, err := e.shapeOf(context.Background(), b, true)
		if err != nil {
			t.Fatal(err)
		}
		if sh.kind == shapeParted {
			return
		}
		if i == 10_000 {
			t.Fatal("the board did not convert")
		}
	}
}

// writeSome applies n random writes (new, repeated and stale versions,
// removals) to b through e and to the model.
func writeSome(t *testing.T, e *Engine, b Board, m *model, w *world, n int) {
	t.Helper()
	batch := make([]Item, n)
	for i := range batch {
		batch[i] = w.item(w.id())
		// Scores spread wide enough to make partitions of (the
		// extremes stay).
		if s := batch[i].Score; s > -10 && s < 10 {
			batch[i].Score += 8 * (w.rng.Int64N(200) - 100)
		}
	}
	applied, err := e.UpsertMany(context.Background(), b, batch)
	if err != nil {
		t.Fatalf("UpsertMany: %v", err)
	}
	for i, it := range batch {
		if want := m.apply(it); applied[i] != want {
			t.Fatalf("UpsertMany %+v applied = %v, want %v", it, applied[i], want)
		}
	}
}

// A board with a threshold (PartitionAt) stays one sorted set until it
// outgrows it; then Rebalance converts it to partitions in steps, while
// another process (an engine that saw it as one set) keeps writing,
// forgetting and reading it. Every read from either process equals the
// brute-force model at every step of the conversion and after it, and
// the converted board keeps following the model: splits as it grows, a
// rebuild (which loads the partitions), and a delete (after which it is
// one set again).
func TestAnAutoBoardConvertsToPartitionsWhileItServes(t *testing.T) {
	smallSteps(t, 1)
	// redis-server and a three-node cluster (miniredis is too slow for
	// a conversion checked at every step).
	for _, bk := range []struct {
		name string
		rdb  func(testing.TB) redis.UniversalClient
	}{
		{"redis-server", func(tb testing.TB) redis.UniversalClient { return redistest.Server(tb) }},
		{"redis-cluster", func(tb testing.TB) redis.UniversalClient { return redistest.Cluster(tb) }},
	} {
		t.Run(bk.name, func(t *testing.T) { convertWhileServing(t, bk.rdb(t)) })
	}
}

func convertWhileServing(t *testing.T, rdb redis.UniversalClient) {
	for _, ties := range []Ties{Earliest, Shared} {
		for _, order := range []Order{Desc, Asc} {
			name := fmt.Sprintf("order=%d/ties=%d", order, ties)
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				const ids = 900
				threshold := int64(ids / 3)
				b := Board{Tag: "lb:auto", Name: name, Order: order, Ties: ties, PartitionAt: threshold}
				converter, other := New(rdb), New(rdb)
				rng := rand.New(rand.NewPCG(seed(t), 4))
				m := newModel(b)
				w := newWorld(rng, ids)
				for len(m.sorted()) <= int(threshold)+ids/10 {
					writeSome(t, other, b, m, w, 50)
				}
				checkBoard(t, ctx, other, m, rng, w.ids, 0)
				if moved, err := converter.Rebalance(ctx, Board{Tag: b.Tag, Name: b.Name, Order: order, Ties: ties, PartitionAt: int64(len(m.items)) * 10}); err != nil || moved {
					t.Fatalf("Rebalance under the threshold: moved %v, %v", moved, err)
				}
				if parts := partitionsOf(t, other, b); len(parts) != 1 || parts[0].Members != int64(len(m.sorted())) {
					t.Fatalf("before the conversion: partitions %+v, want one of %d", parts, len(m.sorted()))
				}

				// At every step of the conversion the other process
				// writes, forgets one ID and reads; both read as the
				// model does.
				steps := 0
				converter.onMove = func(phase string) {
					if phase != "convert" {
						return
					}
					steps++
					writeSome(t, other, b, m, w, 20)
					id := w.id()
					if err := other.Forget(ctx, b, id); err != nil {
						t.Fatalf("Forget: %v", err)
					}
					m.forget(id)
					delete(w.version, id)
					for _, e := range []*Engine{other, converter} {
						if err := edgesMatch(ctx, e, m, w.ids, rng); err != nil {
							t.Fatalf("step %d of the conversion: %v", steps, err)
						}
					}
				}
				convertFully(t, converter, b)
				converter.onMove = nil
				if steps < 4 {
					t.Fatalf("the conversion took %d steps, want several", steps)
				}
				parts := partitionsOf(t, other, b)
				if len(parts) < 2 {
					t.Fatalf("after the conversion: %d partitions", len(parts))
				}
				for _, e := range []*Engine{other, converter} {
					checkBoard(t, ctx, e, m, rng, w.ids, 0)
				}
				if n, err := rdb.Exists(ctx, b.keys().live()).Result(); err != nil || n != 0 {
					t.Fatalf("the retired set still exists (%d, %v)", n, err)
				}

				// Converted: writes, erasures and splits as it grows.
				w.ids = append(w.ids, moreIDs(len(w.ids))...)
				for round := 0; round < 6; round++ {
					writeSome(t, other, b, m, w, 80)
					if _, err := converter.Rebalance(ctx, b); err != nil {
						t.Fatalf("Rebalance: %v", err)
					}
				}
				for i := 0; i < 20; i++ {
					id := w.id()
					if err := converter.Forget(ctx, b, id); err != nil {
						t.Fatal(err)
					}
					m.forget(id)
					delete(w.version, id)
				}
				checkBoard(t, ctx, other, m, rng, w.ids, 0)
				if got, want := len(partitionsOf(t, converter, b)), b.autoTarget(int64(len(m.sorted())))-1; got < want {
					t.Fatalf("%d partitions for %d entries, want at least %d", got, len(m.sorted()), want)
				}

				// A rebuild loads the partitions.
				snap := newModel(b)
				for _, it := range m.snapshot() {
					if rng.IntN(8) > 0 {
						snap.apply(it)
					}
				}
				if err := other.Load(ctx, b, snap.snapshot()); err != nil {
					t.Fatalf("Load: %v", err)
				}
				m = snap
				checkBoard(t, ctx, converter, m, rng, w.ids, 0)

				// Deleted, it starts again as one sorted set.
				if err := converter.Delete(ctx, b); err != nil {
					t.Fatal(err)
				}
				m = newModel(b)
				w.version = map[string]int64{}
				writeSome(t, other, b, m, w, 40)
				checkBoard(t, ctx, converter, m, rng, w.ids, 0)
				if parts := partitionsOf(t, converter, b); len(parts) != 1 {
					t.Fatalf("after a delete: %d partitions, want the one set", len(parts))
				}
			})
		}
	}
}

func moreIDs(from int) []string {
	out := make([]string, 200)
	for i := range out {
		out[i] = fmt.Sprintf("later-%d", from+i)
	}
	return out
}

// A rebuild that begins while a conversion copies abandons the
// conversion (its copy may hold what the rebuild drops): the board is the
// rebuilt set, the partitions are gone, and a later Rebalance converts
// the rebuilt board. A conversion cut short between steps resumes where
// it stopped.
func TestARebuildAbandonsAConversionUnderWay(t *testing.T) {
	smallSteps(t, 4)
	rdb := redistest.Server(t)
	ctx := context.Background()
	b := Board{Tag: "lb:abandon", Name: "season", Order: Desc, Ties: Earliest, PartitionAt: 200}
	rng := rand.New(rand.NewPCG(seed(t), 5))
	e := New(rdb)
	m := newModel(b)
	w := newWorld(rng, 900)
	for len(m.sorted()) < 400 {
		writeSome(t, e, b, m, w, 50)
	}

	// Two steps of the conversion, then the invocation ends.
	stepCtx, stop := context.WithCancel(ctx)
	steps := 0
	e.onMove = func(phase string) {
		if steps++; steps == 2 {
			stop()
		}
	}
	if _, err := e.Rebalance(stepCtx, b); !errors.Is(err, context.Canceled) {
		t.Fatalf("Rebalance cut short: %v", err)
	}
	e.onMove = nil
	sh, err := e.shapeOf(ctx, b, true)
	if err != nil || sh.kind != shapeConverting {
		t.Fatalf("after two steps: shape %+v, %v; want converting", sh, err)
	}
	// Another process rebuilds the board from a snapshot that lost some
	// IDs; it writes meanwhile.
	other := New(rdb)
	snap := newModel(b)
	for _, it := range m.snapshot() {
		if rng.IntN(5) > 0 {
			snap.apply(it)
		}
	}
	l, err := other.BeginLoad(ctx, b, len(snap.items))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Add(ctx, snap.snapshot()...); err != nil {
		t.Fatal(err)
	}
	// Writes during the load reach the rebuilt board (what they say they
	// applied is of the board being replaced). They are new versions, as
	// DynamoDB gives them: a rebuild keeps the version it read.
	during := make([]Item, 30)
	for i := range during {
		id := w.id()
		w.version[id]++
		during[i] = Item{ID: id, Score: w.rng.Int64N(500), ReachedAt: t0, Version: w.version[id]}
	}
	if _, err := e.UpsertMany(ctx, b, during); err != nil {
		t.Fatal(err)
	}
	for _, it := range during {
		snap.apply(it)
	}
	if err := l.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	m = snap
	if sh, err := e.shapeOf(ctx, b, true); err != nil || sh.kind != shapeSet {
		t.Fatalf("after the rebuild: shape %+v, %v; want one set", sh, err)
	}
	if n, err := rdb.Exists(ctx, b.keys().layoutKey()).Result(); err != nil || n != 0 {
		t.Fatalf("the abandoned conversion's layout is still there (%d, %v)", n, err)
	}
	checkBoard(t, ctx, e, m, rng, w.ids, 0)

	// The next Rebalance converts the rebuilt board, resuming after a
	// cut every few steps.
	for i := 0; ; i++ {
		cut, stop := context.WithCancel(ctx)
		steps := 0
		e.onMove = func(string) {
			if steps++; steps == 3 {
				stop()
			}
		}
		_, err := e.Rebalance(cut, b)
		stop()
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("Rebalance: %v", err)
		}
		if sh, _ := e.shapeOf(ctx, b, true); sh.kind == shapeParted {
			break
		}
		if i == 1000 {
			t.Fatal("the board did not convert")
		}
	}
	e.onMove = nil
	checkBoard(t, ctx, other, m, rng, w.ids, 0)
}

// Writers, an eraser and readers work on an auto board from their own
// engines while another converts it, on a three-node cluster: every read
// meanwhile is well formed, and once they stop the board equals the
// model, partitioned.
func TestAnAutoBoardConvertsUnderConcurrentLoad(t *testing.T) {
	smallSteps(t, 16)
	rdb := redistest.Cluster(t)
	ctx := context.Background()
	const members = 6000
	b := Board{Tag: "lb:autoload", Name: "season", Order: Desc, Ties: Shared, PartitionAt: members / 2}
	rng := rand.New(rand.NewPCG(seed(t), 6))
	m := newModel(b)
	ids := make([]string, members)
	var load []Item
	for i := range ids {
		ids[i] = fmt.Sprintf("player-%05d", i)
		load = append(load, Item{ID: ids[i], Score: rng.Int64N(members / 4), ReachedAt: t0.Add(time.Duration(rng.IntN(100)) * time.Millisecond), Version: 1})
	}
	if _, err := New(rdb).UpsertMany(ctx, b, load); err != nil {
		t.Fatal(err)
	}
	for _, it := range load {
		m.apply(it)
	}
	still := ids[:100]     // nobody writes these
	erased := ids[100:300] // only the eraser touches these
	const writers = 3
	logs := make([][]Item, writers)
	var wg sync.WaitGroup
	done := make(chan struct{})
	var reads atomic.Int64
	errc := make(chan error, writers+2)
	for wi := range writers {
		wg.Go(func() {
			e := New(rdb)
			wr := rand.New(rand.NewPCG(uint64(wi), 8))
			version := map[string]int64{}
			for {
				select {
				case <-done:
					return
				default:
				}
				batch := make([]Item, 40)
				for i := range batch {
					id := ids[300+wr.IntN((members-300)/writers)*writers+wi]
					if wr.IntN(8) > 0 {
						version[id]++ // else a repeat
					}
					v := 1 + version[id]
					batch[i] = Item{ID: id, Score: wr.Int64N(members / 4), ReachedAt: t0, Version: v, Removed: wr.IntN(12) == 0}
				}
				if _, err := e.UpsertMany(ctx, b, batch); err != nil {
					errc <- fmt.Errorf("writer %d: %w", wi, err)
					return
				}
				logs[wi] = append(logs[wi], batch...)
			}
		})
	}
	forgotten := make(chan []string, 1)
	wg.Go(func() {
		e := New(rdb)
		var gone []string
		defer func() { forgotten <- gone }()
		for _, id := range erased {
			select {
			case <-done:
				return
			default:
			}
			if err := e.Forget(ctx, b, id); err != nil {
				errc <- fmt.Errorf("eraser: %w", err)
				return
			}
			gone = append(gone, id)
		}
	})
	wg.Go(func() {
		e := New(rdb)
		rr := rand.New(rand.NewPCG(9, 9))
		for {
			select {
			case <-done:
				return
			default:
			}
			if err := wellFormed(ctx, e, b, m, still, rr); err != nil {
				errc <- fmt.Errorf("reader: %w", err)
				return
			}
			reads.Add(1)
		}
	})
	converter := New(rdb)
	started := time.Now()
	for {
		if _, err := converter.Rebalance(ctx, b); err != nil {
			t.Fatalf("Rebalance: %v", err)
		}
		if sh, _ := converter.shapeOf(ctx, b, true); sh.kind == shapeParted {
			break
		}
	}
	took := time.Since(started)
	close(done)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	for _, log := range logs {
		for _, it := range log {
			m.apply(it)
		}
	}
	for _, id := range <-forgotten {
		m.forget(id)
	}
	if reads.Load() < 10 {
		t.Fatalf("only %d reads ran during the conversion", reads.Load())
	}
	checkBoard(t, ctx, New(rdb), m, rng, ids, 300)
	t.Logf("%d members converted to %d partitions in %s beside %d well-formed reads", members, len(partitionsOf(t, converter, b)), took.Round(time.Millisecond), reads.Load())
}
