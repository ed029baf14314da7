package streaks_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rallyhq/rally/infra/local/apitest"
	"github.com/rallyhq/rally/infra/local/stack"
	"github.com/rallyhq/rally/infra/local/stacktest"
)

type receipt struct {
	EventID        string `json:"event_id"`
	PointsAwarded  int64  `json:"points_awarded"`
	TotalPoints    int64  `json:"total_points"`
	CurrentStreak  int64  `json:"current_streak"`
	LongestStreak  int64  `json:"longest_streak"`
	StreakExtended bool   `json:"streak_extended"`
	ActivityDate   string `json:"activity_date"`
}

// report is a game server's report of a player's activity.
func report(c *apitest.Client, key string, body map[string]any) apitest.Response {
	h := map[string]string{}
	if key != "" {
		h["Idempotency-Key"] = key
	}
	return c.Do(apitest.Call{Method: "POST", Path: "/v1/ops/activity", Body: body, Service: true, Header: h})
}

func ownStreak(t *testing.T, c *apitest.Client, user string) streakBody {
	t.Helper()
	var got streakBody
	c.Player(user, "GET", "/v1/users/"+user+"/streak", nil).Expect(t, 200).JSON(t, &got)
	return got
}

// historyOf is the player's own points history, newest day first, as
// "date points/events".
func historyOf(t *testing.T, c *apitest.Client, user string, days int) []string {
	t.Helper()
	var got struct {
		Days []struct {
			Date   string `json:"date"`
			Points int64  `json:"points"`
			Events int64  `json:"events"`
		} `json:"days"`
	}
	c.Player(user, "GET", fmt.Sprintf("/v1/users/%s/points/history?days=%d", user, days), nil).Expect(t, 200).JSON(t, &got)
	out := make([]string, len(got.Days))
	for i, d := range got.Days {
		out[i] = fmt.Sprintf("%s %d/%d", d.Date, d.Points, d.Events)
	}
	return out
}

func expectProblem(t *testing.T, r apitest.Response, status int, detail string) {
	t.Helper()
	if r.Status != status || r.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("%s: %d %s %s, want %d problem+json", r.Request, r.Status, r.Header.Get("Content-Type"), r.Body, status)
	}
	var p struct {
		Detail string `json:"detail"`
	}
	r.JSON(t, &p)
	if !strings.Contains(p.Detail, detail) {
		t.Fatalf("%s: detail %q does not say %q", r.Request, p.Detail, detail)
	}
}

