package leaderboards_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rallyhq/rally/infra/local/apitest"
	"github.com/rallyhq/rally/infra/local/stack"
	"github.com/rallyhq/rally/infra/local/stacktest"
	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/shared/leaderboards"
	"github.com/rallyhq/rally/shared/routes"
)

// tick runs one tick of the schedule and waits for it: the job runner
// invoked with no records, as the schedule invokes it.
func tick(t *testing.T, s *stack.Stack) {
	t.Helper()
	resp, err := http.Post(s.URL()+"/2015-03-31/functions/"+routes.JobRunner.Function+"/invocations", "application/json", strings.NewReader(`{"Records":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("tick of the schedule: %s", resp.Status)
	}
}

// A closed day leaves Redis once the next day has ended by the service's
// clock, though the expiry its close set in Redis (counted on Redis's own
// clock) is still a day away: the schedule takes it out. Until then it
// stays, and once out its reads come from the archive unchanged.
func TestAClosedDayLeavesRedisOnceTheNextDayEndsByTheServiceClock(t *testing.T) {
	s := stacktest.Start(t, stack.Options{Log: testenv.FailureLog(t), TickEvery: 200 * time.Millisecond})
	c := apitest.New(t, s)
	ctx := context.Background()
	rdb := s.Deps().Redis
	day := closeDay()
	s.Clock().Set(day.Add(time.Hour))
	period := day.Format("2006-01-02")
	b := board{ID: "sprint", Title: "Sprint", Policy: "best", Order: "desc", Reset: "daily", TieBreak: "earliest", MaxN: 100, Timezone: "UTC"}
	define(t, c, b)
	m := playDay(t, c, b, day, 30, 7)
	if err := s.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	keys := func() []string {
		t.Helper()
		ks, err := rdb.Keys(ctx, "rank:{lb:sprint#"+period+"*").Result()
		if err != nil {
			t.Fatal(err)
		}
		return ks
	}
	if len(keys()) == 0 {
		t.Fatal("the day's board is not in Redis")
	}

	// The day closes; the next day is under way: the closed day stays,
	// set to expire (by Redis's clock) when the next day ends.
	next := day.Truncate(24*time.Hour).AddDate(0, 0, 1)
	s.Clock().Set(next.Add(leaderboards.CloseAfter))
	awaitClose(t, s, c, b.ID, period)
	tick(t, s) // a tick of the schedule, with the next day not over
	ks := keys()
	if len(ks) == 0 {
		t.Fatal("the closed day left Redis before the next day ended")
	}
	for _, k := range ks {
		ttl, err := rdb.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl < time.Hour {
			t.Fatalf("%s expires in %s by Redis's clock, want most of a day", k, ttl)
		}
	}

	// The next day ends by the service's clock: the schedule takes the
	// closed day out of Redis, its Redis expiry still hours away.
	s.Clock().Set(next.AddDate(0, 0, 1).Add(time.Second))
	tick(t, s)
	if ks := keys(); len(ks) != 0 {
		t.Fatalf("after a tick of the schedule past the next day's end, the closed day is still in Redis: %v", ks)
	}
	var top struct {
		Entries []ranked `json:"entries"`
		Total   int      `json:"total"`
	}
	c.Player("p001", "GET", "/v1/leaderboards/sprint/top?n=100&period="+period, nil).Expect(t, 200).JSON(t, &top)
	if want := standings(b, m.scores, nil); top.Total != len(want) || !sameRanked(top.Entries, want) {
		t.Fatalf("the day's top once out of Redis: %d %v, want %d %v", top.Total, top.Entries, len(want), want)
	}
}
