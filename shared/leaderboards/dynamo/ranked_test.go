package dynamo_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/shared/leaderboards"
)

// Redis-less reads must rank exactly like a brute-force sort of every
// score: many equal scores and many equal times, under both orders and both
// tie-breaks, across all index shards, after scores moved (Latest replaces).
func TestIndexReadsEqualABruteForceRanking(t *testing.T) {
	for _, o := range []leaderboards.Order{leaderboards.Desc, leaderboards.Asc} {
		for _, tb := range []leaderboards.TieBreak{leaderboards.Earliest, leaderboards.Shared} {
			t.Run(string(o)+"_"+string(tb), func(t *testing.T) {
				t.Parallel()
				checkAgainstBruteForce(t, o, tb)
			})
		}
	}
}

func checkAgainstBruteForce(t *testing.T, o leaderboards.Order, tb leaderboards.TieBreak) {
	ctx := context.Background()
	s := newStores(t)
	d := board("prop", leaderboards.Latest, o, tb)
	players, period := testenv.Scale(120, 300), leaderboards.AllTime
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))

	start := time.Now()
	final := map[string]leaderboards.Entry{}
	var subs []leaderboards.Match
	for i := 0; i < players; i++ {
		id := fmt.Sprintf("p%03d", i)
		m := leaderboards.Match{PlayerID: id, MatchID: "m1", Score: int64(rng.IntN(7) - 3),
			OccurredAt: t0.Add(time.Duration(rng.IntN(3)) * time.Second)}
		switch i {
		case 0:
			m.Score = leaderboards.MaxScore
		case 1:
			m.Score = -leaderboards.MaxScore
		}
		subs = append(subs, m)
		if i%3 == 0 {
			// A second, later match moves the player to a new index key.
			subs = append(subs, leaderboards.Match{PlayerID: id, MatchID: "m2", Score: int64(rng.IntN(7) - 3),
				OccurredAt: t0.Add(time.Duration(3+rng.IntN(2)) * time.Second)})
		}
	}
	for _, m := range subs {
		if _, err := s.scores.Submit(ctx, d, period, m, apply(d, m)); err != nil {
			t.Fatalf("submit %+v: %v", m, err)
		}
		final[m.PlayerID] = leaderboards.Entry{PlayerID: m.PlayerID, Score: m.Score, ReachedAt: m.OccurredAt}
	}
	t.Logf("%d submissions in %s", len(subs), time.Since(start).Round(time.Millisecond))

	want := make([]leaderboards.Entry, 0, len(final))
	for _, e := range final {
		want = append(want, e)
	}
	want = rankedByHand(o, tb, want)
	index := map[string]int{}
	for i, e := range want {
		index[e.PlayerID] = i
	}

	if n, err := s.scores.Members(ctx, d.ID, period); err != nil || n != int64(players) {
		t.Fatalf("members %d (%v), want %d", n, err, players)
	}

	start = time.Now()
	for _, n := range []int{0, 1, 2, 10, 57, players - 1, players, players + 20} {
		got, err := s.scores.Top(ctx, d, period, 1, n)
		if err != nil {
			t.Fatalf("top %d: %v", n, err)
		}
		sameEntries(t, fmt.Sprintf("top %d", n), got, want[:min(n, len(want))])
	}
	t.Logf("8 top reads in %s", time.Since(start).Round(time.Millisecond))

	start = time.Now()
	type query struct {
		player string
		k      int
	}
	queries := make(chan query)
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for q := range queries {
				pl, err := s.scores.Around(ctx, d, period, q.player, q.k)
				me, window := pl.Self, pl.Window
				if err != nil {
					t.Errorf("around %s k=%d: %v", q.player, q.k, err)
					continue
				}
				i := index[q.player]
				sameEntries(t, fmt.Sprintf("around %s k=%d", q.player, q.k), window, want[max(0, i-q.k):min(len(want), i+q.k+1)])
				sameEntries(t, fmt.Sprintf("around %s k=%d: own entry", q.player, q.k), []leaderboards.Entry{me}, want[i:i+1])
			}
		}()
	}
	// Every player with 4 each side; every third with 0 and 1 (the windows
	// cut at the edges of the board and of tie groups all the same), every
	// player under RALLY_TEST_SCALE=full.
	reads, every := 0, testenv.Scale(3, 1)
	for _, k := range []int{4, 0, 1} {
		for i, e := range want {
			if k == 4 || i%every == 0 {
				queries <- query{e.PlayerID, k}
				reads++
			}
		}
	}
	close(queries)
	wg.Wait()
	t.Logf("%d around reads in %s", reads, time.Since(start).Round(time.Millisecond))

	if _, err := s.scores.Around(ctx, d, period, "nobody", 4); !errors.Is(err, leaderboards.ErrNotRanked) {
		t.Fatalf("around an unranked player: %v, want ErrNotRanked", err)
	}
	scanned := 0
	err := s.scores.Scan(ctx, d.ID, period, func(page []leaderboards.Score) error {
		for _, sc := range page {
			if e := final[sc.PlayerID]; e.Score != sc.Score || !e.ReachedAt.Equal(sc.ReachedAt) {
				return fmt.Errorf("scanned %+v, submitted %+v", sc, e)
			}
			scanned++
		}
		return nil
	})
	if err != nil || scanned != players {
		t.Fatalf("scan: %d scores (%v), want %d", scanned, err, players)
	}
}

func sameEntries(t *testing.T, what string, got, want []leaderboards.Entry) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d entries, want %d", what, len(got), len(want))
		return
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.Rank != w.Rank || g.PlayerID != w.PlayerID || g.Score != w.Score || !g.ReachedAt.Equal(w.ReachedAt) {
			t.Errorf("%s: entry %d is %+v, want %+v", what, i, g, w)
			return
		}
	}
}

func TestReadsOfAnEmptyBoard(t *testing.T) {
	ctx := context.Background()
	s := newStores(t)
	d := board("empty", leaderboards.Best, leaderboards.Desc, leaderboards.Shared)
	top, err := s.scores.Top(ctx, d, leaderboards.AllTime, 1, 10)
	if err != nil || len(top) != 0 {
		t.Fatalf("top of an empty board: %+v %v", top, err)
	}
	if n, err := s.scores.Members(ctx, d.ID, leaderboards.AllTime); err != nil || n != 0 {
		t.Fatalf("members of an empty board: %d %v", n, err)
	}
	got, err := s.scores.Get(ctx, d.ID, leaderboards.AllTime, []string{"a", "b"})
	if err != nil || len(got) != 0 {
		t.Fatalf("get on an empty board: %+v %v", got, err)
	}
}
