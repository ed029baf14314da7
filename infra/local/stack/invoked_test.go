package stack_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/rallyhq/rally/infra/local/apitest"
	"github.com/rallyhq/rally/infra/local/stack"
	"github.com/rallyhq/rally/infra/local/stacktest"
	"github.com/rallyhq/rally/infra/local/testenv/await"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/streams"
)

// Options.Invoked hears of every in-process invocation with its function,
// its records and how long the handler ran, as Lambda bills it: a
// favorite's route once with no records, the counter processor with the
// favorite's record; a processor's scheduled tick carries no records and
// its context says it is a tick.
func TestInvokedReportsEachInvocationOfAHandler(t *testing.T) {
	type call struct {
		fn      string
		records int
	}
	var (
		mu    sync.Mutex
		calls []call
		ticks int
	)
	s := stacktest.Start(t, stack.Options{
		TickEvery: 100 * time.Millisecond,
		Invoked: func(fn string, records int, took time.Duration) {
			if took <= 0 {
				t.Errorf("%s ran %s", fn, took)
			}
			mu.Lock()
			defer mu.Unlock()
			calls = append(calls, call{fn, records})
		},
		Processors: map[string]streams.Handler{
			routes.LeaderboardProcessor.Function: func(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
				if len(ev.Records) == 0 && stack.IsTick(ctx) {
					mu.Lock()
					ticks++
					mu.Unlock()
				}
				return events.DynamoDBEventResponse{}, nil
			},
		},
	})
	c := apitest.New(t, s)
	c.Player("fan", "POST", "/v1/favorites/g-invoked", nil).Expect(t, 200)
	await.Until(t, 30*time.Second, "the route, the counter processor and a tick are reported", func() bool {
		mu.Lock()
		defer mu.Unlock()
		var route, counter bool
		for _, c := range calls {
			route = route || (c.fn == routes.FavoriteGame.Function && c.records == 0)
			counter = counter || (c.fn == routes.CounterProcessor.Function && c.records > 0)
		}
		return route && counter && ticks > 0
	})
}
