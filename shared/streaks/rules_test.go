package streaks_test

import (
	"strings"
	"testing"
	"time"

	"github.com/rallyhq/rally/shared/api"
	"github.com/rallyhq/rally/shared/streaks"
)

func at(t *testing.T, zone, local string) time.Time {
	t.Helper()
	loc, err := streaks.Zone(zone)
	if err != nil {
		t.Fatal(err)
	}
	tm, err := time.ParseInLocation("2006-01-02 15:04", local, loc)
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

// play applies activities in order, each with the day totals it would read.
func play(s streaks.State, days map[string]streaks.Day, acts ...streaks.Activity) (streaks.State, []streaks.Outcome) {
	var outs []streaks.Outcome
	for _, a := range acts {
		date := streaks.DateFor(s, a)
		d, ok := days[date]
		if !ok {
			d = streaks.Day{Date: date}
		}
		var out streaks.Outcome
		s, out = streaks.Apply(s, d, a)
		days[date] = d.With(a.Type, out.Points)
		outs = append(outs, out)
	}
	return s, outs
}

func TestStreakCountsLocalDays(t *testing.T) {
	const berlin = "Europe/Berlin"
	steps := []struct {
		act      streaks.Activity
		current  int64
		extended bool
	}{
		{streaks.Activity{Type: streaks.DailyOpen, Timezone: berlin, At: at(t, berlin, "2026-03-27 23:30")}, 1, false},
		{streaks.Activity{Type: streaks.MatchPlayed, At: at(t, berlin, "2026-03-28 00:10")}, 2, true},  // the next local day
		{streaks.Activity{Type: streaks.MatchPlayed, At: at(t, berlin, "2026-03-28 22:00")}, 2, false}, // the same day
		// 2026-03-29 is the 23-hour day of the switch to summer time.
		{streaks.Activity{Type: streaks.MatchWon, At: at(t, berlin, "2026-03-29 23:59")}, 3, true},
		{streaks.Activity{Type: streaks.MatchWon, At: at(t, berlin, "2026-03-31 08:00")}, 1, false}, // the 30th missed
	}
	s, days := streaks.State{UserID: "u"}, map[string]streaks.Day{}
	for i, st := range steps {
		var outs []streaks.Outcome
		s, outs = play(s, days, st.act)
		if s.Current != st.current || outs[0].Extended != st.extended {
			t.Errorf("activity %d: streak %d extended %v, want %d %v", i, s.Current, outs[0].Extended, st.current, st.extended)
		}
	}
	if s.Longest != 3 || s.LastDate != "2026-03-31" || s.Version != 5 {
		t.Fatalf("state %+v", s)
	}
}

func TestAStreakIsLiveTodayAndYesterdayOnly(t *testing.T) {
	for _, zone := range []string{"Pacific/Kiritimati", "Pacific/Pago_Pago", "America/New_York", ""} {
		s, _ := play(streaks.State{UserID: "u"}, map[string]streaks.Day{}, streaks.Activity{Type: streaks.DailyOpen, Timezone: zone, At: at(t, zone, "2026-11-21 12:00")})
		cases := []struct {
			local  string
			view   streaks.View
			reason string
		}{
			{"2026-11-21 23:59", streaks.View{Current: 1, ActiveToday: true}, "the same day"},
			{"2026-11-22 00:00", streaks.View{Current: 1, AtRisk: true}, "the next day, not yet active"},
			{"2026-11-22 23:59", streaks.View{Current: 1, AtRisk: true}, "the end of the next day"},
			{"2026-11-23 00:00", streaks.View{}, "a whole day missed"},
		}
		for _, c := range cases {
			if got := s.ViewAt(at(t, zone, c.local)); got != c.view {
				t.Errorf("%q at %s (%s): %+v, want %+v", zone, c.local, c.reason, got, c.view)
			}
		}
	}
}

func TestPointsStopAtTheDailyCapPerType(t *testing.T) {
	var acts []streaks.Activity
	start := time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC)
	for i := range 4 {
		acts = append(acts, streaks.Activity{Type: streaks.SocialShare, At: start.Add(time.Duration(i) * time.Minute)})
	}
	acts = append(acts, streaks.Activity{Type: streaks.DailyOpen, At: start.Add(time.Hour)})
	acts = append(acts, streaks.Activity{Type: streaks.SocialShare, At: start.Add(24 * time.Hour)}) // a new day, a new cap
	days := map[string]streaks.Day{}
	s, outs := play(streaks.State{UserID: "u"}, days, acts...)
	want := []int64{25, 25, 0, 0, 10, 25}
	for i, o := range outs {
		if o.Points != want[i] {
			t.Errorf("activity %d: %d points, want %d", i, o.Points, want[i])
		}
	}
	if s.TotalPoints != 85 {
		t.Errorf("total %d, want 85", s.TotalPoints)
	}
	if d := days["2026-11-22"]; d.Points != 60 || d.Events != 5 || d.ByType[streaks.SocialShare] != 50 {
		t.Errorf("day totals %+v", d)
	}
}

