package leaderboards_test

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rallyhq/rally/infra/local/apitest"
	"github.com/rallyhq/rally/infra/local/stack"
	"github.com/rallyhq/rally/infra/local/stacktest"
	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/infra/local/testenv/await"
	"github.com/rallyhq/rally/shared/config"
)

// A big board read without Redis ranks from its score histogram, which
// the leaderboard processor keeps from the Scores stream: through the
// API, a deep player's rank says "approximate": true with a rank_error
// that holds the brute-force model's rank, the neighbours are the
// model's, the top is still exact; a cheater removed and a player banned
// while Redis is down leave the histogram, and the ranks follow. With
// Redis up nothing of this shows. (The estimate starts at 60 members
// here, at 10,000 by default.)
func TestABigBoardWithoutRedisRanksFromItsHistogram(t *testing.T) {
	t.Parallel()
	srv := testenv.Redis(t)
	s := stacktest.Start(t, stack.Options{RedisURL: srv.URL(), Configure: func(c *config.Config) {
		c.RankEstimateFrom, c.RankExactTop = 60, 5
	}})
	c := apitest.New(t, s)
	ctx := context.Background()
	s.Clock().Set(time.Date(2026, 11, 15, 12, 0, 0, 0, time.UTC))
	b := board{ID: "crowd", Title: "Crowd", Policy: "best", Order: "desc", TieBreak: "earliest", Reset: "none", MaxN: 100, Timezone: "UTC"}
	define(t, c, b)
	m := newModel(b)

	// A crowd of close scores (buckets of several players each), and a
	// few small tied ones.
	players := testenv.Scale(150, 1_000)
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	base := time.Date(2026, 11, 15, 6, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for p := range players {
		score := int64(1000 + rng.Intn(400))
		if p%10 == 0 {
			score = int64(rng.Intn(5))
		}
		at := base.Add(time.Duration(rng.Intn(3600)) * time.Second)
		player := fmt.Sprintf("c%04d", p)
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			body := map[string]any{"player_id": player, "match_id": "m1", "score": score, "occurred_at": at.Format(time.RFC3339)}
			c.Service("POST", "/v1/leaderboards/crowd/scores", body).Expect(t, 200)
			mu.Lock()
			m.submit(player, "m1", score, at)
			mu.Unlock()
		})
	}
	wg.Wait()
	if err := s.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}

	// Redis up: exact, and nothing approximate in the answer.
	want := standings(b, m.scores, nil)
	deep := want[len(want)/2].PlayerID
	r := c.Player("reader", "GET", "/v1/leaderboards/crowd/players/"+deep+"/rank?k=2", nil).Expect(t, 200)
	if strings.Contains(string(r.Body), "approximate") || strings.Contains(string(r.Body), "rank_error") {
		t.Fatalf("a rank from Redis: %s", r.Body)
	}

	srv.Stop()
	checkEstimates(t, c, b, m, "redis down")

	// A cheater removed and a player banned while Redis is down: the
	// histogram loses them once the processor has their records.
	cheater, banned := want[len(want)/3].PlayerID, want[2*len(want)/3].PlayerID
	c.Service("DELETE", "/v1/leaderboards/crowd/players/"+cheater, nil).Expect(t, 204)
	c.Service("PUT", "/v1/ops/players/"+banned+"/ban", nil).Expect(t, 200)
	delete(m.scores, cheater)
	delete(m.scores, banned)
	// Reads are reused for a moment (hot boards): the last one the check
	// made sees the smaller board once none is reused any more.
	last := want[3].PlayerID
	await.Until(t, 10*time.Second, "the removal and the ban counted", func() bool {
		var got struct {
			Total int `json:"total"`
		}
		c.Player("reader", "GET", "/v1/leaderboards/crowd/players/"+last+"/rank?k=2", nil).Expect(t, 200).JSON(t, &got)
		return got.Total == len(m.scores)
	})
	if err := s.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	checkEstimates(t, c, b, m, "after a removal and a ban")
}

// checkEstimates reads the rank (k=2) of a spread of players and of the
// top ones and checks each against the model: an approximate rank within
// its bound, an exact one equal, the neighbours the model's.
func checkEstimates(t *testing.T, c *apitest.Client, b board, m *model, when string) {
	t.Helper()
	want := standings(b, m.scores, nil)
	approximate := 0
	for i := 0; i < len(want); i += max(1, len(want)/40) {
		for _, at := range []int{i, min(i, 3)} {
			self, win, _ := window(want, want[at].PlayerID, 2)
			var got struct {
				Rank        int      `json:"rank"`
				Total       int      `json:"total"`
				Neighbors   []ranked `json:"neighbors"`
				Degraded    bool     `json:"degraded"`
				Approximate bool     `json:"approximate"`
				RankError   *int     `json:"rank_error"`
			}
			c.Player("reader", "GET", "/v1/leaderboards/crowd/players/"+self.PlayerID+"/rank?k=2", nil).Expect(t, 200).JSON(t, &got)
			off := got.Rank - self.Rank
			if off < 0 {
				off = -off
			}
			if !got.Degraded || got.Total != len(want) || len(got.Neighbors) != len(win) {
				t.Fatalf("%s: rank of %s: %+v, want total %d and %d neighbours", when, self.PlayerID, got, len(want), len(win))
			}
			for j, n := range got.Neighbors {
				if n.PlayerID != win[j].PlayerID || n.Score != win[j].Score {
					t.Fatalf("%s: neighbours of %s: %v, want %v", when, self.PlayerID, got.Neighbors, win)
				}
			}
			switch {
			case got.Approximate != (got.RankError != nil):
				t.Fatalf("%s: rank of %s: approximate %v with rank_error %v", when, self.PlayerID, got.Approximate, got.RankError)
			case !got.Approximate && off != 0:
				t.Fatalf("%s: exact rank of %s is %d, the model's %d", when, self.PlayerID, got.Rank, self.Rank)
			case got.Approximate && off > *got.RankError:
				t.Fatalf("%s: rank of %s is %d ± %d, the model's %d", when, self.PlayerID, got.Rank, *got.RankError, self.Rank)
			case got.Approximate:
				approximate++
			case self.Rank > 5:
				t.Fatalf("%s: %s at rank %d of %d was counted, not estimated", when, self.PlayerID, self.Rank, len(want))
			}
		}
	}
	if approximate == 0 {
		t.Fatalf("%s: no rank was estimated", when)
	}
}
