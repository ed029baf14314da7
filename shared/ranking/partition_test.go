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

	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/shared/ranking/internal/redistest"
)

// reshape moves the bounds of a partitioned board at random: a split of
// a random partition, a merge of two neighbours, or a rebalance.
func reshape(t *testing.T, e *Engine, b Board, rng *rand.Rand) {
	t.Helper()
	ctx := context.Background()
	parts, err := e.Partitions(ctx, b)
	if err != nil {
		t.Fatalf("Partitions: %v", err)
	}
	switch r := rng.IntN(3); {
	case r == 0 && len(parts) > 1:
		err = e.Merge(ctx, b, rng.IntN(len(parts)-1))
	case r == 1:
		err = e.Split(ctx, b, rng.IntN(len(parts)))
	default:
		_, err = e.Rebalance(ctx, b)
	}
	if err != nil && !errors.Is(err, ErrInvalid) {
		t.Fatalf("reshape: %v", err)
	}
}

func TestPartitionedEngineMatchesModel(t *testing.T) {
	backendsAndCluster(t, func(t *testing.T, bk backend) {
		for _, order := range []Order{Desc, Asc} {
			for _, ties := range []Ties{Earliest, Shared} {
				name := fmt.Sprintf("order=%d/ties=%d", order, ties)
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					b := Board{Tag: "lb:parts", Name: name, Order: order, Ties: ties, Partitions: 4}
					e := New(bk.rdb)
					rng := rand.New(rand.NewPCG(seed(t), 2))
					runModelPhases(t, e, b, rng, bk, func() {
						for i := 0; i < 3; i++ {
							reshape(t, e, b, rng)
						}
					})
				})
			}
		}
	})
}