func TestTimeZoneChangesAreLimited(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	s := streaks.State{UserID: "u"}
	days := map[string]streaks.Day{}
	zones := []string{"Europe/Berlin", "America/New_York", "Asia/Tokyo", "Pacific/Kiritimati"}
	var outs []streaks.Outcome
	for i, z := range zones {
		var o []streaks.Outcome
		s, o = play(s, days, streaks.Activity{Type: streaks.MatchPlayed, Timezone: z, At: t0.Add(time.Duration(i) * time.Hour)})
		outs = append(outs, o...)
	}
	// The first zone is no change; two changes are allowed; the fourth is refused.
	if outs[3].RejectedTimezone != "Pacific/Kiritimati" || outs[3].Timezone != "Asia/Tokyo" || s.Timezone != "Asia/Tokyo" {
		t.Fatalf("fourth zone: %+v, state zone %q", outs[3], s.Timezone)
	}
	if s.TZRejected != 1 || len(s.TZChanges) != 2 {
		t.Fatalf("changes %v, rejected %d", s.TZChanges, s.TZRejected)
	}
	// Seven days after the first change, one slot is free again.
	s, outs = play(s, days, streaks.Activity{Type: streaks.MatchPlayed, Timezone: "Pacific/Kiritimati", At: t0.Add(7*24*time.Hour + time.Hour)})
	if outs[0].RejectedTimezone != "" || s.Timezone != "Pacific/Kiritimati" {
		t.Fatalf("after a week: %+v, zone %q", outs[0], s.Timezone)
	}
}

func TestMovingWestKeepsTheStreakAndTheLastDate(t *testing.T) {
	// 10:30 UTC on the 22nd is the 23rd in Kiritimati and the 21st in Pago Pago.
	moment := time.Date(2026, 11, 22, 10, 30, 0, 0, time.UTC)
	s, _ := play(streaks.State{UserID: "u"}, map[string]streaks.Day{},
		streaks.Activity{Type: streaks.DailyOpen, Timezone: "Pacific/Kiritimati", At: moment},
	)
	s, outs := play(s, map[string]streaks.Day{}, streaks.Activity{Type: streaks.DailyOpen, Timezone: "Pacific/Pago_Pago", At: moment.Add(time.Minute)})
	if outs[0].Date != "2026-11-21" || s.LastDate != "2026-11-23" || s.Current != 1 || outs[0].Extended {
		t.Fatalf("outcome %+v, state %+v", outs[0], s)
	}
}

func TestBreaksAtFollowsTheZone(t *testing.T) {
	s := streaks.State{Current: 4, LastDate: "2026-11-22", Timezone: "Pacific/Kiritimati"}
	if got, want := s.BreaksAt(), time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC); !got.Equal(want) {
		t.Errorf("Kiritimati: breaks at %s, want %s", got.UTC(), want)
	}
	s.Timezone = "Pacific/Pago_Pago"
	if got, want := s.BreaksAt(), time.Date(2026, 11, 24, 11, 0, 0, 0, time.UTC); !got.Equal(want) {
		t.Errorf("Pago Pago: breaks at %s, want %s", got.UTC(), want)
	}
	if !(streaks.State{}).BreaksAt().IsZero() {
		t.Error("no streak must have no deadline")
	}
}

// The points table says who reports each event type: matches come from
// game servers, everything else from the player.
func TestWhoReportsEachEventType(t *testing.T) {
	want := map[streaks.EventType]streaks.Reporter{
		streaks.DailyOpen: streaks.Players, streaks.MatchPlayed: streaks.GameServers, streaks.MatchWon: streaks.GameServers, streaks.LevelCompleted: streaks.Players, streaks.SocialShare: streaks.Players,
	}
	for _, typ := range streaks.EventTypes() {
		for _, by := range []streaks.Reporter{streaks.Players, streaks.GameServers} {
			if got := streaks.MayReport(typ, by); got != (want[typ] == by) {
				t.Errorf("MayReport(%s, %s) = %v", typ, by, got)
			}
		}
		if streaks.MayReport(typ, 0) {
			t.Errorf("%s may be reported by nobody in particular", typ)
		}
	}
	if streaks.MayReport("DANCED", streaks.Players) || streaks.MayReport("DANCED", streaks.GameServers) {
		t.Error("an unknown event type may be reported")
	}
	if got := streaks.ReportableBy(streaks.GameServers); len(got) != 2 || got[0] != streaks.MatchPlayed || got[1] != streaks.MatchWon {
		t.Errorf("game servers report %v", got)
	}
}

// A game server's Idempotency-Key is its own: another server's same key is
// another key, and no key a client can send (no '#') is one of them.
func TestServerKeysAreScopedToTheServer(t *testing.T) {
	a := streaks.ServerKey("arn:aws:iam::1:role/game-eu", "match-7")
	b := streaks.ServerKey("arn:aws:iam::1:role/game-us", "match-7")
	if a == b || a != streaks.ServerKey("arn:aws:iam::1:role/game-eu", "match-7") {
		t.Fatalf("server keys: %q, %q", a, b)
	}
	if streaks.EventID("ann", a) == streaks.EventID("ann", "match-7") {
		t.Fatal("a server's key names the same event as the player's own key")
	}
	for _, k := range []string{a, b} {
		if !strings.HasSuffix(k, "#match-7") || !api.ValidID("match-7") || api.ValidID(k) {
			t.Fatalf("server key %q", k)
		}
	}
}
