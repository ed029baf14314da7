package reactions_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/rallyhq/rally/infra/local/apitest"
	"github.com/rallyhq/rally/infra/local/stack"
	"github.com/rallyhq/rally/infra/local/stacktest"
	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/infra/local/testenv/await"
	"github.com/rallyhq/rally/shared/config"
	"github.com/rallyhq/rally/shared/reactions"
	reactionsbind "github.com/rallyhq/rally/shared/reactions/bind"
)

// The fraud controls end to end: young accounts and players flipping an
// edge too fast count in counts, never in trending; every trending value
// stays the edges that count in it, which the jobs check and rebuild.

const youngFor = 24 * time.Hour

// flipsThatTrend is how many changes of one edge within a clock hour move
// trending (README, Fraud controls): the 11th and later count in counts
// only.
const flipsThatTrend = 10

// fraudStack is startStack with the young-account controls on (24 h) and
// the job runner ticking, so the jobs can check what the tests did.
func fraudStack(t *testing.T, young time.Duration) (*stack.Stack, *apitest.Client) {
	t.Helper()
	s := stacktest.Start(t, stack.Options{
		Log:       testenv.FailureLog(t),
		TickEvery: 200 * time.Millisecond,
		Configure: func(c *config.Config) {
			c.Budgets = map[string]int{"favorite": 1000, "like": 1000, "read": 100_000, "ip": 1_000_000}
			c.SnapshotEvery = 50 * time.Millisecond
			c.YoungAccountAge = young
		},
	})
	return s, apitest.New(t, s)
}

// nextYear is a time in the coming year: DynamoDB Local expires trending
// buckets by TTL against the wall clock.
func nextYear(month time.Month, day, hour, minute int) time.Time {
	return time.Date(time.Now().Year()+1, month, day, hour, minute, 0, 0, time.UTC)
}

// served is what the API serves: favorite counts of some games and the
// three trending lists ("id=score,..." each).
type served struct {
	counts map[string]int64
	top    map[reactions.Window]string
}

func (v served) String() string {
	var games []string
	for g := range v.counts {
		games = append(games, g)
	}
	sort.Strings(games)
	var b strings.Builder
	for _, g := range games {
		fmt.Fprintf(&b, "count %s=%d; ", g, v.counts[g])
	}
	for _, w := range reactions.Windows() {
		fmt.Fprintf(&b, "%s [%s]; ", w, v.top[w])
	}
	return b.String()
}

func readServed(t testing.TB, c *apitest.Client, games []string) served {
	v := served{counts: map[string]int64{}, top: map[reactions.Window]string{}}
	for _, g := range games {
		v.counts[g], _ = countOf(t, c, "favorite", g)
	}
	for _, w := range reactions.Windows() {
		v.top[w] = topOf(t, c, w)
	}
	return v
}

// topOf renders a window's trending list as "id=score,...".
func topOf(t testing.TB, c *apitest.Client, w reactions.Window) string {
	var body struct {
		Items []struct {
			GameID string `json:"game_id"`
			Score  int64  `json:"score"`
		} `json:"items"`
	}
	c.Player("reader", "GET", "/v1/games/top?limit=100&window="+string(w), nil).Expect(t, 200).JSON(t, &body)
	var parts []string
	for _, it := range body.Items {
		parts = append(parts, fmt.Sprintf("%s=%d", it.GameID, it.Score))
	}
	return strings.Join(parts, ",")
}

// awaitServed waits until the API serves want (summed trending windows are
// reused for up to 10 s, so this can take that long).
func awaitServed(t *testing.T, s *stack.Stack, c *apitest.Client, what string, want served) {
	t.Helper()
	if err := s.WaitIdle(context.Background()); err != nil {
		t.Fatal(err)
	}
	games := make([]string, 0, len(want.counts))
	for g := range want.counts {
		games = append(games, g)
	}
	await.Success(t, 20*time.Second, what, func() error {
		if got := readServed(t, c, games); got.String() != want.String() {
			return fmt.Errorf("served %s\nwant   %s", got, want)
		}
		return nil
	})
}

