package privacy_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/rallyhq/rally/infra/local/apitest"
	"github.com/rallyhq/rally/infra/local/stack"
	"github.com/rallyhq/rally/infra/local/stacktest"
	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/infra/local/testenv/await"
	lbbind "github.com/rallyhq/rally/shared/leaderboards/bind"
	rxbind "github.com/rallyhq/rally/shared/reactions/bind"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/streams"
)

// poisoned is a processor that fails on the erased user's writes (not
// their deletions) while poison holds, and is the real one otherwise.
func poisoned(poison *atomic.Bool, real *atomic.Pointer[streams.Handler]) streams.Handler {
	return func(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		for _, r := range ev.Records {
			if poison.Load() && r.Change.NewImage != nil && recordUser(r) == erased {
				return events.DynamoDBEventResponse{}, errors.New("a bug that only the erased user's records meet")
			}
		}
		h := real.Load()
		if h == nil {
			return events.DynamoDBEventResponse{}, errors.New("the stack is not up yet")
		}
		return (*h)(ctx, ev)
	}
}

func recordUser(r events.DynamoDBEventRecord) string {
	for _, attr := range []string{"user_id", "player_id"} {
		if v, ok := r.Change.NewImage[attr]; ok {
			return v.String()
		}
	}
	return ""
}

// The erased user's favorite and score were parked (their processors
// failed on them) before the erasure: the erasure scrubs them from the
// archive, and redriving everything after it brings the user back
// nowhere: no count, no board, no item, no key, no parked record.
func TestARedriveAfterAnErasureBringsNobodyBack(t *testing.T) {
	var poison atomic.Bool
	poison.Store(true)
	var counter, boards atomic.Pointer[streams.Handler]
	s := stacktest.Start(t, stack.Options{
		RetryBase: time.Millisecond, RetryMax: 5 * time.Millisecond,
		Log: testenv.FailureLog(t),
		Processors: map[string]streams.Handler{
			routes.CounterProcessor.Function:     poisoned(&poison, &counter),
			routes.LeaderboardProcessor.Function: poisoned(&poison, &boards),
		},
	})
	d := s.Deps()
	rx, lb := d.Stream(rxbind.Reactions, routes.CounterProcessor), d.Stream(lbbind.Leaderboards, routes.LeaderboardProcessor)
	counter.Store(&rx)
	boards.Store(&lb)
	c := apitest.New(t, s)
	ctx := context.Background()

	c.Service("PUT", "/v1/leaderboards/cup", map[string]any{"title": "Cup", "policy": "best"}).Expect(t, 201)
	c.Player(bob, "POST", "/v1/favorites/g1", nil).Expect(t, 200)
	c.Player(erased, "POST", "/v1/favorites/g1", nil).Expect(t, 200)
	c.Service("POST", "/v1/leaderboards/cup/scores", map[string]any{"player_id": bob, "match_id": "m1", "score": 10}).Expect(t, 200)
	c.Service("POST", "/v1/leaderboards/cup/scores", map[string]any{"player_id": erased, "match_id": "m2", "score": 50}).Expect(t, 200)
	if err := s.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	var list struct {
		Batches []struct {
			Processor string `json:"processor"`
		} `json:"batches"`
	}
	c.Service("GET", "/v1/ops/dlq", nil).Expect(t, 200).JSON(t, &list)
	if len(list.Batches) != 2 {
		t.Fatalf("parked %+v, want the erased user's favorite and score", list)
	}

	var asked struct {
		ID string `json:"erasure_id"`
	}
	c.Service("DELETE", "/v1/ops/users/"+erased, nil).Expect(t, 202).JSON(t, &asked)
	await.Until(t, time.Minute, "the erasure completed", func() bool {
		var st struct {
			Status string `json:"status"`
		}
		c.Service("GET", "/v1/ops/users/"+erased+"/erasure", nil).Expect(t, 200).JSON(t, &st)
		return st.Status == "COMPLETED"
	})

	// The cause is fixed and everything parked is redriven: nothing of
	// the erased user is left to replay.
	poison.Store(false)
	c.Service("POST", "/v1/ops/dlq/redrive", nil).Expect(t, 200)
	if err := s.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	c.Service("GET", "/v1/ops/dlq", nil).Expect(t, 200).JSON(t, &list)
	if len(list.Batches) != 0 {
		t.Fatalf("still parked after the erasure and the redrive: %+v", list)
	}
	var count struct {
		Count int64 `json:"count"`
	}
	c.Player(bob, "GET", "/v1/games/g1/favorites/count", nil).Expect(t, 200).JSON(t, &count)
	if count.Count != 1 {
		t.Fatalf("g1 counts %d, want bob's favorite alone", count.Count)
	}
	var top entries
	c.Player(bob, "GET", "/v1/leaderboards/cup/top?n=10", nil).Expect(t, 200).JSON(t, &top)
	if ids := top.ids(); len(ids) != 1 || ids[0] != bob {
		t.Fatalf("cup ranks %v, want bob alone", ids)
	}
	(&world{s: s, c: c}).traceless(t, erased)
}