// Matches carry competitive value: a player cannot report their own
// (403, nothing written, and a retry is refused again rather than
// replayed), while a game server's report of them counts exactly as the
// points table and the streak rules say, once however often it is sent.
func TestMatchesAreReportedByGameServersOnly(t *testing.T) {
	s := stacktest.Start(t, stack.Options{})
	c := apitest.New(t, s)
	// Noon UTC is 02:00 the next day in Kiritimati (UTC+14): the activity
	// date is the player's, not the server's.
	day1 := time.Date(nextYear, 3, 10, 12, 0, 0, 0, time.UTC)
	s.Clock().Set(day1)

	for _, typ := range []string{"MATCH_WON", "MATCH_PLAYED"} {
		for attempt := 0; attempt < 2; attempt++ { // the retry is refused too, not replayed
			r, err := activity(c, "ann", "claim-"+typ, map[string]any{"event_type": typ, "source": "mobile_app"})
			if err != nil {
				t.Fatal(err)
			}
			expectProblem(t, r, 403, "POST /v1/ops/activity")
			if r.Header.Get("Idempotent-Replayed") != "" {
				t.Fatalf("a refused report was replayed: %v", r.Header)
			}
		}
	}
	if got := items(t, s, "ann"); len(got) != 0 {
		t.Fatalf("a refused report wrote %v", got)
	}
	if st := ownStreak(t, c, "ann"); st.CurrentStreak != 0 || st.LongestStreak != 0 || st.TotalPoints != 0 || st.LastActivityDate != nil {
		t.Fatalf("a refused report changed the streak: %+v", st)
	}
	for _, d := range historyOf(t, c, "ann", 3) {
		if !strings.HasSuffix(d, " 0/0") {
			t.Fatalf("a refused report shows in the points history: %v", historyOf(t, c, "ann", 3))
		}
	}

	// Day 1: ann opens the game in Kiritimati.
	if r, err := activity(c, "ann", "open-1", map[string]any{"event_type": "DAILY_OPEN", "source": "mobile_app", "timezone": "Pacific/Kiritimati"}); err != nil || r.Status != 200 {
		t.Fatalf("ann opens the game: %v %d %s", err, r.Status, r.Body)
	}
	if st := ownStreak(t, c, "ann"); st.CurrentStreak != 1 || st.TotalPoints != 10 {
		t.Fatalf("after opening the game: %+v", st)
	}

	// Day 2: a game server reports her won match, with no time zone: it is
	// dated in hers, extends her streak and earns MATCH_WON's 20 points.
	s.Clock().Set(day1.Add(24 * time.Hour))
	won := map[string]any{"user_id": "ann", "event_type": "MATCH_WON", "source": "console"}
	first := report(c, "match-7", won).Expect(t, 200)
	var got receipt
	first.JSON(t, &got)
	want := receipt{EventID: got.EventID, PointsAwarded: 20, TotalPoints: 30, CurrentStreak: 2, LongestStreak: 2, StreakExtended: true,
		ActivityDate: time.Date(nextYear, 3, 12, 0, 0, 0, 0, time.UTC).Format("2006-01-02")}
	if got != want || got.EventID == "" {
		t.Fatalf("reported match: got %+v, want %+v", got, want)
	}
	// A retry (the server timed out) answers the first response and counts nothing again.
	again := report(c, "match-7", won).Expect(t, 200)
	if string(again.Body) != string(first.Body) || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry answered %s (%v), first %s", again.Body, again.Header, first.Body)
	}
	// The same key with another report for ann is refused.
	expectProblem(t, report(c, "match-7", map[string]any{"user_id": "ann", "event_type": "MATCH_PLAYED", "source": "console"}), 422, "Idempotency-Key")
	// The server's key for another player is that player's own report.
	var bob receipt
	bobsFirst := report(c, "match-7", map[string]any{"user_id": "bob", "event_type": "MATCH_WON", "source": "console"}).Expect(t, 200)
	bobsFirst.JSON(t, &bob)
	if bobsFirst.Header.Get("Idempotent-Replayed") != "" || bob.EventID == got.EventID || bob.PointsAwarded != 20 || bob.TotalPoints != 20 || bob.CurrentStreak != 1 {
		t.Fatalf("the same key for bob: %s (%v)", bobsFirst.Body, bobsFirst.Header)
	}
	// ... and ann's own keys are hers: the server's key does not replay to her.
	mine, err := activity(c, "ann", "match-7", map[string]any{"event_type": "LEVEL_COMPLETED", "source": "mobile_app"})
	if err != nil || mine.Status != 200 || mine.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("ann's own key match-7: %v %d %s %v", err, mine.Status, mine.Body, mine.Header)
	}
	var level receipt
	mine.JSON(t, &level)
	if level.PointsAwarded != 15 || level.TotalPoints != 45 || level.CurrentStreak != 2 || level.EventID == got.EventID {
		t.Fatalf("ann's level after the match: %+v", level)
	}

	// A game server reports matches only.
	for _, typ := range []string{"DAILY_OPEN", "LEVEL_COMPLETED", "SOCIAL_SHARE"} {
		expectProblem(t, report(c, "srv-"+typ, map[string]any{"user_id": "cat", "event_type": typ, "source": "console"}), 403, "POST /v1/activity")
	}
	if got := items(t, s, "cat"); len(got) != 0 {
		t.Fatalf("a refused server report wrote %v", got)
	}

	st := ownStreak(t, c, "ann")
	if st.CurrentStreak != 2 || st.LongestStreak != 2 || st.TotalPoints != 45 || st.Timezone != "Pacific/Kiritimati" ||
		st.LastActivityDate == nil || *st.LastActivityDate != want.ActivityDate {
		t.Fatalf("ann's streak: %+v", st)
	}
	d1 := time.Date(nextYear, 3, 11, 0, 0, 0, 0, time.UTC).Format("2006-01-02")
	if h := historyOf(t, c, "ann", 2); h[0] != want.ActivityDate+" 35/2" || h[1] != d1+" 10/1" {
		t.Fatalf("ann's history: %v", h)
	}
	if got := items(t, s, "ann"); got["evt"] != 3 || got["idem"] != 3 || got["day"] != 2 {
		t.Fatalf("ann's items: %v, want 3 events under 3 keys on 2 days", got)
	}
}

