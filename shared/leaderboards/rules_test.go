package leaderboards

import (
	"fmt"
	"testing"
	"time"

	"github.com/rallyhq/rally/shared/errs"
)

var t0 = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

func ranks(es []Entry) string {
	s := ""
	for _, e := range es {
		s += fmt.Sprintf("%s:%d ", e.PlayerID, e.Rank)
	}
	return s
}

func TestRankBreaksTiesByTimeThenIDOrSharesThem(t *testing.T) {
	mk := func() []Entry {
		return []Entry{
			{PlayerID: "d", Score: 50, ReachedAt: t0},
			{PlayerID: "b", Score: 70, ReachedAt: t0.Add(time.Minute)},
			{PlayerID: "a", Score: 70, ReachedAt: t0.Add(time.Minute)},
			{PlayerID: "c", Score: 70, ReachedAt: t0},
			{PlayerID: "e", Score: 90, ReachedAt: t0.Add(time.Hour)},
		}
	}
	es := mk()
	Rank(Desc, Earliest, es, 0, 0)
	if got := ranks(es); got != "e:1 c:2 a:3 b:4 d:5 " {
		t.Fatalf("earliest desc: %s", got)
	}
	es = mk()
	Rank(Desc, Shared, es, 0, 0)
	if got := ranks(es); got != "e:1 c:2 a:2 b:2 d:5 " {
		t.Fatalf("shared desc: %s", got)
	}
	es = mk()
	Rank(Asc, Earliest, es, 0, 0)
	if got := ranks(es); got != "d:1 c:2 a:3 b:4 e:5 " {
		t.Fatalf("earliest asc: %s", got)
	}
	// A window that starts inside a tie ranks like the whole board.
	window := []Entry{{PlayerID: "a", Score: 70, ReachedAt: t0.Add(time.Minute)}, {PlayerID: "b", Score: 70, ReachedAt: t0.Add(time.Minute)}, {PlayerID: "d", Score: 50}}
	Rank(Desc, Shared, window, 2, 1)
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
		if got := Percentile(c.rank, c.total); got != c.want {
			t.Errorf("Percentile(%d, %d) = %v, want %v", c.rank, c.total, got, c.want)
		}
	}
}

func TestApplyFollowsThePolicy(t *testing.T) {
	cur := &Score{PlayerID: "p", Score: 100, ReachedAt: t0, Version: 3}
	later, earlier := t0.Add(time.Hour), t0.Add(-time.Hour)
	cases := []struct {
		name    string
		def     Definition
		m       Match
		score   int64
		changed bool
		reached time.Time
	}{
		{"best desc: higher wins", Definition{Policy: Best, Order: Desc}, Match{Score: 120, OccurredAt: later}, 120, true, later},
		{"best desc: lower keeps", Definition{Policy: Best, Order: Desc}, Match{Score: 80, OccurredAt: later}, 100, false, t0},
		{"best desc: equal keeps the earlier time", Definition{Policy: Best, Order: Desc}, Match{Score: 100, OccurredAt: later}, 100, false, t0},
		{"best asc: lower wins", Definition{Policy: Best, Order: Asc}, Match{Score: 80, OccurredAt: later}, 80, true, later},
		{"best asc: higher keeps", Definition{Policy: Best, Order: Asc}, Match{Score: 120, OccurredAt: later}, 100, false, t0},
		{"increment adds", Definition{Policy: Increment, Order: Desc}, Match{Score: 1, OccurredAt: later}, 101, true, later},
		{"increment by zero changes nothing", Definition{Policy: Increment, Order: Desc}, Match{Score: 0, OccurredAt: later}, 100, false, t0},
		{"increment keeps the later reached time", Definition{Policy: Increment, Order: Desc}, Match{Score: 1, OccurredAt: earlier}, 101, true, t0},
		{"latest replaces", Definition{Policy: Latest, Order: Desc}, Match{Score: 5, OccurredAt: later}, 5, true, later},
		{"latest ignores an older match", Definition{Policy: Latest, Order: Desc}, Match{Score: 5, OccurredAt: earlier}, 100, false, t0},
	}
	for _, c := range cases {
		next, changed, err := Apply(c.def, cur, c.m)
		if err != nil || next.Score != c.score || changed != c.changed || !next.ReachedAt.Equal(c.reached) {
			t.Errorf("%s: %+v changed=%v err=%v", c.name, next, changed, err)
		}
	}
	first, changed, _ := Apply(Definition{Policy: Best, Order: Desc}, nil, Match{PlayerID: "q", Score: -5, OccurredAt: t0})
	if !changed || first.Score != -5 || first.PlayerID != "q" {
		t.Errorf("first score: %+v", first)
	}
	_, _, err := Apply(Definition{Policy: Increment}, &Score{Score: MaxScore - 1}, Match{Score: 2, OccurredAt: later})
	if !errs.Is(err, errs.Conflict) {
		t.Errorf("overflowing increment: %v", err)
	}
}

func TestPeriodsAreCutInTheBoardsTimeZone(t *testing.T) {
	// 2026-11-30 23:30 UTC is already 1 December in Berlin (UTC+1).
	at := time.Date(2026, 11, 30, 23, 30, 0, 0, time.UTC)
	for _, c := range []struct {
		reset Reset
		tz    string
		want  string
		prev  string
	}{
		{Daily, "UTC", "2026-11-30", "2026-11-29"},
		{Daily, "Europe/Berlin", "2026-12-01", "2026-11-30"},
		{Daily, "Pacific/Pago_Pago", "2026-11-30", "2026-11-29"},
		{Weekly, "UTC", "2026-W49", "2026-W48"},
		{Monthly, "UTC", "2026-11", "2026-10"},
		{Monthly, "Europe/Berlin", "2026-12", "2026-11"},
		{Never, "UTC", "all", "all"},
	} {
		d := Definition{Reset: c.reset, Timezone: c.tz}
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
	weekly := Definition{Reset: Weekly, Timezone: "UTC"}
	if got := weekly.PeriodAt(time.Date(2027, 1, 3, 12, 0, 0, 0, time.UTC)); got != "2026-W53" {
		t.Errorf("3 Jan 2027 is in %s, want 2026-W53", got)
	}
	for _, c := range []struct {
		reset Reset
		p     string
	}{
		{Daily, "2026-13-01"}, {Daily, "2026-11"}, {Daily, "26-11-01"}, {Weekly, "2026-W54"}, {Weekly, "2025-W53"},
		{Weekly, "2026-47"}, {Monthly, "2026-00"}, {Monthly, "2026-11-01"}, {Never, "2026"},
	} {
		if err := (Definition{Reset: c.reset}).CheckPeriod(c.p); !errs.Is(err, errs.Invalid) {
			t.Errorf("%s period %q accepted", c.reset, c.p)
		}
	}
}
