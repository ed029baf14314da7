package ranking

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rallyhq/rally/shared/ranking/internal/redistest"
)

// storedKeys lists the keys Redis holds for b.
func storedKeys(t *testing.T, rdb redis.UniversalClient, b Board) []string {
	t.Helper()
	keys, err := rdb.Keys(context.Background(), b.keys().base+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

func snapshotOf(m *model) []Item { return m.snapshot() }

func TestLoadSwapsAtomicallyAndKeepsConcurrentWrites(t *testing.T) {
	backendsAndCluster(t, func(t *testing.T, bk backend) {
		ctx := context.Background()
		e := New(bk.rdb)
		b := Board{Tag: "lb:load", Name: "daily"}
		rng := rand.New(rand.NewPCG(seed(t), 2))
		old := newModel(b)
		for i := 0; i < 300; i++ {
			it := Item{ID: fmt.Sprintf("old-%d", i), Score: rng.Int64N(50), ReachedAt: t0, Version: 5}
			old.apply(it)
		}
		if _, err := e.UpsertMany(ctx, b, old.snapshot()); err != nil {
			t.Fatal(err)
		}

		// The snapshot: some old ids moved on, new ids, and "old-1" removed.
		next := newModel(b)
		for i := 0; i < 1500; i++ {
			next.apply(Item{ID: fmt.Sprintf("new-%d", i), Score: rng.Int64N(50), ReachedAt: t0.Add(time.Duration(i) * time.Millisecond), Version: 1})
		}
		next.apply(Item{ID: "old-0", Score: 1000, ReachedAt: t0, Version: 6})
		next.apply(Item{ID: "old-1", Version: 6, Removed: true})

		l, err := e.BeginLoad(ctx, b, 0) // no estimate: lookup levels grow during the load
		if err != nil {
			t.Fatal(err)
		}
		snap := next.snapshot()
		if err := l.Add(ctx, snap[:900]...); err != nil {
			t.Fatal(err)
		}
		// Readers still see the old board, whole.
		checkBoard(t, ctx, e, old, rng, []string{"old-0", "old-1", "new-1"}, bk.sample)

		// Writes during the load reach the new board too, newest version wins.
		live := []Item{
			{ID: "old-0", Score: 7, ReachedAt: t0, Version: 9}, // newer than the snapshot
			{ID: "new-3", Score: 1, ReachedAt: t0, Version: 0}, // older than the snapshot
			{ID: "late", Score: 99, ReachedAt: t0, Version: 1}, // not in the snapshot at all
		}
		for _, it := range live {
			if _, err := e.Upsert(ctx, b, it); err != nil {
				t.Fatal(err)
			}
			old.apply(it)
			next.apply(it)
		}
		if err := l.Add(ctx, snap[900:]...); err != nil {
			t.Fatal(err)
		}
		if err := l.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		checkBoard(t, ctx, e, next, rng, append([]string{"old-2", "old-1", "late"}, snapOIDs(snap)...), bk.sample)

		// The previous content is freed: only the live sorted set, the meta
		// and the live lookup slot remain.
		slot, _ := bk.rdb.HGet(ctx, b.keys().meta(), "live").Result()
		for _, k := range storedKeys(t, bk.rdb, b) {
			if suffix := strings.TrimPrefix(k, b.keys().base); suffix != "m" && suffix != "z" && !strings.HasPrefix(suffix, slot) {
				t.Errorf("key %q of the previous content survived the load", k)
			}
		}

		// A second load on top of the first works the same way.
		again := newModel(b)
		again.apply(Item{ID: "solo", Score: 1, Version: 1})
		if err := e.Load(ctx, b, again.snapshot()); err != nil {
			t.Fatal(err)
		}
		checkBoard(t, ctx, e, again, rng, []string{"solo", "old-0", "late"}, bk.sample)
	})
}

func snapOIDs(items []Item) []string {
	ids := make([]string, len(items))
	for i, it := range items {
		ids[i] = it.ID
	}
	return ids
}

func TestLoadIsCancelledByForgetAndByANewerLoad(t *testing.T) {
	backends(t, func(t *testing.T, bk backend) {
		ctx := context.Background()
		e := New(bk.rdb)
		b := Board{Tag: "lb:cancel", Name: "weekly"}
		if _, err := e.UpsertMany(ctx, b, []Item{{ID: "ann", Score: 3, Version: 1}, {ID: "bob", Score: 2, Version: 1}}); err != nil {
			t.Fatal(err)
		}
		// A snapshot read before ann's erasure must not bring her back.
		l, err := e.BeginLoad(ctx, b, 2)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Add(ctx, Item{ID: "ann", Score: 3, Version: 1}, Item{ID: "bob", Score: 2, Version: 1}); err != nil {
			t.Fatal(err)
		}
		if err := e.Forget(ctx, b, "ann"); err != nil {
			t.Fatal(err)
		}
		if err := l.Commit(ctx); !errors.Is(err, ErrLoadSuperseded) {
			t.Fatalf("Commit after Forget: %v, want ErrLoadSuperseded", err)
		}
		top, total, err := e.Top(ctx, b, 10)
		if err != nil || total != 1 || top[0].ID != "bob" {
			t.Fatalf("board after the cancelled load: %v, %d, %v", top, total, err)
		}

		first, err := e.BeginLoad(ctx, b, 1)
		if err != nil {
			t.Fatal(err)
		}
		second, err := e.BeginLoad(ctx, b, 1)
		if err != nil {
			t.Fatal(err)
		}
		if err := first.Add(ctx, Item{ID: "cat", Score: 1, Version: 1}); err != nil {
			t.Fatal(err)
		}
		if err := first.Commit(ctx); !errors.Is(err, ErrLoadSuperseded) {
			t.Fatalf("Commit of the older load: %v, want ErrLoadSuperseded", err)
		}
		if err := second.Add(ctx, Item{ID: "dan", Score: 1, Version: 1}); err != nil {
			t.Fatal(err)
		}
		if err := second.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		top, total, err = e.Top(ctx, b, 10)
		if err != nil || total != 1 || top[0].ID != "dan" {
			t.Fatalf("board after the newer load: %v, %d, %v", top, total, err)
		}

		aborted, err := e.BeginLoad(ctx, b, 1)
		if err != nil {
			t.Fatal(err)
		}
		if err := aborted.Add(ctx, Item{ID: "eve", Score: 1, Version: 1}); err != nil {
			t.Fatal(err)
		}
		if err := aborted.Abort(ctx); err != nil {
			t.Fatal(err)
		}
		top, total, err = e.Top(ctx, b, 10)
		if err != nil || total != 1 || top[0].ID != "dan" {
			t.Fatalf("board after an aborted load: %v, %d, %v", top, total, err)
		}
		for _, k := range storedKeys(t, bk.rdb, b) {
			if n, _ := bk.rdb.HExists(ctx, k, "eve").Result(); n {
				t.Errorf("aborted load left eve in %q", k)
			}
		}
	})
}

// Trending: windows are sums of hourly buckets whose items all use the
// zero ReachedAt.
func TestSumOfBuckets(t *testing.T) {
	backends(t, func(t *testing.T, bk backend) {
		ctx := context.Background()
		e := New(bk.rdb)
		rng := rand.New(rand.NewPCG(seed(t), 3))
		sums := newModel(Board{Tag: "trend:fav", Name: "w24h"})
		totals := map[string]int64{}
		var buckets []Board
		for h := 0; h < 24; h++ {
			bucket := Board{Tag: "trend:fav", Name: fmt.Sprintf("hour:%02d", h)}
			buckets = append(buckets, bucket)
			var items []Item
			for g := 0; g < 40; g++ {
				id := fmt.Sprintf("game-%d", rng.IntN(200))
				delta := rng.Int64N(9) - 3
				items = append(items, Item{ID: id, Score: delta, Version: int64(g + 1)})
			}
			applied, err := e.UpsertMany(ctx, bucket, items)
			if err != nil {
				t.Fatal(err)
			}
			// Within a bucket the last write of an id wins (newest version).
			last := map[string]int64{}
			for i, it := range items {
				if applied[i] {
					last[it.ID] = it.Score
				}
			}
			for id, s := range last {
				totals[id] += s
			}
		}
		for id, s := range totals {
			sums.apply(Item{ID: id, Score: s, Version: 1})
		}
		dst := Board{Tag: "trend:fav", Name: "w24h"}
		if err := e.Sum(ctx, dst, buckets, time.Minute); err != nil {
			t.Fatal(err)
		}
		ids := make([]string, 0, len(totals))
		for id := range totals {
			ids = append(ids, id)
		}
		checkBoard(t, ctx, e, sums, rng, append(ids, "game-none"), bk.sample)
		for _, k := range storedKeys(t, bk.rdb, dst) {
			if ttl, _ := bk.rdb.PTTL(ctx, k).Result(); ttl <= 0 || ttl > time.Minute {
				t.Errorf("summed key %q has ttl %s, want within a minute", k, ttl)
			}
		}
		if err := e.Sum(ctx, dst, []Board{{Tag: "trend:like", Name: "hour:00"}}, time.Minute); !errors.Is(err, ErrInvalid) {
			t.Fatalf("Sum across tags: %v, want ErrInvalid", err)
		}
	})
}

func TestExpireCoversEveryKey(t *testing.T) {
	rdb, mini := redistest.Mini(t)
	ctx := context.Background()
	e := New(rdb)
	b := Board{Tag: "trend:fav", Name: "hour:2026-11-21T10"}
	fillBoard(t, e, b, 700) // lookup levels 0 to 2
	if err := e.Expire(ctx, b, time.Hour); err != nil {
		t.Fatal(err)
	}
	// Writes after Expire keep new keys on the same deadline.
	if _, err := e.UpsertMany(ctx, b, []Item{{ID: "late-1", Score: 1, Version: 1}, {ID: "late-2", Version: 1, Removed: true}}); err != nil {
		t.Fatal(err)
	}
	keys := storedKeys(t, rdb, b)
	if len(keys) < 70 {
		t.Fatalf("expected the board to span many keys, got %d", len(keys))
	}
	for _, k := range keys {
		if ttl := mini.TTL(k); ttl <= 0 || ttl > time.Hour {
			t.Errorf("key %q has ttl %s, want within the hour", k, ttl)
		}
	}
	mini.FastForward(time.Hour + time.Second)
	if n := len(storedKeys(t, rdb, b)); n != 0 {
		t.Fatalf("%d keys outlived the board's expiry", n)
	}
	if ok, err := e.Exists(ctx, b); ok || err != nil {
		t.Fatalf("Exists after expiry = %v, %v", ok, err)
	}
	if err := e.Expire(ctx, b, time.Hour); err != nil {
		t.Fatalf("Expire of a missing board: %v", err)
	}
	if ok, _ := e.Exists(ctx, b); ok {
		t.Fatal("Expire created a missing board")
	}
}

func TestForgetAndDeleteLeaveNoTrace(t *testing.T) {
	backends(t, func(t *testing.T, bk backend) {
		ctx := context.Background()
		e := New(bk.rdb)
		b := Board{Tag: "lb:gdpr", Name: "season"}
		fillBoard(t, e, b, 600)
		const who = "erase-me-please"
		for v := int64(1); v <= 3; v++ {
			if _, err := e.Upsert(ctx, b, Item{ID: who, Score: v, ReachedAt: t0, Version: v}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := e.Remove(ctx, b, who, 4); err != nil {
			t.Fatal(err)
		}
		if err := e.Forget(ctx, b, who); err != nil {
			t.Fatal(err)
		}
		for _, k := range storedKeys(t, bk.rdb, b) {
			var blob string
			switch typ, _ := bk.rdb.Type(ctx, k).Result(); typ {
			case "hash":
				blob = fmt.Sprint(bk.rdb.HGetAll(ctx, k).Val())
			case "zset":
				blob = fmt.Sprint(bk.rdb.ZRange(ctx, k, 0, -1).Val())
			}
			if strings.Contains(blob, who) {
				t.Fatalf("%q still holds a trace of the forgotten id", k)
			}
		}
		// Forgotten means unknown: the lowest version applies again.
		if res, err := e.Upsert(ctx, b, Item{ID: who, Score: 1, Version: 1}); err != nil || !res.Applied {
			t.Fatalf("Upsert after Forget = %+v, %v", res, err)
		}
		if ok, err := e.Exists(ctx, b); !ok || err != nil {
			t.Fatalf("Exists = %v, %v", ok, err)
		}
		if err := e.Delete(ctx, b); err != nil {
			t.Fatal(err)
		}
		if keys := storedKeys(t, bk.rdb, b); len(keys) != 0 {
			t.Fatalf("Delete left %d keys: %v", len(keys), keys[:min(5, len(keys))])
		}
	})
}

// On Redis Cluster every multi-key command must stay in one hash slot, as
// on ElastiCache Serverless; a CROSSSLOT error would fail these calls.
func TestRunsOnRedisCluster(t *testing.T) {
	rdb := redistest.Cluster(t)
	ctx := context.Background()
	e := New(rdb)
	b := Board{Tag: "lb:cluster", Name: "season", Ties: Shared}
	fillBoard(t, e, b, 700)
	if _, err := e.Upsert(ctx, b, Item{ID: "p0001", Score: 1, Version: 2}); err != nil {
		t.Fatal(err)
	}
	if self, _, _, err := e.Around(ctx, b, "p0360", 4); err != nil || self.Rank != 360 {
		t.Fatalf("Around = %+v, %v", self, err)
	}
	if got, err := e.Among(ctx, b, []string{"p0005", "p0006", "p0001"}); err != nil || len(got) != 3 {
		t.Fatalf("Among = %v, %v", got, err)
	}
	items := make([]Item, 3000)
	for i := range items {
		items[i] = Item{ID: fmt.Sprintf("q%05d", i), Score: int64(i % 10), Version: 1}
	}
	if err := e.Load(ctx, b, items); err != nil {
		t.Fatal(err)
	}
	if _, total, err := e.Top(ctx, b, 10); err != nil || total != 3000 {
		t.Fatalf("Top after Load: %d, %v", total, err)
	}
	if err := e.Sum(ctx, Board{Tag: b.Tag, Name: "sum"}, []Board{b, b}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := e.Expire(ctx, b, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := e.Forget(ctx, b, "q00001"); err != nil {
		t.Fatal(err)
	}
	if err := e.Delete(ctx, b); err != nil {
		t.Fatal(err)
	}
}

func TestALoadResumedFromItsStateFinishesAndASupersededOneSaysSo(t *testing.T) {
	backends(t, func(t *testing.T, bk backend) {
		ctx := context.Background()
		e := New(bk.rdb)
		b := Board{Tag: "lb:resume", Name: "all"}
		want := newModel(b)
		n := min(2000, bk.ids) // several chunks, past lookup level 2
		for i := 0; i < n; i++ {
			want.apply(Item{ID: fmt.Sprintf("p-%d", i), Score: int64(i % 97), ReachedAt: t0, Version: 1})
		}
		snap := want.snapshot()
		cut := n * 3 / 5
		first, err := e.BeginLoad(ctx, b, len(snap))
		if err != nil {
			t.Fatal(err)
		}
		if err := first.Add(ctx, snap[:cut]...); err != nil {
			t.Fatal(err)
		}
		if err := first.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		// The next invocation knows only the state.
		resumed, err := e.ResumeLoad(b, first.State())
		if err != nil {
			t.Fatal(err)
		}
		if err := resumed.Add(ctx, snap[cut:]...); err != nil {
			t.Fatal(err)
		}
		if err := resumed.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		checkBoard(t, ctx, e, want, rand.New(rand.NewPCG(seed(t), 3)), []string{"p-0", fmt.Sprintf("p-%d", n-1)}, bk.sample)

		stale, err := e.BeginLoad(ctx, b, 10)
		if err != nil {
			t.Fatal(err)
		}
		if err := stale.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		st := stale.State()
		if err := e.Load(ctx, b, snap); err != nil { // a newer load wins
			t.Fatal(err)
		}
		late, err := e.ResumeLoad(b, st)
		if err != nil {
			t.Fatal(err)
		}
		err = late.Add(ctx, snap[:1]...)
		if err == nil {
			err = late.Commit(ctx)
		}
		if !errors.Is(err, ErrLoadSuperseded) {
			t.Fatalf("resuming a superseded load: %v, want ErrLoadSuperseded", err)
		}
		checkBoard(t, ctx, e, want, rand.New(rand.NewPCG(seed(t), 4)), []string{"p-5"}, bk.sample)
	})
}