// A game server's report is checked like any request: bad input is a 400
// and writes nothing; a player's token does not open the route.
func TestBadReportsWriteNothing(t *testing.T) {
	s := stacktest.Start(t, stack.Options{})
	c := apitest.New(t, s)
	with := func(k string, v any) map[string]any {
		m := map[string]any{"user_id": "dan", "event_type": "MATCH_WON", "source": "console"}
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	for _, tc := range []struct {
		name   string
		key    string
		body   map[string]any
		status int
	}{
		{"no user_id", "k1", with("user_id", nil), 400},
		{"malformed user_id", "k2", with("user_id", "dan smith"), 400},
		{"user_id too long", "k3", with("user_id", strings.Repeat("d", 129)), 400},
		{"unknown event type", "k4", with("event_type", "DANCED"), 400},
		{"no source", "k5", with("source", nil), 400},
		{"invalid time zone", "k6", with("timezone", "Mars/Olympus"), 400},
		{"unknown field", "k7", with("points", 1000), 400},
		{"no Idempotency-Key", "", with("", nil), 400},
		{"malformed Idempotency-Key", "has spaces", with("", nil), 400},
	} {
		r := report(c, tc.key, tc.body)
		if r.Status != tc.status || r.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s: %d %s %s, want %d problem+json", tc.name, r.Status, r.Header.Get("Content-Type"), r.Body, tc.status)
		}
	}
	r := c.Do(apitest.Call{Method: "POST", Path: "/v1/ops/activity", As: "dan", Header: map[string]string{"Idempotency-Key": "k9"},
		Body: with("", nil)})
	if r.Status != 403 {
		t.Errorf("a player on the service route: %d %s", r.Status, r.Body)
	}
	for _, user := range []string{"dan", "dan smith"} {
		if got := items(t, s, user); len(got) != 0 {
			t.Fatalf("bad reports wrote %v for %q", got, user)
		}
	}
}

// Anyone reads a player's streak numbers; their time zone, points and last
// activity date are theirs alone, and so is their points history.
func TestAnotherPlayersStreakLeavesOutWhatIsTheirs(t *testing.T) {
	s := stacktest.Start(t, stack.Options{})
	c := apitest.New(t, s)
	s.Clock().Set(time.Date(nextYear, 3, 10, 9, 0, 0, 0, time.UTC))
	if r, err := activity(c, "eve", "open", map[string]any{"event_type": "DAILY_OPEN", "source": "web", "timezone": "Asia/Kolkata"}); err != nil || r.Status != 200 {
		t.Fatalf("eve's activity: %v %d %s", err, r.Status, r.Body)
	}
	private := []string{"timezone", "total_points", "last_activity_date"}
	for _, tc := range []struct {
		reader, user string
		own          bool
	}{
		{"eve", "eve", true}, {"mallory", "eve", false},
		{"eve", "nobody", false}, {"nobody", "nobody", true}, // a player with no activity yet
	} {
		got := c.Player(tc.reader, "GET", "/v1/users/"+tc.user+"/streak", nil).Expect(t, 200).Map(t)
		for _, k := range private {
			if _, ok := got[k]; ok != tc.own {
				t.Errorf("%s reading %s's streak: %q present %v, want %v (%v)", tc.reader, tc.user, k, ok, tc.own, got)
			}
		}
		for _, k := range []string{"user_id", "current_streak", "longest_streak", "active_today", "at_risk"} {
			if _, ok := got[k]; !ok {
				t.Errorf("%s reading %s's streak: no %q (%v)", tc.reader, tc.user, k, got)
			}
		}
		if tc.user == "eve" && (got["current_streak"] != 1.0 || got["longest_streak"] != 1.0 || got["active_today"] != true) {
			t.Errorf("%s reading eve's streak numbers: %v", tc.reader, got)
		}
		if tc.reader == "eve" && tc.user == "eve" && (got["timezone"] != "Asia/Kolkata" || got["total_points"] != 10.0 || got["last_activity_date"] == nil) {
			t.Errorf("eve reading her own streak: %v", got)
		}
	}
	expectProblem(t, c.Player("mallory", "GET", "/v1/users/eve/points/history", nil), 403, "own")
	c.Player("eve", "GET", "/v1/users/eve/points/history", nil).Expect(t, 200)
}
