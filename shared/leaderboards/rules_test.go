package leaderboards_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/rallyhq/rally/shared/errs"
	"github.com/rallyhq/rally/shared/leaderboards"
)

var t0 = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

func ranks(es []leaderboards.Entry) string {
	s := ""
	for _, e := range es {
		s += fmt.Sprintf("%s:%d ", e.PlayerID, e.Rank)
	}
	return s
}

func TestRankBreaksTiesByTimeThenIDOrSharesThem(t *testing.T) {
	mk := func() []leaderboards.Entry {
		return []leaderboards.Entry{
			{PlayerID: "d", Score: 50, ReachedAt: t0},
			{PlayerID: "b", Score: 70, ReachedAt: t0.Add(time.Minute)},
			{PlayerID: "a", Score: 70, ReachedAt: t0.Add(time.Minute)},
			{PlayerID: "c", Score: 70, ReachedAt: t0},
			{PlayerID: "e", Score: 90, ReachedAt: t0.Add(time.Hour)},
		}
	}
	es := mk()
	leaderboards.Rank(leaderboards.Desc, leaderboards.Earliest, es, 0, 0)
	if got := ranks(es); got != "e:1 c:2 a:3 b:4 d:5 " {
		t.Fatalf("earliest desc: %s", got)
	}
	es = mk()
	leaderboards.Rank(leaderboards.Desc, leaderboards.Shared, es, 0, 0)
	if got := ranks(es); got != "e:1 c:2 a:2 b:2 d:5 " {
		t.Fatalf("shared desc: %s", got)
	}
	es = mk()
	leaderboards.Rank(leaderboards.Asc, leaderboards.Earliest, es, 0, 0)
	if got := ranks(es); got != "d:1 c:2 a:3 b:4 e:5 " {
		t.Fatalf("earliest asc: %s", got)
	}
	// A window that starts inside a tie ranks like the whole board.
	window := []leaderboards.Entry{{PlayerID: "a", Score: 70, ReachedAt: t0.Add(time.Minute)}, {PlayerID: "b", Score: 70, ReachedAt: t0.Add(time.Minute)}, {PlayerID: "d", Score: 50}}
	leaderboards.Rank(leaderboards.Desc, leaderboards.Shared, window, 2, 1)
	if got := ranks(window); got != "a:2 b:2 d:5 " {
		t.Fatalf("shared window: %s", got)
	}
}

func TestPercentile(t *testing.T) {
	for _, c := range []struct {
		rank  int
		total int64
		want  float64
	}{{1, 100, 99}, {100, 100, 0}, {1, 1, 0}, {2, 3, 33.33}, {1, 3, 66.67}, {0, 0, 0}} {
		if got := leaderboards.Percentile(c.rank, c.total); got != c.want {
			t.Errorf("Percentile(%d, %d) = %v, want %v", c.rank, c.total, got, c.want)
		}
	}
}

