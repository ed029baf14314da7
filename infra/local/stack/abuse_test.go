package stack_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/rallyhq/rally/infra/local/apitest"
	"github.com/rallyhq/rally/infra/local/stack"
	"github.com/rallyhq/rally/infra/local/stacktest"
	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/infra/local/testenv/await"
	"github.com/rallyhq/rally/shared/config"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/streaks"
)

// loadFor is how long the mixed load runs: 30 s (60 s under
// RALLY_TEST_SCALE=full), or RALLY_ABUSE_SECONDS.
func loadFor(t *testing.T) time.Duration {
	if v := os.Getenv("RALLY_ABUSE_SECONDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 5 {
			t.Fatalf("RALLY_ABUSE_SECONDS=%q: want whole seconds, at least 5", v)
		}
		return time.Duration(n) * time.Second
	}
	return time.Duration(testenv.Scale(30, 60)) * time.Second
}

// Classes of caller: ordinary players, the game server submitting their
// scores, and the two abusers.
const (
	ordinary      = "ordinary"
	gameServer    = "service"
	abusivePlayer = "abusive player"
	abusiveIP     = "abusive IP"
)

// tally is what the load saw, by class of caller and of route.
type tally struct {
	mu      sync.Mutex
	sent    int
	served  int
	refused map[string]int // by caller class
	failed  int            // responses ≥ 500
	errors  []string
	// latencies are by route class, of ordinary callers only (players and
	// the game server): the abusers' answers are mostly quick 429s.
	latencies map[string][]time.Duration
}

func (ty *tally) add(caller, route string, r apitest.Response, err error, took time.Duration) {
	ty.mu.Lock()
	defer ty.mu.Unlock()
	ty.sent++
	switch {
	case err != nil:
		ty.errors = append(ty.errors, fmt.Sprintf("%s (%s): %v", r.Request, caller, err))
	case r.Status == 429:
		ty.refused[caller]++
	case r.Status >= 500 || (caller == ordinary && r.Status >= 400):
		if r.Status >= 500 {
			ty.failed++
		}
		ty.errors = append(ty.errors, fmt.Sprintf("%s (%s): %d %s", r.Request, caller, r.Status, r.Body))
	default:
		ty.served++
	}
	if caller == ordinary || caller == gameServer {
		ty.latencies[route] = append(ty.latencies[route], took)
	}
}

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