// TestPartitionedBoardUnderConcurrentLoad is the exactness property of a
// partitioned board on a three-node cluster: a board of many members over
// at least 8 partitions, with writers, readers and forced splits and merges
// running at once.
//
//   - While moves run with no writes, every read equals the model at every
//     check: tops, pages and rank + K across every partition edge, totals,
//     percentiles and friends' ranks (and a check at each move phase).
//   - While writes, reads and moves all run, every read is well formed (ranks
//     in order, no member twice, a player nobody writes keeps its score), and
//     once the writers stop the whole board equals the model again.
//
// RALLY_TEST_SCALE=full runs it at 200,000 members.
func TestPartitionedBoardUnderConcurrentLoad(t *testing.T) {
	members := testenv.Scale(20_000, 200_000)
	rdb := redistest.Cluster(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed(t), 3))
	for _, ties := range []Ties{Shared, Earliest} {
		t.Run(fmt.Sprintf("ties=%d", ties), func(t *testing.T) {
			b := Board{Tag: "lb:big", Name: fmt.Sprintf("t%d", ties), Order: Desc, Ties: ties, Partitions: 8}
			e := New(rdb)
			m := newModel(b)
			ids := make([]string, members)
			for i := range ids {
				ids[i] = fmt.Sprintf("player-%06d", i)
			}
			// About four members per score, so ties are everywhere.
			scoreOf := func() int64 { return rng.Int64N(int64(members / 4)) }
			var load []Item
			for _, id := range ids {
				load = append(load, Item{ID: id, Score: scoreOf(), ReachedAt: t0.Add(time.Duration(rng.IntN(1000)) * time.Millisecond), Version: 1})
			}
			started := time.Now()
			for start := 0; start < len(load); start += 2000 {
				batch := load[start:min(start+2000, len(load))]
				if _, err := e.UpsertMany(ctx, b, batch); err != nil {
					t.Fatalf("load: %v", err)
				}
				for _, it := range batch {
					m.apply(it)
				}
			}
			for {
				moved, err := e.Rebalance(ctx, b)
				if err != nil {
					t.Fatalf("Rebalance: %v", err)
				}
				if !moved {
					break
				}
			}
			parts := partitionsOf(t, e, b)
			if len(parts) < 8 {
				t.Fatalf("after rebalancing %d members: %d partitions, want 8", members, len(parts))
			}
			t.Logf("%d members written and spread over %d partitions in %s", members, len(parts), time.Since(started).Round(time.Millisecond))

			// Moves with reads and no writes: every read exact, including
			// at each phase of each move.
			checks := 0
			e.onMove = func(phase string) {
				checkEdges(t, e, m, ids, rng)
				checks++
			}
			for i := 0; i < 6; i++ {
				forceMove(t, e, b, rng, i)
			}
			e.onMove = nil
			if checks < 12 {
				t.Fatalf("only %d checks ran during moves", checks)
			}
			moving := make(chan struct{})
			var readErr error
			var movingReads atomic.Int64
			var readers sync.WaitGroup
			readers.Add(1)
			go func() {
				defer readers.Done()
				rr := rand.New(rand.NewPCG(uint64(ties), 11))
				for {
					select {
					case <-moving:
						return
					default:
					}
					if err := edgesMatch(ctx, e, m, ids, rr); err != nil {
						readErr = err
						return
					}
					movingReads.Add(1)
				}
			}()
			// Moves until the reader has read across them 20 times.
			moves := 0
			for ; moves < 4 || movingReads.Load() < 20 && moves < 200; moves++ {
				forceMove(t, e, b, rng, moves)
			}
			close(moving)
			readers.Wait()
			if readErr != nil {
				t.Fatalf("a read while partitions moved: %v", readErr)
			}

			// Writes, reads and moves at once, in rounds; the model is
			// checked whole after each round.
			still := ids[:200] // nobody writes these
			var written, busyReads atomic.Int64
			for round := 0; round < 3; round++ {
				var wg sync.WaitGroup
				done := make(chan struct{})
				writers := 4
				logs := make([][]Item, writers)
				for w := 0; w < writers; w++ {
					wg.Add(1)
					go func(w int) {
						defer wg.Done()
						wr := rand.New(rand.NewPCG(uint64(round*100+w), 9))
						mine := ids[200+w:]
						last := map[string]Item{} // the newest record written per ID
						for n := 0; n < members/40; n += 50 {
							batch := make([]Item, 50)
							for i := range batch {
								id := mine[wr.IntN(len(mine)/writers)*writers]
								prev, ok := last[id]
								if !ok {
									prev = m.items[id]
								}
								if wr.IntN(10) == 0 {
									// A repeat: one version is one content.
									batch[i] = prev
									continue
								}
								batch[i] = Item{ID: id, Score: wr.Int64N(int64(members / 4)), ReachedAt: t0, Version: prev.Version + 1, Removed: wr.IntN(15) == 0}
								last[id] = batch[i]
							}
							if _, err := e.UpsertMany(ctx, b, batch); err != nil {
								t.Errorf("writer %d: %v", w, err)
								return
							}
							logs[w] = append(logs[w], batch...)
							written.Add(int64(len(batch)))
						}
					}(w)
				}
				var readerErrs []error
				var rmu sync.Mutex
				for r := 0; r < 2; r++ {
					readers.Add(1)
					go func() {
						defer readers.Done()
						rr := rand.New(rand.NewPCG(uint64(round*10+r), 7))
						for {
							select {
							case <-done:
								return
							default:
							}
							if err := wellFormed(ctx, e, b, m, still, rr); err != nil {
								rmu.Lock()
								readerErrs = append(readerErrs, err)
								rmu.Unlock()
								return
							}
							busyReads.Add(1)
						}
					}()
				}
				moves := make(chan error, 1)
				go func() {
					mr := rand.New(rand.NewPCG(uint64(round), 5))
					for i := 0; i < 3; i++ {
						if err := tryMove(ctx, e, b, mr, i); err != nil {
							moves <- err
							return
						}
					}
					moves <- nil
				}()
				wg.Wait()
				if err := <-moves; err != nil {
					t.Fatalf("move while writing: %v", err)
				}
				close(done)
				readers.Wait()
				if t.Failed() {
					t.FailNow()
				}
				if err := errors.Join(readerErrs...); err != nil {
					t.Fatalf("a read while writing and moving: %v", err)
				}
				for _, log := range logs {
					for _, it := range log {
						m.apply(it)
					}
				}
				if err := edgesMatch(ctx, e, m, ids, rng); err != nil {
					t.Fatalf("after round %d: %v", round, err)
				}
				checkBoard(t, ctx, e, m, rng, ids[:2000], 40)
			}
			if parts := partitionsOf(t, e, b); len(parts) < 8 {
				t.Fatalf("%d partitions at the end, want at least 8", len(parts))
			}
			t.Logf("exact at %d checks at move phases and %d edge reads while %d moves ran; %d records written in 3 rounds beside 9 moves and %d well-formed reads, the model equal after each",
				checks, movingReads.Load(), moves, written.Load(), busyReads.Load())
		})
	}
}

