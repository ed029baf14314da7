package ops_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/rallyhq/rally/infra/local/apitest"
	"github.com/rallyhq/rally/infra/local/stack"
	"github.com/rallyhq/rally/infra/local/stacktest"
	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/infra/local/testenv/await"
	"github.com/rallyhq/rally/shared/deadletters"
	reactionsbind "github.com/rallyhq/rally/shared/reactions/bind"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/streamread"
	"github.com/rallyhq/rally/shared/streams"
)

func TestMain(m *testing.M) { testenv.Main(m) }

type parked struct {
	Batches []struct {
		ID        string `json:"batch_id"`
		Processor string `json:"processor"`
		Source    string `json:"source"`
		Records   int    `json:"records"`
		First     string `json:"first_sequence_number"`
		Last      string `json:"last_sequence_number"`
		Reason    string `json:"reason"`
	} `json:"batches"`
}

type redriven struct {
	Results []struct {
		Processor string `json:"processor"`
		Batch     string `json:"batch_id"`
		Records   int    `json:"records"`
		Applied   int    `json:"applied"`
		Error     string `json:"error"`
	} `json:"results"`
}

// A poison record is parked after its retries; a day later, when the
// stream no longer holds it, the cause is fixed and the batch is redriven
// through the ops route (SigV4): every count equals the favorites made,
// and replaying the same batch again counts nothing twice.
func TestAParkedBatchIsRedrivenAfterTheStreamForgotIt(t *testing.T) {
	var poisoned atomic.Bool
	poisoned.Store(true)
	var mu sync.Mutex
	var counter streams.Handler // the real counter processor, once the stack is up
	s := stacktest.Start(t, stack.Options{
		StreamRetention: routes.StreamRetention,
		RetryBase:       time.Millisecond, RetryMax: 5 * time.Millisecond,
		Log: testenv.FailureLog(t),
		Processors: map[string]streams.Handler{
			// The counter processor, broken for one game until "fixed".
			routes.CounterProcessor.Function: func(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
				for _, r := range ev.Records {
					if poisoned.Load() && strings.Contains(r.Change.Keys["edge"].String(), "cursed") {
						return events.DynamoDBEventResponse{}, errors.New("a bug in the counter processor")
					}
				}
				mu.Lock()
				h := counter
				mu.Unlock()
				return h(ctx, ev)
			},
		},
	})
	mu.Lock()
	counter = s.Deps().Stream(reactionsbind.Reactions, routes.CounterProcessor)
	mu.Unlock()
	c := apitest.New(t, s)
	for _, p := range []string{"ann", "bob", "cyd"} {
		c.Player(p, "POST", "/v1/favorites/blessed", nil).Expect(t, 200)
	}
	c.Player("dee", "POST", "/v1/favorites/cursed", nil).Expect(t, 200)
	if err := s.WaitIdle(context.Background()); err != nil {
		t.Fatal(err)
	}

	var list parked
	c.Service("GET", "/v1/ops/dlq", nil).Expect(t, 200).JSON(t, &list)
	if len(list.Batches) != 1 || list.Batches[0].Processor != routes.CounterProcessor.Function || list.Batches[0].Records != 1 ||
		list.Batches[0].Source != "Reactions" || list.Batches[0].Reason != "RetryAttemptsExhausted" {
		t.Fatalf("parked %+v, want the one poison record", list)
	}
	count := func(game string) int64 {
		var body struct {
			Count int64 `json:"count"`
		}
		c.Player("reader", "GET", "/v1/games/"+game+"/favorites/count", nil).Expect(t, 200).JSON(t, &body)
		return body.Count
	}
	if count("cursed") != 0 || count("blessed") != 3 {
		t.Fatalf("before the redrive: cursed %d, blessed %d", count("cursed"), count("blessed"))
	}

	// A day and more on, the stream no longer holds the parked record.
	b := list.Batches[0]
	s.Clock().Advance(routes.StreamRetention + time.Hour)
	if _, err := streamread.ReadRange(context.Background(), s.Streams(), streamBatch(t, s, b.ID), stack.Region); !errors.Is(err, streamread.ErrExpired) {
		t.Fatalf("the stream still holds the parked record: %v", err)
	}
	archived, err := s.DeadLetters().Records(context.Background(), batchOf(t, s, b.ID))
	if err != nil {
		t.Fatal(err)
	}

	// Fixed; redriven through the route.
	poisoned.Store(false)
	var rd redriven
	c.Service("POST", "/v1/ops/dlq/redrive", map[string]any{"processor": routes.CounterProcessor.Function}).Expect(t, 200).JSON(t, &rd)
	if len(rd.Results) != 1 || rd.Results[0].Batch != b.ID || rd.Results[0].Applied != 1 || rd.Results[0].Error != "" {
		t.Fatalf("redrive %+v", rd)
	}
	await.Until(t, 5*time.Second, "the redriven favorite counted", func() bool { return count("cursed") == 1 })
	c.Service("GET", "/v1/ops/dlq", nil).Expect(t, 200).JSON(t, &list)
	if len(list.Batches) != 0 {
		t.Fatalf("still parked after the redrive: %+v", list)
	}

	// The same batch once more (a redrive that crashed before removing
	// it would replay it): nothing counts twice.
	if resp, err := counter(context.Background(), events.DynamoDBEvent{Records: archived}); err != nil || len(resp.BatchItemFailures) > 0 {
		t.Fatalf("replaying again: %+v %v", resp, err)
	}
	c.Service("POST", "/v1/ops/dlq/redrive", nil).Expect(t, 200).JSON(t, &rd)
	if len(rd.Results) != 0 {
		t.Fatalf("a second redrive found %+v", rd)
	}
	if got, want := count("cursed"), int64(1); got != want {
		t.Fatalf("cursed counts %d after replaying twice, want %d", got, want)
	}
	if count("blessed") != 3 {
		t.Fatalf("blessed counts %d, want 3", count("blessed"))
	}
}

// Bad input is a 400 that replays nothing; an unknown batch a 404; players
// are refused.
func TestRedriveRefusesWhatItCannotDo(t *testing.T) {
	s := stacktest.Start(t, stack.Options{Log: testenv.FailureLog(t)})
	c := apitest.New(t, s)
	c.Service("POST", "/v1/ops/dlq/redrive", map[string]any{"processor": "no-such-processor"}).Expect(t, 400)
	c.Service("POST", "/v1/ops/dlq/redrive", map[string]any{"batch_id": "abc"}).Expect(t, 400)
	c.Service("POST", "/v1/ops/dlq/redrive", map[string]any{"processor": routes.CounterProcessor.Function, "batch_id": "abc"}).Expect(t, 404)
	c.Service("GET", "/v1/ops/dlq?processor=nope", nil).Expect(t, 400)
	c.Player("ann", "GET", "/v1/ops/dlq", nil).Expect(t, 403)
}

func batchOf(t *testing.T, s *stack.Stack, id string) deadletters.Batch {
	t.Helper()
	b, err := s.DeadLetters().Get(context.Background(), routes.CounterProcessor.Function, id)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func streamBatch(t *testing.T, s *stack.Stack, id string) streamread.BatchInfo {
	t.Helper()
	b := batchOf(t, s, id)
	return streamread.BatchInfo{StreamARN: b.StreamARN, ShardID: b.ShardID, StartSequenceNumber: b.First, EndSequenceNumber: b.Last}
}