func favorite(t *testing.T, c *apitest.Client, player, game string, on bool) {
	t.Helper()
	method := "POST"
	if !on {
		method = "DELETE"
	}
	var body struct {
		Changed bool `json:"changed"`
	}
	c.Player(player, method, "/v1/favorites/"+game, nil).Expect(t, 200).JSON(t, &body)
	if !body.Changed {
		t.Fatalf("%s %s %s changed nothing", player, method, game)
	}
}

// seen makes Rally see players for the first time now (any request does).
func seen(t *testing.T, c *apitest.Client, players ...string) {
	t.Helper()
	for _, p := range players {
		c.Player(p, "GET", "/v1/favorites/status?game_ids=nothing", nil).Expect(t, 200)
	}
}

// A young account's favorites raise counts but no trending window; once it
// is a day old its new favorites trend, and its unfavorite of a favorite
// made while young takes nothing from trending, which stays what the
// trusted edges say. The jobs find nothing to repair.
func TestAYoungAccountCountsButDoesNotTrendUntilItAges(t *testing.T) {
	t.Parallel()
	s, c := fraudStack(t, youngFor)
	clk := s.Clock()
	day1 := nextYear(11, 20, 9, 0)
	clk.Set(day1)
	seen(t, c, "ann", "bob")

	clk.Set(day1.Add(25 * time.Hour)) // ann and bob are a day old; newbie is new
	favorite(t, c, "ann", "g1", true)
	favorite(t, c, "bob", "g1", true)
	favorite(t, c, "newbie", "g1", true)
	favorite(t, c, "newbie", "g2", true)
	awaitServed(t, s, c, "a young account's favorites counted, not trending", served{
		counts: map[string]int64{"g1": 3, "g2": 1, "g3": 0},
		top:    map[reactions.Window]string{reactions.Last24h: "g1=2", reactions.Last7d: "g1=2", reactions.AllTime: "g1=2"},
	})

	clk.Set(day1.Add(50 * time.Hour)) // newbie is a day old
	favorite(t, c, "newbie", "g3", true)
	favorite(t, c, "newbie", "g1", false)
	favorite(t, c, "newbie", "g2", false)
	// ann's and bob's favorites are 25 h old: out of the 24 h window.
	awaitServed(t, s, c, "the aged account's favorites trending, its unfavorites of young ones taking nothing", served{
		counts: map[string]int64{"g1": 2, "g2": 0, "g3": 1},
		top:    map[reactions.Window]string{reactions.Last24h: "g3=1", reactions.Last7d: "g1=2,g3=1", reactions.AllTime: "g1=2,g3=1"},
	})
	jobsFindNoDrift(t, s, c)
}

// A player flipping one game more than 10 times within a clock hour stops
// moving its trending for the hour, while its count follows every flip;
// their flips of another game, and another player's flips of this one,
// still trend; the next hour they trend again. Likes follow the same rule.
func TestFlippingAnEdgeTooFastStopsMovingTrendingForTheHour(t *testing.T) {
	t.Parallel()
	s, c := fraudStack(t, 0)
	clk := s.Clock()
	hour := nextYear(11, 22, 10, 0)
	clk.Set(hour.Add(5 * time.Minute))
	favorite(t, c, "steady", "g-flip", true)
	for i := 1; i <= 10; i++ { // favorite, unfavorite, ... : trending moves and comes back
		favorite(t, c, "flipper", "g-flip", i%2 == 1)
	}
	awaitServed(t, s, c, "ten flips, ending unfavorited", served{
		counts: map[string]int64{"g-flip": 1},
		top:    map[reactions.Window]string{reactions.Last24h: "g-flip=1", reactions.Last7d: "g-flip=1", reactions.AllTime: "g-flip=1"},
	})
	favorite(t, c, "flipper", "g-flip", true) // the 11th change of the hour
	awaitServed(t, s, c, "the 11th flip counted, not trending", served{
		counts: map[string]int64{"g-flip": 2},
		top:    map[reactions.Window]string{reactions.Last24h: "g-flip=1", reactions.Last7d: "g-flip=1", reactions.AllTime: "g-flip=1"},
	})
	favorite(t, c, "flipper", "g-flip", false)
	favorite(t, c, "flipper", "g-flip", true)
	favorite(t, c, "flipper", "g-other", true)
	favorite(t, c, "calm", "g-flip", true)
	// 11 toggles of one like: the 11th, a like, counts and does not trend.
	for i := 0; i < 11; i++ {
		c.Player("flipper", "POST", "/v1/posts/p-flip/like/toggle", nil).Expect(t, 200)
	}
	awaitServed(t, s, c, "13 flips: the last three counted, not trending; another game and another player trending", served{
		counts: map[string]int64{"g-flip": 3, "g-other": 1},
		top: map[reactions.Window]string{
			reactions.Last24h: "g-flip=2,g-other=1", reactions.Last7d: "g-flip=2,g-other=1", reactions.AllTime: "g-flip=2,g-other=1",
		},
	})
	post, err := reactionsbind.Counts(s.Deps()).TargetTally(context.Background(), reactions.Target{Kind: reactions.Like, ID: "p-flip"}, clk.Now())
	if err != nil || post.Count != 1 || post.Trending != 0 {
		t.Fatalf("p-flip after 11 toggles: count %d, trending %d (%v); want 1 and 0", post.Count, post.Trending, err)
	}

	clk.Set(hour.Add(time.Hour)) // a new hour
	favorite(t, c, "flipper", "g-flip", false)
	favorite(t, c, "flipper", "g-flip", true)
	awaitServed(t, s, c, "a new hour: the flipper's favorite trending again", served{
		counts: map[string]int64{"g-flip": 3, "g-other": 1},
		top: map[reactions.Window]string{
			reactions.Last24h: "g-flip=3,g-other=1", reactions.Last7d: "g-flip=3,g-other=1", reactions.AllTime: "g-flip=3,g-other=1",
		},
	})
	jobsFindNoDrift(t, s, c)
}