func partitionsOf(t *testing.T, e *Engine, b Board) []Partition {
	t.Helper()
	parts, err := e.Partitions(context.Background(), b)
	if err != nil {
		t.Fatalf("Partitions: %v", err)
	}
	return parts
}

// forceMove splits a partition on even i and merges two on odd i, then
// splits again when a merge left fewer than 8.
func forceMove(t *testing.T, e *Engine, b Board, rng *rand.Rand, i int) {
	t.Helper()
	if err := tryMove(context.Background(), e, b, rng, i); err != nil {
		t.Fatalf("move %d: %v", i, err)
	}
}

func tryMove(ctx context.Context, e *Engine, b Board, rng *rand.Rand, i int) error {
	parts, err := e.Partitions(ctx, b)
	if err != nil {
		return err
	}
	if i%2 == 1 && len(parts) > 1 {
		err = e.Merge(ctx, b, rng.IntN(len(parts)-1))
	} else {
		err = e.Split(ctx, b, rng.IntN(len(parts)))
	}
	if err != nil && !errors.Is(err, ErrInvalid) {
		return err
	}
	for len(parts) < 8 {
		if err := e.Split(ctx, b, 0); err != nil {
			return err
		}
		if parts, err = e.Partitions(ctx, b); err != nil {
			return err
		}
	}
	return nil
}

func checkEdges(t *testing.T, e *Engine, m *model, ids []string, rng *rand.Rand) {
	t.Helper()
	if err := edgesMatch(context.Background(), e, m, ids, rng); err != nil {
		t.Fatal(err)
	}
}

// edgesMatch compares with the model what is hardest across partitions:
// the top, pages and rank + K around every partition edge, the total and
// percentile, and friends' ranks.
func edgesMatch(ctx context.Context, e *Engine, m *model, ids []string, rng *rand.Rand) error {
	b := m.b
	want := m.sorted()
	n := len(want)
	top, total, err := e.Top(ctx, b, 100)
	if err != nil {
		return err
	}
	if total != int64(n) {
		return fmt.Errorf("Top total = %d, want %d", total, n)
	}
	if err := sameEntries(top, want[:min(100, n)]); err != nil {
		return fmt.Errorf("Top(100): %w", err)
	}
	parts, err := e.Partitions(ctx, b)
	if err != nil {
		return err
	}
	edge := 0
	for _, p := range parts[:len(parts)-1] {
		edge += int(p.Members)
		if edge < 1 || edge >= n {
			continue
		}
		from := max(1, edge-4)
		page, _, err := e.Page(ctx, b, from, 9)
		if err != nil {
			return err
		}
		if err := sameEntries(page, want[from-1:min(from+8, n)]); err != nil {
			return fmt.Errorf("Page(%d, 9) across the edge after rank %d: %w", from, edge, err)
		}
		for _, i := range []int{edge - 2, edge - 1, edge, edge + 1} {
			if i < 0 || i >= n {
				continue
			}
			k := 1 + rng.IntN(6)
			self, window, total, err := e.Around(ctx, b, want[i].ID, k)
			if err != nil {
				return fmt.Errorf("Around(%s): %w", want[i].ID, err)
			}
			if err := sameEntries([]Entry{self}, want[i:i+1]); err != nil {
				return fmt.Errorf("Around(%s) at rank %d: %w", want[i].ID, i+1, err)
			}
			if err := sameEntries(window, want[max(0, i-k):min(n, i+k+1)]); err != nil {
				return fmt.Errorf("Around(%s, %d) across the edge after rank %d: %w", want[i].ID, k, edge, err)
			}
			if got, wantP := percentile(self.Rank, total), percentile(want[i].Rank, int64(n)); got != wantP {
				return fmt.Errorf("percentile of %s = %v, want %v", want[i].ID, got, wantP)
			}
		}
	}
	friends := make([]string, 50)
	for i := range friends {
		friends[i] = ids[rng.IntN(len(ids))]
	}
	got, err := e.Among(ctx, b, friends)
	if err != nil {
		return err
	}
	if err := sameEntries(got, m.among(friends)); err != nil {
		return fmt.Errorf("Among: %w", err)
	}
	return nil
}