// Half a minute (a minute under RALLY_TEST_SCALE=full) of mixed load on
// the local stack: 200 ordinary players, each from an address of their
// own, favoriting, reading, recording activity
// and having scores submitted, beside one player flooding favorites and
// one address flooding reads for many players; Redis is killed halfway
// and restarted empty. Only the abusers are refused, nothing answers 5xx,
// and afterwards every count, board entry and streak (points, current,
// longest, last date) equals the model of what was accepted.
func TestAbusersAreLimitedAndEveryoneElseIsServedThroughARedisRestart(t *testing.T) {
	redis := testenv.Redis(t)
	// The per-IP budget is scaled to what this test can send from one
	// address on a busy 2-core machine under the race detector (eight
	// callers back to back: well over a request a second even when slow),
	// and stays above an ordinary player's pace (each has an address of
	// their own and pauses 2–4 s between calls: at most 30 a minute).
	const ipBudget = 60
	s := stacktest.Start(t, stack.Options{RedisURL: redis.URL(), Configure: func(c *config.Config) {
		c.Budgets = map[string]int{routes.IPBudget.Name: ipBudget}
	}})
	c := apitest.New(t, s)
	c.Service("PUT", "/v1/leaderboards/brawl", map[string]any{"title": "Brawl", "policy": "best", "max_n": 1000}).Expect(t, 201)

	const players = 200
	games := []string{"g0", "g1", "g2", "g3", "g4", "g5", "g6", "g7"}
	duration := loadFor(t)
	ctx, cancel := context.WithTimeout(context.Background(), duration)
	defer cancel()
	ty := &tally{refused: map[string]int{}, latencies: map[string][]time.Duration{}}
	call := func(caller, route string, call apitest.Call) apitest.Response {
		start := time.Now()
		r, err := c.Try(call)
		ty.add(caller, route, r, err, time.Since(start))
		return r
	}

	// The model: each ordinary player's favorites, best score, points and
	// the dates they were active on.
	var mu sync.Mutex
	favs := map[string]map[string]bool{}
	best := map[string]int{}
	points := map[string]int64{}
	active := map[string]map[string]bool{}
	var wg sync.WaitGroup
	for i := range players {
		p, from := fmt.Sprintf("player-%03d", i), fmt.Sprintf("127.0.1.%d", 1+i%250)
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			for n := 0; ctx.Err() == nil; n++ {
				game := games[rng.IntN(len(games))]
				switch n % 5 {
				case 0, 1:
					method := "POST"
					if rng.IntN(3) == 0 {
						method = "DELETE"
					}
					if r := call(ordinary, "write", apitest.Call{Method: method, Path: "/v1/favorites/" + game, As: p, From: from}); r.Status == 200 {
						mu.Lock()
						if favs[p] == nil {
							favs[p] = map[string]bool{}
						}
						favs[p][game] = method == "POST"
						mu.Unlock()
					}
				case 2:
					call(ordinary, "read", apitest.Call{Method: "GET", Path: "/v1/games/" + game + "/favorites/count", As: p, From: from})
				case 3:
					var out struct {
						Awarded int64  `json:"points_awarded"`
						Date    string `json:"activity_date"`
					}
					r := call(ordinary, "write", apitest.Call{Method: "POST", Path: "/v1/activity", As: p, From: from,
						Header: map[string]string{"Idempotency-Key": fmt.Sprintf("lvl-%d", n)},
						Body:   map[string]any{"event_type": "LEVEL_COMPLETED", "source": "mobile_app"}})
					if r.Status == 200 && json.Unmarshal(r.Body, &out) == nil {
						mu.Lock()
						points[p] += out.Awarded
						if active[p] == nil {
							active[p] = map[string]bool{}
						}
						active[p][out.Date] = true
						mu.Unlock()
					}
				case 4:
					score := rng.IntN(10_000)
					r := call(gameServer, "service", apitest.Call{Method: "POST", Path: "/v1/leaderboards/brawl/scores", Service: true,
						Body: map[string]any{"player_id": p, "match_id": fmt.Sprintf("%s-%d", p, n), "score": score}})
					if r.Status == 200 {
						mu.Lock()
						best[p] = max(best[p], score)
						mu.Unlock()
					}
				}
				select {
				case <-ctx.Done():
				case <-time.After(time.Duration(2000+rng.IntN(2000)) * time.Millisecond):
				}
			}
		})
	}
	// One player floods favorites; one address floods reads for 50 players.
	// Each floods for the whole load and on until refused: on a busy
	// machine a slow flood may need longer to outrun its budget's burst
	// (at most four times the load: past it the budget never held, and
	// the test fails).
	refusedOnce := func(caller string) bool {
		ty.mu.Lock()
		defer ty.mu.Unlock()
		return ty.refused[caller] > 0
	}
	floodCtx, stopFlood := context.WithTimeout(context.Background(), 4*duration)
	defer stopFlood()
	flood := func(caller string) bool {
		return floodCtx.Err() == nil && (ctx.Err() == nil || !refusedOnce(caller))
	}
	for w := range 8 {
		wg.Go(func() {
			for n := 0; w < 4 && flood(abusivePlayer); n++ {
				call(abusivePlayer, "write", apitest.Call{Method: "POST", Path: fmt.Sprintf("/v1/favorites/spam-%d-%d", w, n), As: "abuser", From: "127.0.2.1"})
			}
		})
		wg.Go(func() {
			for n := 0; flood(abusiveIP); n++ {
				call(abusiveIP, "read", apitest.Call{Method: "GET", Path: "/v1/games/g0/favorites/count", As: fmt.Sprintf("bot-%d", n%50), From: "127.0.3.1"})
			}
		})
	}
	// Halfway, Redis dies and comes back empty.
	wg.Go(func() {
		select {
		case <-ctx.Done():
			return
		case <-time.After(duration / 2):
		}
		redis.Stop()
		time.Sleep(duration / 10) // the outage under test
		if err := redis.Start(context.Background()); err != nil {
			t.Errorf("restart redis: %v", err)
		}
	})
	wg.Wait()

	t.Logf("%d requests sent, %d served in %v; 429s: %d to the abusive player, %d to the abusive IP, %d to ordinary callers (%d players, %d game server); %d responses >= 500",
		ty.sent, ty.served, duration, ty.refused[abusivePlayer], ty.refused[abusiveIP],
		ty.refused[ordinary]+ty.refused[gameServer], ty.refused[ordinary], ty.refused[gameServer], ty.failed)
	for _, route := range []string{"read", "write", "service"} {
		ds := ty.latencies[route]
		t.Logf("ordinary %-7s p50 %v p99 %v over %d requests", route, percentile(ds, .5).Round(time.Millisecond), percentile(ds, .99).Round(time.Millisecond), len(ds))
	}
	for _, e := range ty.errors[:min(len(ty.errors), 20)] {
		t.Error(e)
	}
	if len(ty.errors) > 0 {
		t.Fatalf("%d requests failed (%d answered >= 500)", len(ty.errors), ty.failed)
	}
	for _, abuser := range []string{abusivePlayer, abusiveIP} {
		if ty.refused[abuser] == 0 {
			t.Errorf("the %s was never refused", abuser)
		}
	}

	// Afterwards every count, board entry and streak equals the model,
	// read from addresses of their own: the audit is not under the per-IP
	// budget this test sets.
	audits := 0
	audit := func(call apitest.Call) apitest.Response {
		audits++
		call.From = fmt.Sprintf("127.0.%d.%d", 4+audits/250, 1+audits%250)
		r, err := c.Try(call)
		if err != nil {
			t.Fatalf("%s %s: %v", call.Method, call.Path, err)
		}
		return r
	}
	if err := s.WaitIdle(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{}
	for _, gs := range favs {
		for g, on := range gs {
			if on {
				want[g]++
			}
		}
	}
	for _, g := range games {
		await.Until(t, 30*time.Second, "the count of "+g+" equals the model", func() bool {
			var out struct {
				Count int `json:"count"`
			}
			audit(apitest.Call{Method: "GET", Path: "/v1/games/" + g + "/favorites/count", As: "auditor"}).Expect(t, 200).JSON(t, &out)
			return out.Count == want[g]
		})
	}
	var top struct {
		Entries []struct {
			PlayerID string `json:"player_id"`
			Score    int    `json:"score"`
		} `json:"entries"`
	}
	audit(apitest.Call{Method: "GET", Path: "/v1/leaderboards/brawl/top?n=1000", As: "auditor"}).Expect(t, 200).JSON(t, &top)
	differ := 0
	if len(top.Entries) != len(best) {
		differ++
		t.Errorf("the board has %d players, the model %d", len(top.Entries), len(best))
	}
	for _, e := range top.Entries {
		if best[e.PlayerID] != e.Score {
			differ++
			t.Errorf("%s: board says %d, model %d", e.PlayerID, e.Score, best[e.PlayerID])
		}
	}
	for p, want := range points {
		var out struct {
			Total   int64   `json:"total_points"`
			Current int64   `json:"current_streak"`
			Longest int64   `json:"longest_streak"`
			Last    *string `json:"last_activity_date"`
		}
		audit(apitest.Call{Method: "GET", Path: "/v1/users/" + p + "/streak", As: p}).Expect(t, 200).JSON(t, &out)
		last, current, longest := streakOf(active[p])
		var got string
		if out.Last != nil {
			got = *out.Last
		}
		if out.Total != want || out.Current != current || out.Longest != longest || got != last {
			differ++
			t.Errorf("%s: %d points, streak %d (longest %d), last active %q; model %d points, streak %d (longest %d), last active %q",
				p, out.Total, out.Current, out.Longest, got, want, current, longest, last)
		}
	}
	t.Logf("model check: %d favorite counts, %d board entries and %d streaks (points, current, longest, last date) compared; %d differ",
		len(games), len(best), len(points), differ)
	if ty.refused[ordinary]+ty.refused[gameServer] > 0 {
		t.Errorf("ordinary callers were refused: %v", ty.refused)
	}
}

// streakOf is the model of a streak read moments after the activity on
// dates (a set of local dates, all in one zone): the last date, the run of
// consecutive days ending there, and the longest run.
func streakOf(dates map[string]bool) (last string, current, longest int64) {
	days := slices.Sorted(maps.Keys(dates))
	for i, d := range days {
		if i > 0 && streaks.AddDays(days[i-1], 1) == d {
			current++
		} else {
			current = 1
		}
		longest = max(longest, current)
		last = d
	}
	return last, current, longest
}
