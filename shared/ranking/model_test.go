package ranking

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
	"time"
)

// model is the brute-force reference: a map of versioned items, sorted
// from scratch whenever it is read.
type model struct {
	b     Board
	items map[string]Item // Removed items are tombstones
}

func newModel(b Board) *model { return &model{b: b, items: map[string]Item{}} }

// apply mirrors Upsert: only a newer version changes anything.
func (m *model) apply(it Item) bool {
	if cur, ok := m.items[it.ID]; ok && cur.Version >= it.Version {
		return false
	}
	it.ReachedAt = truncMillis(it.ReachedAt)
	m.items[it.ID] = it
	return true
}

func (m *model) forget(id string) { delete(m.items, id) }

func truncMillis(t time.Time) time.Time {
	if t.IsZero() || t.UnixMilli() == 0 {
		return time.Time{}
	}
	return time.UnixMilli(t.UnixMilli()).UTC()
}

// better reports whether a ranks before b by the board's ordering rules.
func (m *model) better(a, b Item) bool {
	if a.Score != b.Score {
		if m.b.Order == Desc {
			return a.Score > b.Score
		}
		return a.Score < b.Score
	}
	if !a.ReachedAt.Equal(b.ReachedAt) {
		return a.ReachedAt.Before(b.ReachedAt)
	}
	return a.ID < b.ID
}

// rank sorts items and ranks them among themselves. Shared ranks count
// the strictly better scores directly.
func (m *model) rank(items []Item) []Entry {
	sort.Slice(items, func(i, j int) bool { return m.better(items[i], items[j]) })
	out := make([]Entry, len(items))
	for i, it := range items {
		rank := i + 1
		if m.b.Ties == Shared {
			rank = 1
			for _, o := range items {
				if o.Score != it.Score && m.better(o, it) {
					rank++
				}
			}
		}
		out[i] = Entry{ID: it.ID, Score: it.Score, ReachedAt: it.ReachedAt, Rank: rank}
	}
	return out
}

func (m *model) sorted() []Entry {
	var live []Item
	for _, it := range m.items {
		if !it.Removed {
			live = append(live, it)
		}
	}
	return m.sharedFast(live)
}

// sharedFast is rank for big boards: the O(n²) count of strictly better
// scores is replaced by counting per distinct score, still independent of
// the engine's window arithmetic.
func (m *model) sharedFast(items []Item) []Entry {
	if m.b.Ties != Shared || len(items) < 200 {
		return m.rank(items)
	}
	earliest := *m
	earliest.b.Ties = Earliest
	out := earliest.rank(items)
	perScore := map[int64]int{}
	for _, it := range items {
		perScore[it.Score]++
	}
	scores := make([]int64, 0, len(perScore))
	for s := range perScore {
		scores = append(scores, s)
	}
	sort.Slice(scores, func(i, j int) bool {
		return m.better(Item{Score: scores[i]}, Item{Score: scores[j]})
	})
	betterThan := map[int64]int{}
	n := 0
	for _, s := range scores {
		betterThan[s] = n
		n += perScore[s]
	}
	for i := range out {
		out[i].Rank = betterThan[out[i].Score] + 1
	}
	return out
}

func (m *model) among(ids []string) []Entry {
	seen := map[string]bool{}
	var items []Item
	for _, id := range ids {
		if it, ok := m.items[id]; ok && !it.Removed && !seen[id] {
			seen[id] = true
			items = append(items, it)
		}
	}
	return m.rank(items)
}

// snapshot is what a rebuild would read from the source of truth.
func (m *model) snapshot() []Item {
	out := make([]Item, 0, len(m.items))
	for _, it := range m.items {
		out = append(out, it)
	}
	return out
}

func sameEntries(got, want []Entry) error {
	if len(got) != len(want) {
		return fmt.Errorf("got %d entries, want %d\n got: %v\nwant: %v", len(got), len(want), got, want)
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.ID != w.ID || g.Score != w.Score || g.Rank != w.Rank || !g.ReachedAt.Equal(w.ReachedAt) {
			return fmt.Errorf("entry %d: got %+v, want %+v", i, g, w)
		}
	}
	return nil
}