// fraudModel is what the fraud controls must make of a sequence of
// favorites and unfavorites: per player and game the edge, whether it
// counts in trending and since when it is active, per edge and clock hour
// its changes, per player when Rally first saw them.
type fraudModel struct {
	firstSeen map[string]time.Time
	active    map[[2]string]bool
	trends    map[[2]string]bool
	since     map[[2]string]time.Time
	flips     map[[2]string]map[time.Time]int
	// kept counts the activations kept out of trending, by reason (and
	// those of players once young that trend).
	kept     map[string]int
	wasYoung map[string]bool
}

func newFraudModel() *fraudModel {
	return &fraudModel{firstSeen: map[string]time.Time{}, active: map[[2]string]bool{}, trends: map[[2]string]bool{},
		since: map[[2]string]time.Time{}, flips: map[[2]string]map[time.Time]int{}, kept: map[string]int{}, wasYoung: map[string]bool{}}
}

// apply is one request: it returns whether the edge changed.
func (m *fraudModel) apply(player, game string, on bool, now time.Time) bool {
	if _, ok := m.firstSeen[player]; !ok {
		m.firstSeen[player] = now
	}
	e := [2]string{player, game}
	if m.active[e] == on {
		return false
	}
	hour := now.Truncate(time.Hour)
	if m.flips[e] == nil {
		m.flips[e] = map[time.Time]int{}
	}
	if on {
		young := now.Sub(m.firstSeen[player]) < youngFor
		fast := m.flips[e][hour] >= flipsThatTrend
		m.trends[e] = !young && !fast
		m.since[e] = now
		switch {
		case young:
			m.kept["young"]++
			m.wasYoung[player] = true
		case fast:
			m.kept["flips"]++
		case m.wasYoung[player]:
			m.kept["none, grown up"]++
		}
	}
	m.active[e] = on
	m.flips[e][hour]++
	return true
}

// inWindow reports whether an activation at at counts in window w at now: 24h
// sums the hourly buckets of the current UTC clock hour and the 23 before
// it, 7d the daily buckets of the current UTC day and the 6 before it.
func inWindow(w reactions.Window, at, now time.Time) bool {
	switch w {
	case reactions.Last24h:
		hours := now.Unix()/3600 - at.Unix()/3600
		return hours >= 0 && hours < 24
	case reactions.Last7d:
		days := now.Unix()/86400 - at.Unix()/86400
		return days >= 0 && days < 7
	}
	return !at.After(now)
}

