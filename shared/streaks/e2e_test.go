package streaks_test

import (
	"context"
	"fmt"
	"math/rand"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rallyhq/rally/infra/local/apitest"
	"github.com/rallyhq/rally/infra/local/stack"
	"github.com/rallyhq/rally/infra/local/stacktest"
	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/infra/local/testenv/await"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// Tests play in the coming year: DynamoDB Local expires items by their TTL
// attribute against the wall clock, so activity dated in the past would
// lose its idempotency records mid-test.
var nextYear = time.Now().Year() + 1

// awards is the points table written out again for the model.
var awards = map[string][2]int64{ // points, daily cap
	"DAILY_OPEN": {10, 10}, "MATCH_PLAYED": {5, 50}, "MATCH_WON": {20, 200}, "LEVEL_COMPLETED": {15, 150}, "SOCIAL_SHARE": {25, 50},
}

var eventTypes = []string{"DAILY_OPEN", "MATCH_PLAYED", "MATCH_WON", "LEVEL_COMPLETED", "SOCIAL_SHARE"}

// serverTypes are the event types game servers report (POST
// /v1/ops/activity); players report the others.
var serverTypes = map[string]bool{"MATCH_PLAYED": true, "MATCH_WON": true}

// mday is one local day of a modelled player.
type mday struct {
	points, events int64
	byType         map[string]int64
}

// mplayer is a player as the model sees them: the rules of DESIGN.md
// written out plainly, with calendar days as numbers.
type mplayer struct {
	id, region string
	zones      []string // zones their devices report
	rate       float64  // chance to play at each step

	tz        string
	changes   []time.Time
	last      int // day number of the last activity date, 0 before the first
	cur, best int64
	reached   moment // when cur was reached: the activity that grew or restarted it
	boardIn   string // the region of the boards the streak is on: the player's at their last activity
	total     int64
	days      map[int]*mday
	rejected  int // zone changes the limit refused
}

// moment is when Rally took an activity, as far as the model knows: its
// clock read it between the test's readings before and after the request
// (the stack's clock keeps ticking, and players play at once).
type moment struct{ from, to time.Time }

// before reports whether m was surely earlier than o.
func (m moment) before(o moment) bool { return m.to.Before(o.from) }

func dayNumber(t time.Time, zone string) int {
	loc := time.UTC
	if zone != "" {
		loc, _ = time.LoadLocation(zone)
	}
	y, m, d := t.In(loc).Date()
	return int(time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Unix() / 86400)
}

func dateOf(n int) string { return time.Unix(int64(n)*86400, 0).UTC().Format("2006-01-02") }

// act records an activity at at (taken by Rally within took) in the
// model and returns its date and points.
func (p *mplayer) act(at time.Time, took moment, typ, asked string) (int, int64) {
	var kept []time.Time
	for _, c := range p.changes {
		if at.Sub(c) < 7*24*time.Hour {
			kept = append(kept, c)
		}
	}
	p.changes = kept
	if asked != "" && asked != p.tz {
		switch {
		case p.tz == "":
			p.tz = asked
		case len(p.changes) < 2:
			p.tz = asked
			p.changes = append(p.changes, at)
		default:
			p.rejected++
		}
	}
	day := dayNumber(at, p.tz)
	switch {
	case p.last == 0 || day > p.last+1:
		p.cur, p.last, p.reached = 1, day, took
	case day == p.last+1:
		p.cur, p.last, p.reached = p.cur+1, day, took
	}
	p.boardIn = p.region
	p.best = max(p.best, p.cur)
	d := p.days[day]
	if d == nil {
		d = &mday{byType: map[string]int64{}}
		p.days[day] = d
	}
	pts := min(awards[typ][0], awards[typ][1]-d.byType[typ])
	d.byType[typ] += pts
	d.points += pts
	d.events++
	p.total += pts
	return day, pts
}

// seen is the streak as the player sees it at now.
func (p *mplayer) seen(now time.Time) (current int64, activeToday, atRisk bool) {
	today := dayNumber(now, p.tz)
	if p.last == 0 || today > p.last+1 {
		return 0, false, false
	}
	return p.cur, p.last >= today, p.last < today
}

type streakBody struct {
	UserID           string  `json:"user_id"`
	CurrentStreak    int64   `json:"current_streak"`
	LongestStreak    int64   `json:"longest_streak"`
	LastActivityDate *string `json:"last_activity_date"`
	Timezone         string  `json:"timezone"`
	TotalPoints      int64   `json:"total_points"`
	ActiveToday      bool    `json:"active_today"`
	AtRisk           bool    `json:"at_risk"`
	Degraded         bool    `json:"degraded"`
}

type topEntry struct {
	Rank          int    `json:"rank"`
	UserID        string `json:"user_id"`
	CurrentStreak int64  `json:"current_streak"`
}

type topBody struct {
	Entries  []topEntry `json:"entries"`
	Degraded bool       `json:"degraded"`
}

func (e topEntry) String() string { return fmt.Sprintf("%d %s %d", e.Rank, e.UserID, e.CurrentStreak) }

// joined is a served board as "rank user streak, ...".
func joined(es []topEntry) string {
	rows := make([]string, len(es))
	for i, e := range es {
		rows[i] = e.String()
	}
	return strings.Join(rows, ", ")
}

// checkTop compares a served streak board with the model's: the streaks
// live at now (the player was active today or yesterday in their zone) on
// the region's board (every one for ""), ranked 1..N, the longer first,
// then the one reached earlier, then the user id. The model knows when a
// streak was reached only to within its request, so two equal streaks
// reached by requests that overlapped may come in either order; every
// other order is the model's.
func checkTop(t *testing.T, players []*mplayer, region string, now time.Time, n int, got []topEntry) {
	t.Helper()
	byID := map[string]*mplayer{}
	var live []*mplayer
	for _, p := range players {
		if cur, _, _ := p.seen(now); cur > 0 && (region == "" || p.boardIn == region) {
			live = append(live, p)
			byID[p.id] = p
		}
	}
	sort.Slice(live, func(i, j int) bool { // a total order close to the board's, for the streak at each rank
		a, b := live[i], live[j]
		if a.cur != b.cur {
			return a.cur > b.cur
		}
		if !a.reached.from.Equal(b.reached.from) {
			return a.reached.from.Before(b.reached.from)
		}
		return a.id < b.id
	})
	top := live[:min(n, len(live))]
	fail := func(format string, args ...any) {
		t.Helper()
		var want []string
		for i, p := range top {
			want = append(want, fmt.Sprintf("%d %s %d", i+1, p.id, p.cur))
		}
		t.Fatalf("top %d of %q at %s: %s\n got [%s]\nwant [%s] (equal streaks reached in overlapping requests in any order)",
			n, region, now, fmt.Sprintf(format, args...), joined(got), strings.Join(want, ", "))
	}
	if len(got) != len(top) {
		fail("%d entries, the model %d", len(got), len(top))
	}
	served := map[string]bool{}
	for i, e := range got {
		p := byID[e.UserID]
		switch {
		case e.Rank != i+1:
			fail("entry %d is ranked %d", i, e.Rank)
		case p == nil:
			fail("%s has no live streak on this board", e.UserID)
		case served[e.UserID]:
			fail("%s twice", e.UserID)
		case e.CurrentStreak != p.cur || e.CurrentStreak != top[i].cur:
			fail("%s at rank %d with a streak of %d: the model's is %d, and rank %d's %d", e.UserID, e.Rank, e.CurrentStreak, p.cur, e.Rank, top[i].cur)
		}
		served[e.UserID] = true
	}
	// Equal streaks: each served one comes after every one surely reached
	// before it (served, or cut off by n).
	for i, e := range got {
		p := byID[e.UserID]
		for _, q := range live {
			if q.cur == p.cur && q.reached.before(p.reached) && !slices.ContainsFunc(got[:i], func(f topEntry) bool { return f.UserID == q.id }) {
				fail("%s reached a streak of %d before %s, and is not ranked ahead", q.id, q.cur, e.UserID)
			}
		}
	}
}

func gotTop(t *testing.T, c *apitest.Client, region string, n int, degraded bool) []topEntry {
	t.Helper()
	path := fmt.Sprintf("/v1/streaks/top?n=%d", n)
	if region != "" {
		path += "&region=" + region
	}
	var top topBody
	c.Player("reader", "GET", path, nil).Expect(t, 200).JSON(t, &top)
	if top.Degraded != degraded {
		t.Fatalf("%s: degraded=%v, want %v", path, top.Degraded, degraded)
	}
	return top.Entries
}

// checkAll compares every player's streak and every streak board with the
// model.
func checkAll(t *testing.T, c *apitest.Client, players []*mplayer, now time.Time, degraded bool) {
	t.Helper()
	for _, p := range players {
		var got streakBody
		c.Player(p.id, "GET", "/v1/users/"+p.id+"/streak", nil).Expect(t, 200).JSON(t, &got)
		cur, active, risk := p.seen(now)
		tz := p.tz
		if tz == "" {
			tz = "UTC"
		}
		lastOK := (p.last == 0 && got.LastActivityDate == nil) || (got.LastActivityDate != nil && *got.LastActivityDate == dateOf(p.last))
		if got.CurrentStreak != cur || got.LongestStreak != p.best || got.TotalPoints != p.total || got.Timezone != tz ||
			got.ActiveToday != active || got.AtRisk != risk || !lastOK || got.Degraded != degraded {
			t.Fatalf("%s at %s: got %+v (last %v)\nmodel: current %d longest %d total %d tz %s active %v at risk %v last %s",
				p.id, now, got, deref(got.LastActivityDate), cur, p.best, p.total, tz, active, risk, dateOf(p.last))
		}
	}
	for _, region := range []string{"", "eu", "na", "apac"} {
		checkTop(t, players, region, now, 100, gotTop(t, c, region, 100, degraded))
	}
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// TestStreaksFollowTheModel plays 40 days of random activity for 60
// players (60 days for 200 under RALLY_TEST_SCALE=full) across zones (DST changes in
// Berlin and New York, UTC+14, UTC−11, half-hour zones) and checks every streak, longest streak, total, daily
// history and streak board against a plain model and the Streaks table,
// with Redis up, with Redis down, and after Redis comes back empty.
func TestStreaksFollowTheModel(t *testing.T) {
	t.Parallel()
	srv := testenv.Redis(t)
	s := stacktest.Start(t, stack.Options{RedisURL: srv.URL()})
	c := apitest.New(t, s)
	zones := []string{"Europe/Berlin", "America/New_York", "Pacific/Kiritimati", "Pacific/Pago_Pago", "Asia/Kolkata", "Asia/Kathmandu", "UTC"}
	regions := []string{"eu", "na", "apac", ""}
	rng := rand.New(rand.NewSource(42))
	n := testenv.Scale(60, 200)
	players := make([]*mplayer, n)
	for i := range players {
		p := &mplayer{id: fmt.Sprintf("p%03d", i), region: regions[i%len(regions)], rate: []float64{0.08, 0.08, 0.25, 0.92}[rng.Intn(4)], days: map[int]*mday{}}
		p.zones = []string{zones[rng.Intn(len(zones))]}
		if i%10 == 0 { // a traveller
			p.zones = append(p.zones, zones[rng.Intn(len(zones))], zones[rng.Intn(len(zones))])
		}
		players[i] = p
		setRegion(t, c, p)
	}
	// Steps of 23 hours at :07 past the hour: no step falls within minutes of
	// a local midnight (every zone's offset is a multiple of 15 minutes), the
	// local hour of play moves round the clock, and 7 days are never a whole
	// number of steps, so the zone-change window is never decided by the
	// seconds a step takes.
	// From 25 October: summer time ends in Berlin within a week and in New
	// York within two.
	start := time.Date(nextYear, 10, 25, 0, 7, 0, 0, time.UTC)
	steps := testenv.Scale(42, 63) // 40 days (60 under RALLY_TEST_SCALE=full)
	played := 0
	for step := 0; step < steps; step++ {
		now := start.Add(time.Duration(step) * 23 * time.Hour)
		s.Clock().Set(now)
		if step == steps/2 { // some players move region; their next activity moves them
			for _, p := range players[:12] {
				p.region = regions[(slices.Index(regions, p.region)+1)%len(regions)]
				setRegion(t, c, p)
			}
		}
		played += playStep(t, s, c, players, rng, now, step)
		if step%20 == 19 {
			waitIdle(t, s)
			checkAll(t, c, players, now, false)
		}
	}
	end := start.Add(time.Duration(steps) * 23 * time.Hour)
	s.Clock().Set(end)
	waitIdle(t, s)
	checkAll(t, c, players, end, false)
	checkHistory(t, c, players, end)
	var longest int64
	live, rejected := 0, 0
	for _, p := range players {
		longest = max(longest, p.best)
		if cur, _, _ := p.seen(end); cur > 0 {
			live++
		}
		rejected += p.rejected
	}
	t.Logf("%d activities by %d players over %d steps of 23 hours: longest streak %d, %d live at the end, %d zone changes refused", played, n, steps, longest, live, rejected)
	if longest < 20 || live < n/5 || rejected == 0 {
		t.Fatal("the random play did not exercise long streaks, live boards and the zone-change limit")
	}

	// Redis down: every answer still exact (and says it was served
	// without Redis), boards from DynamoDB.
	srv.Stop()
	checkAll(t, c, players, end, true)
	// ... and writes still succeed.
	late := end.Add(2 * time.Hour)
	s.Clock().Set(late)
	playStep(t, s, c, players, rng, late, steps)
	checkAll(t, c, players, late, true)

	// Redis back, empty: the processor rebuilds the boards, reads return to it.
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	await.Until(t, 20*time.Second, "streak boards served from Redis again after it came back", func() bool {
		var top topBody
		c.Player("reader", "GET", "/v1/streaks/top", nil).Expect(t, 200).JSON(t, &top)
		return !top.Degraded
	})
	waitIdle(t, s)
	checkAll(t, c, players, late, false)
	// A day and a half later most streaks broke; the boards drop them.
	later := late.Add(36 * time.Hour)
	s.Clock().Set(later)
	checkAll(t, c, players, later, false)
}

func setRegion(t *testing.T, c *apitest.Client, p *mplayer) {
	t.Helper()
	body := map[string]any{"display_name": p.id}
	if p.region != "" {
		body["region"] = p.region
	}
	c.Service("PUT", "/v1/players/"+p.id+"/profile", body).Expect(t, 200)
}

// playStep lets every player play with their rate, concurrently, and
// applies each accepted activity to the model.
func playStep(t *testing.T, s *stack.Stack, c *apitest.Client, players []*mplayer, rng *rand.Rand, now time.Time, step int) int {
	t.Helper()
	type act struct {
		p       *mplayer
		typ, tz string
		key     string
		retry   bool
	}
	var acts []act
	for _, p := range players {
		for k := 0; rng.Float64() < p.rate/float64(1+4*k) && k < 3; k++ { // now and then a second or third
			a := act{p: p, typ: eventTypes[rng.Intn(len(eventTypes))], key: fmt.Sprintf("%s-%d-%d", p.id, step, k), retry: rng.Intn(10) == 0}
			if rng.Intn(4) > 0 {
				a.tz = p.zones[rng.Intn(len(p.zones))]
			}
			acts = append(acts, a)
		}
	}
	// A player's own activities go in order; players play at once.
	byPlayer := map[*mplayer][]act{}
	for _, a := range acts {
		byPlayer[a.p] = append(byPlayer[a.p], a)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	errc := make(chan error, len(acts))
	sem := make(chan struct{}, 16)
	for p, list := range byPlayer {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			for _, a := range list {
				call := activityCall(p.id, a.key, a.typ, a.tz)
				from := s.Clock().Now()
				r, err := c.Try(call)
				took := moment{from, s.Clock().Now()}
				if err == nil && a.retry { // a client retry: same key, same answer, no second effect
					var again apitest.Response
					if again, err = c.Try(call); err == nil && (again.Status != r.Status || string(again.Body) != string(r.Body)) {
						err = fmt.Errorf("retry of %s answered %d %s, first %d %s", a.key, again.Status, again.Body, r.Status, r.Body)
					}
				}
				if err != nil || r.Status != 200 {
					errc <- fmt.Errorf("activity %s: %v %d %s", a.key, err, r.Status, r.Body)
					return
				}
				var got struct {
					PointsAwarded int64  `json:"points_awarded"`
					TotalPoints   int64  `json:"total_points"`
					CurrentStreak int64  `json:"current_streak"`
					ActivityDate  string `json:"activity_date"`
				}
				r.JSON(t, &got)
				mu.Lock()
				day, pts := p.act(now, took, a.typ, a.tz)
				mu.Unlock()
				if got.ActivityDate != dateOf(day) || got.PointsAwarded != pts || got.TotalPoints != p.total || got.CurrentStreak != p.cur {
					errc <- fmt.Errorf("activity %s (%s, zone %q) at %s: got %+v, model date %s points %d total %d streak %d",
						a.key, a.typ, a.tz, now, got, dateOf(day), pts, p.total, p.cur)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	return len(acts)
}

// activityCall is how an activity reaches Rally: the player reports their
// own, a game server the matches it saw.
func activityCall(user, key, typ, tz string) apitest.Call {
	body := map[string]any{"event_type": typ, "source": "mobile_app"}
	if tz != "" {
		body["timezone"] = tz
	}
	call := apitest.Call{Method: "POST", Path: "/v1/activity", Body: body, As: user, Header: map[string]string{"Idempotency-Key": key}}
	if serverTypes[typ] {
		body["user_id"], body["source"] = user, "console"
		call.Path, call.As, call.Service = "/v1/ops/activity", "", true
	}
	return call
}

// checkHistory compares every player's 60-day points history with the model.
func checkHistory(t *testing.T, c *apitest.Client, players []*mplayer, now time.Time) {
	t.Helper()
	for _, p := range players {
		var got struct {
			Days []struct {
				Date   string `json:"date"`
				Points int64  `json:"points"`
				Events int64  `json:"events"`
			} `json:"days"`
		}
		c.Player(p.id, "GET", "/v1/users/"+p.id+"/points/history?days=60", nil).Expect(t, 200).JSON(t, &got)
		today := dayNumber(now, p.tz)
		if len(got.Days) != 60 {
			t.Fatalf("%s: %d days of history, want 60", p.id, len(got.Days))
		}
		for i, d := range got.Days {
			want := mday{}
			if m := p.days[today-i]; m != nil {
				want = *m
			}
			if d.Date != dateOf(today-i) || d.Points != want.points || d.Events != want.events {
				t.Fatalf("%s history day %d: got %+v, want %s points %d events %d", p.id, i, d, dateOf(today-i), want.points, want.events)
			}
		}
	}
}

func waitIdle(t *testing.T, s *stack.Stack) {
	t.Helper()
	if err := s.WaitIdle(context.Background()); err != nil {
		t.Fatal(err)
	}
}
