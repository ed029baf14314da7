package stack_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rallyhq/rally/infra/local/apitest"
	"github.com/rallyhq/rally/infra/local/stack"
	"github.com/rallyhq/rally/infra/local/stacktest"
	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/infra/local/testenv/await"
	"github.com/rallyhq/rally/shared/freshness/dynamo"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
)

// freshRead is an eventually consistent read and the processor whose
// watermark is its as_of.
type freshRead struct {
	path, as  string
	processor routes.Processor
}

var freshReads = []freshRead{
	{"/v1/games/g1/favorites/count", "reader", routes.CounterProcessor},
	{"/v1/games/top?window=all", "reader", routes.CounterProcessor},
	{"/v1/leaderboards/fresh/top", "reader", routes.LeaderboardProcessor},
	{"/v1/leaderboards/fresh/players/alice/rank?k=2", "reader", routes.LeaderboardProcessor},
	{"/v1/leaderboards/fresh/players/alice/friends-rank", "alice", routes.LeaderboardProcessor},
	{"/v1/streaks/top", "reader", routes.StreakProcessor},
}

// asOf reads a route's as_of, and whether it was served without Redis (as
// it is until the processors first bring Redis up to date).
func asOf(t *testing.T, c *apitest.Client, r freshRead) (time.Time, bool) {
	t.Helper()
	var body struct {
		AsOf     time.Time `json:"as_of"`
		Degraded bool      `json:"degraded"`
	}
	c.Player(r.as, "GET", r.path, nil).Expect(t, 200).JSON(t, &body)
	return body.AsOf, body.Degraded
}

// window is when a set of writes happened, by the stack's clock: each
// write's change time is inside it. Watermarks keep milliseconds.
type window struct{ from, to time.Time }

func (w window) holds(t time.Time) bool {
	return !t.Before(w.from.Truncate(time.Millisecond)) && !t.After(w.to)
}

// writeOnce makes one change per watermarked processor: a favorite
// (counter), a score (leaderboard) and an activity (streak).
func writeOnce(t *testing.T, s *stack.Stack, c *apitest.Client, player, game string, score int) window {
	t.Helper()
	w := window{from: s.Clock().Now()}
	c.Player(player, "POST", "/v1/favorites/"+game, nil).Expect(t, 200)
	c.Service("POST", "/v1/leaderboards/fresh/scores",
		map[string]any{"player_id": player, "match_id": fmt.Sprintf("%s-%d", player, score), "score": score}).Expect(t, 200)
	c.Do(apitest.Call{Method: "POST", Path: "/v1/activity", As: player,
		Body:   map[string]string{"event_type": "DAILY_OPEN", "source": "mobile_app"},
		Header: map[string]string{"Idempotency-Key": player + "-open-" + game}}).Expect(t, 200)
	w.to = s.Clock().Now()
	return w
}

// awaitAsOf waits until every read's as_of is the time of a change made in w.
func awaitAsOf(t *testing.T, c *apitest.Client, w window) map[string]time.Time {
	t.Helper()
	seen := map[string]time.Time{}
	for _, r := range freshReads {
		await.Success(t, 10*time.Second, "as_of of "+r.path+" reflects the newest change", func() error {
			got, degraded := asOf(t, c, r)
			if degraded {
				return fmt.Errorf("served without redis")
			}
			if !w.holds(got) {
				return fmt.Errorf("as_of %v, want within %v..%v", got, w.from, w.to)
			}
			seen[r.path] = got
			return nil
		})
	}
	return seen
}

// as_of is the time of the newest change the processors applied, not the
// time of the read: while the processors are paused it stands still however
// far the clock moves and whatever is written, and once they resume it
// catches up with the newest change. The durable copy that operations read
// says the same.
func TestAsOfIsTheNewestChangeTheProcessorsApplied(t *testing.T) {
	redis := testenv.Redis(t)
	s := stacktest.Start(t, stack.Options{RedisURL: redis.URL()})
	c := apitest.New(t, s)
	s.Clock().Set(time.Date(time.Now().Year()+1, 3, 10, 9, 0, 0, 0, time.UTC))
	c.Service("PUT", "/v1/leaderboards/fresh", map[string]any{
		"title": "Fresh", "policy": "best", "order": "desc", "reset": "none", "tie_break": "earliest", "max_n": 100, "timezone": "UTC",
	}).Expect(t, 201)

	first := writeOnce(t, s, c, "alice", "g1", 10)
	before := awaitAsOf(t, c, first)
	if err := s.WaitIdle(context.Background()); err != nil {
		t.Fatal(err)
	}

	s.PauseProcessors()
	s.Clock().Advance(time.Hour)
	second := writeOnce(t, s, c, "bob", "g2", 20)
	for i := 0; i < 2; i++ {
		for _, r := range freshReads {
			if got, degraded := asOf(t, c, r); degraded || !got.Equal(before[r.path]) {
				t.Fatalf("GET %s while paused: as_of %v (degraded %v), want it to stay at %v", r.path, got, degraded, before[r.path])
			}
			if behind := s.Clock().Now().Sub(before[r.path]); behind < time.Hour {
				t.Fatalf("GET %s while paused: as_of only %v behind the clock", r.path, behind)
			}
		}
		s.Clock().Advance(10 * time.Minute) // the clock moves on; as_of does not
	}

	s.ResumeProcessors()
	after := awaitAsOf(t, c, second)
	store := &dynamo.Store{DB: s.DB(), Table: s.Tables().Of(schema.Counters)}
	marks, err := store.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range freshReads {
		durable, ok := marks[r.processor.Function]
		if !ok || !durable.NewestChange.Truncate(time.Millisecond).Equal(after[r.path]) {
			t.Fatalf("durable watermark of %s: %+v (found %v), want its newest change at %v", r.processor.Function, durable, ok, after[r.path])
		}
		// The pause held the newest change back while the clock moved 20
		// minutes: the lag operations see.
		if lag := durable.Lag(); lag < 20*time.Minute {
			t.Fatalf("%s: lag %v after a 20-minute pause", r.processor.Function, lag)
		}
	}

	// Without Redis, a count is served from its durable copy and says the
	// durable watermark; a board is read from the Scores table, the truth,
	// and is as of the read.
	redis.Stop()
	count, board := freshReads[0], freshReads[2]
	await.Success(t, 10*time.Second, "a count served without redis keeps the processor's as_of", func() error {
		got, degraded := asOf(t, c, count)
		if !degraded || !got.Truncate(time.Millisecond).Equal(after[count.path]) {
			return fmt.Errorf("as_of %v (degraded %v), want %v", got, degraded, after[count.path])
		}
		return nil
	})
	await.Success(t, 10*time.Second, "a board read from dynamodb is as of the read", func() error {
		readAt := s.Clock().Now()
		if got, degraded := asOf(t, c, board); !degraded || got.Before(readAt) {
			return fmt.Errorf("as_of %v (degraded %v), want the read time, after %v", got, degraded, readAt)
		}
		return nil
	})
}