// served is what the API must serve at now.
func (m *fraudModel) served(games []string, now time.Time) served {
	v := served{counts: map[string]int64{}, top: map[reactions.Window]string{}}
	for _, g := range games {
		v.counts[g] = 0
	}
	// A window counts the standing favorites that trend and became
	// active within it (README, What a trending window counts).
	for e, on := range m.active {
		if on {
			v.counts[e[1]]++
		}
	}
	for _, w := range reactions.Windows() {
		sums := map[string]int64{}
		for e, on := range m.active {
			if on && m.trends[e] && inWindow(w, m.since[e], now) {
				sums[e[1]]++
			}
		}
		v.top[w] = rendered(sums)
	}
	return v
}

// rendered is a trending list as the API serves it: positive scores,
// highest first, ties to the game that reached its score first — which
// the model does not know, so games tie here only when the test allows.
func rendered(scores map[string]int64) string {
	var ids []string
	for id, n := range scores {
		if n > 0 {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool {
		if scores[ids[i]] != scores[ids[j]] {
			return scores[ids[i]] > scores[ids[j]]
		}
		return ids[i] < ids[j]
	})
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = fmt.Sprintf("%s=%d", id, scores[id])
	}
	return strings.Join(parts, ",")
}

// Random favorites and unfavorites by veterans and by new players who
// come of age during the run, with bursts of flips on one game, over two
// days of clock: every count, every trending window and the all-time
// trending list equal the model's, whatever order equal scores come in.
func TestTrendingFollowsTheModelOfTheFraudControls(t *testing.T) {
	t.Parallel()
	s, c := fraudStack(t, youngFor)
	clk := s.Clock()
	rng := rand.New(rand.NewSource(7))
	m := newFraudModel()
	start := nextYear(11, 10, 8, 0)
	clk.Set(start)
	veterans, newcomers := []string{"vet-a", "vet-b", "vet-c"}, []string{"new-a", "new-b", "new-c"}
	games := []string{"m-1", "m-2", "m-3", "m-4"}
	seen(t, c, veterans...)
	for _, p := range veterans {
		m.firstSeen[p] = start
	}
	now := start.Add(25 * time.Hour)
	// A favorite that stands from the first day of play, which the
	// random flips below never touch: the week-later windows cut between
	// it and the later ones.
	clk.Set(now)
	c.Player("vet-a", "POST", "/v1/favorites/m-keep", nil).Expect(t, 200)
	m.apply("vet-a", "m-keep", true, now)
	players := append(slices.Clone(veterans), newcomers...)
	var burst [2]string
	burstLeft := 0
	for op := 0; op < 500; op++ {
		player, game := players[rng.Intn(len(players))], games[rng.Intn(len(games))]
		step, noop := time.Duration(rng.Intn(10))*time.Minute, rng.Intn(4) == 0
		switch {
		case burstLeft > 0: // one player flipping one game, fast
			player, game = burst[0], burst[1]
			step, noop = time.Duration(rng.Intn(3))*time.Minute, rng.Intn(10) == 0
			burstLeft--
		case rng.Intn(40) == 0:
			burst, burstLeft = [2]string{player, game}, 10+rng.Intn(15)
		}
		now = now.Add(step)
		clk.Set(now)
		on := !m.active[[2]string{player, game}]
		if noop {
			on = !on // a favorite of a favorited game, or the reverse: no change
		}
		method := "POST"
		if !on {
			method = "DELETE"
		}
		var body struct {
			Changed bool `json:"changed"`
		}
		c.Player(player, method, "/v1/favorites/"+game, nil).Expect(t, 200).JSON(t, &body)
		if want := m.apply(player, game, on, now); body.Changed != want {
			t.Fatalf("op %d: %s %s %s changed=%v, the model says %v", op, player, method, game, body.Changed, want)
		}
	}
	if err := s.WaitIdle(context.Background()); err != nil {
		t.Fatal(err)
	}
	games = append(games, "m-keep")
	want := m.served(games, now)
	t.Logf("after %v of clock, activations kept out of trending (or not) %v: %s", now.Sub(start), m.kept, want)
	if m.kept["young"] == 0 || m.kept["flips"] == 0 || m.kept["none, grown up"] == 0 {
		t.Fatalf("the run never exercised both controls and an account growing up: %v", m.kept)
	}
	await.Success(t, 20*time.Second, "served counts and trending equal the model", func() error {
		got := readServed(t, c, games)
		if diff := sameUpToTies(got, want); diff != "" {
			return errors.New(diff)
		}
		return nil
	})
	jobsFindNoDrift(t, s, c)

	var first, last time.Time
	for e, on := range m.active {
		if on && m.trends[e] && (first.IsZero() || m.since[e].Before(first)) {
			first = m.since[e]
		}
		if on && m.trends[e] && m.since[e].After(last) {
			last = m.since[e]
		}
	}
	// Later the same day, with nothing new: the newest standing trending
	// favorite's hour is the oldest of the 24 h window.
	edge := last.Truncate(time.Hour).Add(23*time.Hour + 30*time.Minute)
	clk.Set(edge)
	wantEdge := m.served(games, edge)
	if wantEdge.top[reactions.Last24h] == "" {
		t.Fatalf("the 24 h window at %s holds no favorite", edge)
	}
	await.Success(t, 20*time.Second, "served trending 23 hours on equals the model", func() error {
		if diff := sameUpToTies(readServed(t, c, games), wantEdge); diff != "" {
			return errors.New(diff)
		}
		return nil
	})

	// Days later, with nothing new: the 7d window now starts the day
	// after the oldest standing trending favorite was made, so it has
	// left it (and every favorite the 24 h window).
	later := time.Date(first.Year(), first.Month(), first.Day()+7, 12, 0, 0, 0, time.UTC)
	clk.Set(later)
	wantLater := m.served(games, later)
	cuts := last.Unix()/86400 > first.Unix()/86400 // standing favorites made on two days or more
	if w := wantLater.top[reactions.Last7d]; cuts && (w == "" || w == want.top[reactions.Last7d]) {
		t.Fatalf("the 7d window at %s does not cut through the standing favorites (%q, before %q)", later, w, want.top[reactions.Last7d])
	}
	await.Success(t, 20*time.Second, "served trending a week on equals the model", func() error {
		if diff := sameUpToTies(readServed(t, c, games), wantLater); diff != "" {
			return errors.New(diff)
		}
		return nil
	})
}