func TestApplyFollowsThePolicy(t *testing.T) {
	cur := &leaderboards.Score{PlayerID: "p", Score: 100, ReachedAt: t0, Version: 3}
	later, earlier := t0.Add(time.Hour), t0.Add(-time.Hour)
	cases := []struct {
		name    string
		def     leaderboards.Definition
		m       leaderboards.Match
		score   int64
		changed bool
		reached time.Time
	}{
		{"best desc: higher wins", leaderboards.Definition{Policy: leaderboards.Best, Order: leaderboards.Desc}, leaderboards.Match{Score: 120, OccurredAt: later}, 120, true, later},
		{"best desc: lower keeps", leaderboards.Definition{Policy: leaderboards.Best, Order: leaderboards.Desc}, leaderboards.Match{Score: 80, OccurredAt: later}, 100, false, t0},
		{"best desc: equal keeps the earlier time", leaderboards.Definition{Policy: leaderboards.Best, Order: leaderboards.Desc}, leaderboards.Match{Score: 100, OccurredAt: later}, 100, false, t0},
		{"best asc: lower wins", leaderboards.Definition{Policy: leaderboards.Best, Order: leaderboards.Asc}, leaderboards.Match{Score: 80, OccurredAt: later}, 80, true, later},
		{"best asc: higher keeps", leaderboards.Definition{Policy: leaderboards.Best, Order: leaderboards.Asc}, leaderboards.Match{Score: 120, OccurredAt: later}, 100, false, t0},
		{"increment adds", leaderboards.Definition{Policy: leaderboards.Increment, Order: leaderboards.Desc}, leaderboards.Match{Score: 1, OccurredAt: later}, 101, true, later},
		{"increment by zero changes nothing", leaderboards.Definition{Policy: leaderboards.Increment, Order: leaderboards.Desc}, leaderboards.Match{Score: 0, OccurredAt: later}, 100, false, t0},
		{"increment keeps the later reached time", leaderboards.Definition{Policy: leaderboards.Increment, Order: leaderboards.Desc}, leaderboards.Match{Score: 1, OccurredAt: earlier}, 101, true, t0},
		{"latest replaces", leaderboards.Definition{Policy: leaderboards.Latest, Order: leaderboards.Desc}, leaderboards.Match{Score: 5, OccurredAt: later}, 5, true, later},
		{"latest ignores an older match", leaderboards.Definition{Policy: leaderboards.Latest, Order: leaderboards.Desc}, leaderboards.Match{Score: 5, OccurredAt: earlier}, 100, false, t0},
	}
	for _, c := range cases {
		next, changed, err := leaderboards.Apply(c.def, cur, c.m)
		if err != nil || next.Score != c.score || changed != c.changed || !next.ReachedAt.Equal(c.reached) {
			t.Errorf("%s: %+v changed=%v err=%v", c.name, next, changed, err)
		}
	}
	first, changed, _ := leaderboards.Apply(leaderboards.Definition{Policy: leaderboards.Best, Order: leaderboards.Desc}, nil, leaderboards.Match{PlayerID: "q", Score: -5, OccurredAt: t0})
	if !changed || first.Score != -5 || first.PlayerID != "q" {
		t.Errorf("first score: %+v", first)
	}
	_, _, err := leaderboards.Apply(leaderboards.Definition{Policy: leaderboards.Increment}, &leaderboards.Score{Score: leaderboards.MaxScore - 1}, leaderboards.Match{Score: 2, OccurredAt: later})
	if !errs.Is(err, errs.Conflict) {
		t.Errorf("overflowing increment: %v", err)
	}
}

func TestPeriodsAreCutInTheBoardsTimeZone(t *testing.T) {
	// 2026-11-30 23:30 UTC is already 1 December in Berlin (UTC+1).
	at := time.Date(2026, 11, 30, 23, 30, 0, 0, time.UTC)
	for _, c := range []struct {
		reset leaderboards.Reset
		tz    string
		want  string
		prev  string
	}{
		{leaderboards.Daily, "UTC", "2026-11-30", "2026-11-29"},
		{leaderboards.Daily, "Europe/Berlin", "2026-12-01", "2026-11-30"},
		{leaderboards.Daily, "Pacific/Pago_Pago", "2026-11-30", "2026-11-29"},
		{leaderboards.Weekly, "UTC", "2026-W49", "2026-W48"},
		{leaderboards.Monthly, "UTC", "2026-11", "2026-10"},
		{leaderboards.Monthly, "Europe/Berlin", "2026-12", "2026-11"},
		{leaderboards.Never, "UTC", "all", "all"},
	} {
		d := leaderboards.Definition{Reset: c.reset, Timezone: c.tz}
		if got := d.PeriodAt(at); got != c.want {
			t.Errorf("%s %s: %s, want %s", c.reset, c.tz, got, c.want)
		}
		if got := d.PreviousPeriod(at); got != c.prev {
			t.Errorf("%s %s previous: %s, want %s", c.reset, c.tz, got, c.prev)
		}
		if err := d.CheckPeriod(c.want); err != nil {
			t.Errorf("%s: own period %s refused: %v", c.reset, c.want, err)
		}
	}
	// ISO week 1 of 2027 starts on Monday 4 January; 2026 has 53 weeks.
	weekly := leaderboards.Definition{Reset: leaderboards.Weekly, Timezone: "UTC"}
	if got := weekly.PeriodAt(time.Date(2027, 1, 3, 12, 0, 0, 0, time.UTC)); got != "2026-W53" {
		t.Errorf("3 Jan 2027 is in %s, want 2026-W53", got)
	}
	for _, c := range []struct {
		reset leaderboards.Reset
		p     string
	}{
		{leaderboards.Daily, "2026-13-01"}, {leaderboards.Daily, "2026-11"}, {leaderboards.Daily, "26-11-01"}, {leaderboards.Weekly, "2026-W54"}, {leaderboards.Weekly, "2025-W53"},
		{leaderboards.Weekly, "2026-47"}, {leaderboards.Monthly, "2026-00"}, {leaderboards.Monthly, "2026-11-01"}, {leaderboards.Never, "2026"},
	} {
		if err := (leaderboards.Definition{Reset: c.reset}).CheckPeriod(c.p); !errs.Is(err, errs.Invalid) {
			t.Errorf("%s period %q accepted", c.reset, c.p)
		}
	}
}
