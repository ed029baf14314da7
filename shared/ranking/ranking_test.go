package ranking

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rallyhq/rally/shared/ranking/internal/redistest"
)

// backend is a Redis to test against, with how hard to drive it.
type backend struct {
	rdb redis.UniversalClient
	// ids is the population of a property test; sample is how many IDs a
	// full check reads one by one (0: every ID). miniredis sorts a whole set
	// and parses the script again on every call, so it gets less.
	ids, sample int
}

// backends runs fn against a private redis-server and against miniredis.
func backends(t *testing.T, fn func(t *testing.T, bk backend)) {
	t.Run("redis-server", func(t *testing.T) { fn(t, backend{rdb: redistest.Server(t), ids: 2500}) })
	t.Run("miniredis", func(t *testing.T) {
		rdb, _ := redistest.Mini(t)
		fn(t, backend{rdb: rdb, ids: 700, sample: 60})
	})
}

// backendsAndCluster runs fn against the backends and a local three-node
// Redis Cluster, as ElastiCache runs one: the property tests. (A cluster
// takes two seconds to start, the delay before a new primary accepts
// writes; TestRunsOnRedisCluster covers the other calls there.)
func backendsAndCluster(t *testing.T, fn func(t *testing.T, bk backend)) {
	backends(t, fn)
	t.Run("redis-cluster", func(t *testing.T) { fn(t, backend{rdb: redistest.Cluster(t), ids: 1000}) })
}

// seed is random per run unless RANKING_SEED fixes it; failures print it.
func seed(t *testing.T) uint64 {
	if s := os.Getenv("RANKING_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("RANKING_SEED: %v", err)
		}
		return v
	}
	v := uint64(time.Now().UnixNano())
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("reproduce with RANKING_SEED=%d", v)
		}
	})
	return v
}

var t0 = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

// world generates writes with many ties and every kind of delivery:
// newer, repeated and stale versions, in any order.
type world struct {
	rng     *rand.Rand
	ids     []string
	version map[string]int64 // highest version issued per id
}

func newWorld(rng *rand.Rand, n int) *world {
	w := &world{rng: rng, version: map[string]int64{}}
	// IDs that are prefixes of each other, share characters that sort
	// around each other, and use bytes above ASCII, so byte order matters.
	for _, special := range []string{"p", "p1", "p10", "p1a", "p1.", "p1:", "p1-", "P1", "p1_", "é", "e", "z\u00ff"} {
		w.ids = append(w.ids, special)
	}
	for len(w.ids) < n {
		w.ids = append(w.ids, fmt.Sprintf("player-%d", rng.IntN(n*10)))
	}
	return w
}

func (w *world) id() string { return w.ids[w.rng.IntN(len(w.ids))] }

func (w *world) item(id string) Item {
	v := w.version[id]
	switch r := w.rng.IntN(10); {
	case r < 6: // newer
		v += 1 + w.rng.Int64N(3)
		w.version[id] = v
	case r < 8: // repeated
	default: // stale
		v = w.rng.Int64N(v + 1)
	}
	score := w.rng.Int64N(7) - 3
	switch w.rng.IntN(40) {
	case 0:
		score = MaxScore
	case 1:
		score = -MaxScore
	case 2:
		score = MaxScore - 1
	}
	reached := []time.Time{{}, time.Unix(0, 0), t0, t0.Add(time.Millisecond), t0.Add(999 * time.Microsecond), t0.Add(2 * time.Millisecond)}[w.rng.IntN(6)]
	return Item{ID: id, Score: score, ReachedAt: reached, Version: v, Removed: w.rng.IntN(10) == 0}
}

func TestEngineMatchesModel(t *testing.T) {
	backendsAndCluster(t, func(t *testing.T, bk backend) {
		for _, order := range []Order{Desc, Asc} {
			for _, ties := range []Ties{Earliest, Shared} {
				name := fmt.Sprintf("order=%d/ties=%d", order, ties)
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					b := Board{Tag: "lb:prop", Name: name, Order: order, Ties: ties}
					runModelPhases(t, New(bk.rdb), b, rand.New(rand.NewPCG(seed(t), 1)), bk, nil)
				})
			}
		}
	})
}