// keep samples: with sample > 0, about sample of every len(ids) checks run.
func keep(rng *rand.Rand, ids []string, sample int) bool {
	return sample == 0 || rng.IntN(len(ids)) < sample
}

// checkBoard compares every read of the engine with the model: Total, Top
// for several n, Page from ranks at the edges and a sample between, Around for every ranked ID (rotating k, and every k at
// the edges), Around of unranked IDs, and Among of random groups. With
// sample > 0, Around reads the edges and only sample other IDs.
func checkBoard(t *testing.T, ctx context.Context, e *Engine, m *model, rng *rand.Rand, ids []string, sample int) {
	t.Helper()
	want := m.sorted()
	n := len(want)
	total, err := e.Total(ctx, m.b)
	if err != nil || total != int64(n) {
		t.Fatalf("Total = %d, %v; want %d", total, err, n)
	}
	for _, limit := range []int{0, 1, 3, 10, n / 2, n, n + 7} {
		got, total, err := e.Top(ctx, m.b, limit)
		if err != nil {
			t.Fatalf("Top(%d): %v", limit, err)
		}
		if total != int64(n) {
			t.Fatalf("Top(%d) total = %d, want %d", limit, total, n)
		}
		if err := sameEntries(got, want[:min(limit, n)]); err != nil {
			t.Fatalf("Top(%d): %v", limit, err)
		}
	}
	// Pages further down: every start near the top and the bottom, and
	// about 40 between (many start inside a tie).
	for from := 1; from <= n+1; from++ {
		if from > 12 && from < n-12 && rng.IntN(n) >= 40 {
			continue
		}
		for _, limit := range []int{1, 5, 10} {
			got, total, err := e.Page(ctx, m.b, from, limit)
			if err != nil || total != int64(n) {
				t.Fatalf("Page(%d, %d): total %d, %v; want %d", from, limit, total, err, n)
			}
			if err := sameEntries(got, want[min(from-1, n):min(from-1+limit, n)]); err != nil {
				t.Fatalf("Page(%d, %d): %v", from, limit, err)
			}
		}
	}
	index := make(map[string]int, n)
	for i, en := range want {
		index[en.ID] = i
	}
	around := func(id string, k int) {
		t.Helper()
		self, window, total, err := e.Around(ctx, m.b, id, k)
		i, ranked := index[id]
		if !ranked {
			if !errors.Is(err, ErrNotRanked) {
				t.Fatalf("Around(%q) of an unranked id: err = %v, want ErrNotRanked", id, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("Around(%q, %d): %v", id, k, err)
		}
		if total != int64(n) {
			t.Fatalf("Around(%q) total = %d, want %d", id, total, n)
		}
		if err := sameEntries([]Entry{self}, want[i:i+1]); err != nil {
			t.Fatalf("Around(%q, %d) self: %v", id, k, err)
		}
		if err := sameEntries(window, want[max(0, i-k):min(n, i+k+1)]); err != nil {
			t.Fatalf("Around(%q, %d) window: %v", id, k, err)
		}
	}
	for i, en := range want {
		if i < 6 || i >= n-6 {
			for _, k := range []int{0, 1, 2, 3, 4, 5, 9, n} {
				around(en.ID, k)
			}
		} else if keep(rng, ids, sample) {
			around(en.ID, i%6)
		}
	}
	for _, id := range ids {
		if _, ranked := index[id]; !ranked && keep(rng, ids, sample) {
			around(id, 4)
		}
	}
	for g := 0; g < 20; g++ {
		group := make([]string, rng.IntN(60))
		for i := range group {
			group[i] = ids[rng.IntN(len(ids))]
		}
		got, err := e.Among(ctx, m.b, group)
		if err != nil {
			t.Fatalf("Among: %v", err)
		}
		if err := sameEntries(got, m.among(group)); err != nil {
			t.Fatalf("Among(%v): %v", group, err)
		}
	}
}