// percentile is the share of the board a rank is better than or equal to,
// as a leaderboard reports it.
func percentile(rank int, total int64) float64 {
	return float64(total-int64(rank)+1) / float64(total) * 100
}

// wellFormed checks what must hold of any read while writes run: ranks
// that follow the scores, no member twice, and the still players (whom
// nobody writes) with their own scores.
func wellFormed(ctx context.Context, e *Engine, b Board, m *model, still []string, rng *rand.Rand) error {
	id := still[rng.IntN(len(still))]
	self, window, _, err := e.Around(ctx, b, id, 5)
	if err != nil {
		return fmt.Errorf("Around(%s): %w", id, err)
	}
	if want := m.items[id]; self.Score != want.Score || self.ID != id {
		return fmt.Errorf("Around(%s) = %+v, want score %d", id, self, want.Score)
	}
	top, _, err := e.Page(ctx, b, 1+rng.IntN(1000), 50)
	if err != nil {
		return err
	}
	for _, list := range [][]Entry{window, top} {
		seen := map[string]bool{}
		for i, en := range list {
			if seen[en.ID] {
				return fmt.Errorf("%s appears twice in %+v", en.ID, list)
			}
			seen[en.ID] = true
			if i > 0 && (en.Score > list[i-1].Score || en.Rank < list[i-1].Rank) {
				return fmt.Errorf("entries out of order: %+v then %+v", list[i-1], en)
			}
		}
	}
	return nil
}

// A partitioned board keeps the round trips of one sorted set once its
// layout is cached: one for each read (every partition in one pipeline),
// two for a write (route at home, then the partitions), and one more for
// an Upsert's rank. A page deeper than the first is one too once the
// partition sizes have been seen.
func TestPartitionedRoundTrips(t *testing.T) {
	rdb := redistest.Server(t)
	hook := &roundTrips{}
	rdb.AddHook(hook)
	ctx := context.Background()
	e := New(rdb)
	b := Board{Tag: "lb:ptrips", Name: "all", Ties: Shared, Partitions: 4}
	fillBoard(t, e, b, 800)
	for moved := true; moved; {
		var err error
		if moved, err = e.Rebalance(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	if parts := partitionsOf(t, e, b); len(parts) != 4 {
		t.Fatalf("%d partitions, want 4", len(parts))
	}
	friends := make([]string, 100)
	for i := range friends {
		friends[i] = fmt.Sprintf("p%04d", i*7)
	}
	many := make([]Item, 1000)
	for i := range many {
		many[i] = Item{ID: fmt.Sprintf("q%04d", i), Score: int64(i), Version: 1}
	}
	ops := []struct {
		name  string
		trips int
		run   func() error
	}{
		{"Upsert", 3, func() error { _, err := e.Upsert(ctx, b, Item{ID: "p0001", Score: 5, Version: 9}); return err }},
		{"UpsertMany", 2, func() error { _, err := e.UpsertMany(ctx, b, many); return err }},
		{"Remove", 3, func() error { _, err := e.Remove(ctx, b, "p0002", 9); return err }},
		{"Top", 1, func() error { _, _, err := e.Top(ctx, b, 100); return err }},
		{"Page", 1, func() error { _, _, err := e.Page(ctx, b, 500, 50); return err }},
		{"Around", 1, func() error { _, _, _, err := e.Around(ctx, b, "p0360", 4); return err }},
		{"Among", 1, func() error { _, err := e.Among(ctx, b, friends); return err }},
		{"Total", 1, func() error { _, err := e.Total(ctx, b); return err }},
	}
	for _, op := range ops {
		if err := op.run(); err != nil { // the first call may load the script
			t.Fatalf("%s: %v", op.name, err)
		}
		hook.n = 0
		if err := op.run(); err != nil {
			t.Fatalf("%s: %v", op.name, err)
		}
		if hook.n != op.trips {
			t.Errorf("%s took %d round trips, want %d", op.name, hook.n, op.trips)
		}
	}
}