// runModelPhases writes to b in five phases and checks every read against
// the model after each; between, when set, runs before every check.
func runModelPhases(t *testing.T, e *Engine, b Board, rng *rand.Rand, bk backend, between func()) {
	ctx := context.Background()
	checkBoard := func(t *testing.T, ctx context.Context, e *Engine, m *model, rng *rand.Rand, ids []string, sample int) {
		t.Helper()
		if between != nil {
			between()
		}
		checkBoard(t, ctx, e, m, rng, ids, sample)
	}
	m := newModel(b)
	w := newWorld(rng, bk.ids)

	// Phase 1: batches as a stream processor sends them.
	for round := 0; round < 8; round++ {
		batch := make([]Item, 1+rng.IntN(bk.ids/4))
		for i := range batch {
			batch[i] = w.item(w.id())
		}
		applied, err := e.UpsertMany(ctx, b, batch)
		if err != nil {
			t.Fatalf("UpsertMany: %v", err)
		}
		for i, it := range batch {
			if want := m.apply(it); applied[i] != want {
				t.Fatalf("UpsertMany item %d %+v applied = %v, want %v", i, it, applied[i], want)
			}
		}
	}
	checkBoard(t, ctx, e, m, rng, w.ids, bk.sample)

	// Phase 2: single writes, checking what each says about the board.
	for i := 0; i < 300; i++ {
		it := w.item(w.id())
		res, err := e.Upsert(ctx, b, it)
		if err != nil {
			t.Fatalf("Upsert: %v", err)
		}
		want := UpsertResult{Applied: m.apply(it)}
		self := m.items[it.ID]
		for _, o := range m.items {
			if o.Removed {
				continue
			}
			want.Total++
			if !self.Removed && (m.b.Ties == Earliest || o.Score != self.Score) && m.better(o, self) {
				want.Rank++
			}
		}
		if !self.Removed {
			want.Rank++
		}
		if res != want {
			t.Fatalf("Upsert(%+v) = %+v, want %+v", it, res, want)
		}
	}
	checkBoard(t, ctx, e, m, rng, w.ids, bk.sample)

	// Phase 3: erasure of some ids, then new writes at low versions apply
	// again because nothing of the old ids is left.
	for i := 0; i < 60; i++ {
		id := w.id()
		if err := e.Forget(ctx, b, id); err != nil {
			t.Fatalf("Forget: %v", err)
		}
		m.forget(id)
		delete(w.version, id)
	}
	for i := 0; i < 60; i++ {
		it := w.item(w.id())
		applied, err := e.UpsertMany(ctx, b, []Item{it})
		if err != nil {
			t.Fatalf("UpsertMany: %v", err)
		}
		if want := m.apply(it); applied[0] != want {
			t.Fatalf("after Forget: %+v applied = %v, want %v", it, applied[0], want)
		}
	}
	checkBoard(t, ctx, e, m, rng, w.ids, bk.sample)

	// Phase 4: rebuild from a snapshot that lost some ids and moved others
	// on; the board becomes exactly the snapshot.
	snap := newModel(b)
	for _, it := range m.snapshot() {
		switch rng.IntN(10) {
		case 0:
			continue
		case 1:
			it = w.item(it.ID)
			it.Version = w.version[it.ID] + 1
			w.version[it.ID] = it.Version
		}
		snap.apply(it)
	}
	if err := e.Load(ctx, b, snap.snapshot()); err != nil {
		t.Fatalf("Load: %v", err)
	}
	m = snap
	checkBoard(t, ctx, e, m, rng, w.ids, bk.sample)

	// Phase 5: the stream catching up after the rebuild redelivers old
	// records; none of them changes the board.
	var old []Item
	for id, it := range m.items {
		if it.Version > 0 {
			old = append(old, Item{ID: id, Score: rng.Int64N(100), Version: it.Version - 1, Removed: rng.IntN(2) == 0})
		}
	}
	applied, err := e.UpsertMany(ctx, b, old)
	if err != nil {
		t.Fatalf("UpsertMany: %v", err)
	}
	for i, a := range applied {
		if a {
			t.Fatalf("stale record %+v applied after the rebuild", old[i])
		}
	}
	checkBoard(t, ctx, e, m, rng, w.ids, bk.sample)
}