// sameUpToTies compares what was served with the model's, taking equal
// scores in any order (which game reached a score first is the engine's
// business, tested in shared/ranking).
func sameUpToTies(got, want served) string {
	for g, n := range want.counts {
		if got.counts[g] != n {
			return fmt.Sprintf("count of %s: %d, want %d", g, got.counts[g], n)
		}
	}
	for _, w := range reactions.Windows() {
		if a, b := byScore(got.top[w]), byScore(want.top[w]); a != b {
			return fmt.Sprintf("window %s: [%s], want [%s]", w, got.top[w], want.top[w])
		}
	}
	return ""
}

// byScore renders a list with the games of each run of equal scores
// sorted.
func byScore(list string) string {
	if list == "" {
		return ""
	}
	parts := strings.Split(list, ",")
	score := func(p string) string { return p[strings.LastIndex(p, "=")+1:] }
	for i := 0; i < len(parts); {
		j := i + 1
		for j < len(parts) && score(parts[j]) == score(parts[i]) {
			j++
		}
		sort.Strings(parts[i:j])
		i = j
	}
	return strings.Join(parts, ",")
}

// jobsFindNoDrift runs a reconcile and a recompute of the counters: both
// check every count and all-time trending total against the edges (and
// Redis against them) and find nothing to repair.
func jobsFindNoDrift(t *testing.T, s *stack.Stack, c *apitest.Client) {
	t.Helper()
	if err := s.WaitIdle(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"reconcile", "recompute"} {
		var started struct {
			ID string `json:"job_id"`
		}
		c.Service("POST", "/v1/ops/jobs", map[string]any{"kind": kind, "target": "counters"}).Expect(t, 202).JSON(t, &started)
		var job struct {
			State    string   `json:"state"`
			Checked  int64    `json:"checked"`
			Drifted  int64    `json:"drifted"`
			Examples []string `json:"examples"`
			Error    string   `json:"error"`
		}
		await.Until(t, time.Minute, kind+" to finish", func() bool {
			c.Service("GET", "/v1/ops/jobs/"+started.ID, nil).Expect(t, 200).JSON(t, &job)
			return job.State != "RUNNING"
		})
		if job.State != "DONE" || job.Checked == 0 || job.Drifted != 0 {
			t.Fatalf("%s: %s, %d checked, %d drifted %q %s", kind, job.State, job.Checked, job.Drifted, job.Examples, job.Error)
		}
	}
}