// board returns a board of n players whose scores all differ.
func fillBoard(t *testing.T, e *Engine, b Board, n int) {
	t.Helper()
	items := make([]Item, n)
	for i := range items {
		items[i] = Item{ID: fmt.Sprintf("p%04d", i), Score: int64(10 * (n - i)), ReachedAt: t0, Version: 1}
	}
	if _, err := e.UpsertMany(context.Background(), b, items); err != nil {
		t.Fatalf("fill: %v", err)
	}
}

// The seed scenario: a player ranked 361 sees ranks 357 to 365.
func TestAroundRank361(t *testing.T) {
	backends(t, func(t *testing.T, bk backend) {
		e := New(bk.rdb)
		b := Board{Tag: "lb:seed", Name: "season-1"}
		fillBoard(t, e, b, 1000)
		self, window, total, err := e.Around(context.Background(), b, "p0360", 4)
		if err != nil {
			t.Fatal(err)
		}
		if self.Rank != 361 || total != 1000 {
			t.Fatalf("self = %+v, total %d; want rank 361 of 1000", self, total)
		}
		var ranks []int
		for _, en := range window {
			ranks = append(ranks, en.Rank)
		}
		if fmt.Sprint(ranks) != "[357 358 359 360 361 362 363 364 365]" {
			t.Fatalf("window ranks = %v", ranks)
		}
		if window[0].ID != "p0356" || window[8].ID != "p0364" {
			t.Fatalf("window = %v", window)
		}
	})
}

// Shared ties: 100, 90, 90, 80 rank 1, 2, 2, 4 wherever they are read.
func TestSharedTiesRank1224(t *testing.T) {
	backends(t, func(t *testing.T, bk backend) {
		ctx := context.Background()
		e := New(bk.rdb)
		b := Board{Tag: "lb:shared", Name: "weekly", Ties: Shared}
		items := []Item{
			{ID: "dan", Score: 80, ReachedAt: t0, Version: 1},
			{ID: "cat", Score: 90, ReachedAt: t0.Add(time.Second), Version: 1},
			{ID: "bob", Score: 90, ReachedAt: t0, Version: 1},
			{ID: "ann", Score: 100, ReachedAt: t0, Version: 1},
		}
		if _, err := e.UpsertMany(ctx, b, items); err != nil {
			t.Fatal(err)
		}
		show := func(es []Entry) string {
			s := ""
			for _, en := range es {
				s += fmt.Sprintf("%s:%d ", en.ID, en.Rank)
			}
			return s
		}
		const want = "ann:1 bob:2 cat:2 dan:4 "
		top, _, err := e.Top(ctx, b, 10)
		if err != nil || show(top) != want {
			t.Fatalf("Top = %s, %v; want %s", show(top), err, want)
		}
		for _, id := range []string{"ann", "cat", "dan"} {
			_, window, _, err := e.Around(ctx, b, id, 3)
			if err != nil || show(window) != want {
				t.Fatalf("Around(%s) = %s, %v; want %s", id, show(window), err, want)
			}
		}
		_, window, _, err := e.Around(ctx, b, "dan", 0)
		if err != nil || show(window) != "dan:4 " {
			t.Fatalf("Around(dan, 0) = %s, %v", show(window), err)
		}
		_, window, _, err = e.Around(ctx, b, "cat", 0)
		if err != nil || show(window) != "cat:2 " {
			t.Fatalf("Around(cat, 0) = %s, %v", show(window), err)
		}
		among, err := e.Among(ctx, b, []string{"dan", "cat", "bob", "ann", "nobody"})
		if err != nil || show(among) != want {
			t.Fatalf("Among = %s, %v; want %s", show(among), err, want)
		}
		among, err = e.Among(ctx, b, []string{"dan", "cat", "bob"})
		if err != nil || show(among) != "bob:1 cat:1 dan:3 " {
			t.Fatalf("Among without ann = %s, %v", show(among), err)
		}
	})
}

// roundTrips counts what reaches the network: each command and each
// pipeline is one round trip.
type roundTrips struct{ n int }

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n++
		return next(ctx, cmd)
	}
}
func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n++
		return next(ctx, cmds)
	}
}

func TestRoundTrips(t *testing.T) {
	rdb := redistest.Server(t)
	hook := &roundTrips{}
	rdb.AddHook(hook)
	ctx := context.Background()
	e := New(rdb)
	b := Board{Tag: "lb:trips", Name: "all", Ties: Shared}
	fillBoard(t, e, b, 700) // several lookup levels
	friends := make([]string, 100)
	for i := range friends {
		friends[i] = fmt.Sprintf("p%04d", i*7)
	}
	many := make([]Item, 1000)
	for i := range many {
		many[i] = Item{ID: fmt.Sprintf("q%04d", i), Score: int64(i), Version: 1}
	}
	ops := []struct {
		name string
		run  func() error
	}{
		{"Upsert", func() error { _, err := e.Upsert(ctx, b, Item{ID: "p0001", Score: 5, Version: 9}); return err }},
		{"UpsertMany", func() error { _, err := e.UpsertMany(ctx, b, many); return err }},
		{"Remove", func() error { _, err := e.Remove(ctx, b, "p0002", 9); return err }},
		{"Top", func() error { _, _, err := e.Top(ctx, b, 100); return err }},
		{"Around", func() error { _, _, _, err := e.Around(ctx, b, "p0360", 4); return err }},
		{"Among", func() error { _, err := e.Among(ctx, b, friends); return err }},
		{"Total", func() error { _, err := e.Total(ctx, b); return err }},
		{"Sum", func() error { return e.Sum(ctx, Board{Tag: b.Tag, Name: "sum"}, []Board{b, b}, time.Minute) }},
	}
	for _, op := range ops {
		if err := op.run(); err != nil { // the first call may load the script
			t.Fatalf("%s: %v", op.name, err)
		}
		hook.n = 0
		if err := op.run(); err != nil {
			t.Fatalf("%s: %v", op.name, err)
		}
		if hook.n != 1 {
			t.Errorf("%s took %d round trips, want 1", op.name, hook.n)
		}
	}
	// A Redis that lost its script cache (restart, failover) still
	// answers, with one extra round trip.
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	hook.n = 0
	if _, _, _, err := e.Around(ctx, b, "p0360", 4); err != nil || hook.n != 2 {
		t.Fatalf("Around after SCRIPT FLUSH: %v, %d round trips", err, hook.n)
	}
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	hook.n = 0
	if _, err := e.UpsertMany(ctx, b, many); err != nil || hook.n != 2 {
		t.Fatalf("UpsertMany after SCRIPT FLUSH: %v, %d round trips", err, hook.n)
	}
}

func TestNotRankedAndValidation(t *testing.T) {
	rdb, _ := redistest.Mini(t)
	ctx := context.Background()
	e := New(rdb)
	b := Board{Tag: "lb:v", Name: "x"}
	if _, _, _, err := e.Around(ctx, b, "ghost", 4); !errors.Is(err, ErrNotRanked) {
		t.Fatalf("Around on an empty board: %v, want ErrNotRanked", err)
	}
	if _, err := e.Remove(ctx, b, "gone", 3); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := e.Around(ctx, b, "gone", 4); !errors.Is(err, ErrNotRanked) {
		t.Fatalf("Around of a removed id: %v, want ErrNotRanked", err)
	}
	res, err := e.Upsert(ctx, b, Item{ID: "gone", Score: 1, Version: 2})
	if err != nil || res.Applied {
		t.Fatalf("an older upsert brought back a removed id: %+v, %v", res, err)
	}
	bad := []struct {
		name string
		b    Board
		it   Item
	}{
		{"tag with brace", Board{Tag: "a}b", Name: "x"}, Item{ID: "p", Version: 1}},
		{"empty tag", Board{Name: "x"}, Item{ID: "p", Version: 1}},
		{"name with bar", Board{Tag: "t", Name: "x|y"}, Item{ID: "p", Version: 1}},
		{"unknown order", Board{Tag: "t", Name: "x", Order: 7}, Item{ID: "p", Version: 1}},
		{"empty id", b, Item{Version: 1}},
		{"score too big", b, Item{ID: "p", Score: MaxScore + 1, Version: 1}},
		{"negative version", b, Item{ID: "p", Version: -1}},
		{"reached before 1970", b, Item{ID: "p", Version: 1, ReachedAt: time.Date(1969, 1, 1, 0, 0, 0, 0, time.UTC)}},
	}
	for _, c := range bad {
		if _, err := e.Upsert(ctx, c.b, c.it); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", c.name, err)
		}
	}
	if n, _ := rdb.DBSize(ctx).Result(); n > 4 {
		t.Errorf("invalid writes left keys behind: %d keys", n)
	}
}
