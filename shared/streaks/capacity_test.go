package streaks_test

import (
	"context"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/shared/cachegen"
	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/obs"
	"github.com/rallyhq/rally/shared/schema"
	"github.com/rallyhq/rally/shared/streaks"
	"github.com/rallyhq/rally/shared/streaks/dynamo"
	"github.com/rallyhq/rally/shared/streaks/mirror"
)

// capacity sums the units DynamoDB reports per operation.
type capacity struct {
	mu   sync.Mutex
	byOp map[string]float64
}

func (c *capacity) add(op string, units float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.byOp[op] += units
}

// TestCapacityPerActivity records what one activity costs in DynamoDB
// capacity, as DynamoDB reports it (ReturnConsumedCapacity): the streak
// read, the day read and the four-item transaction. The figures are
// logged for the README; the test fails if an activity stops reporting
// or starts costing more than the transaction's items allow.
func TestCapacityPerActivity(t *testing.T) {
	db, names, _ := testenv.DynamoDB(t)
	srv := testenv.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rdb.Close() })
	units := &capacity{byOp: map[string]float64{}}
	clk := clock.Fixed(time.Date(nextYear, 3, 10, 9, 0, 0, 0, time.UTC))
	store := &dynamo.Store{DB: db, Streaks: names.Of(schema.Streaks), Activity: names.Of(schema.Activity), Clock: clk, Capacity: units.add}
	gen := &cachegen.Tracker{DB: db, Table: names.Of(schema.Counters), Redis: rdb, Scope: mirror.Scope}
	svc := &streaks.Service{
		Store: store, Cache: mirror.New(rdb, gen), Gen: gen, Clock: clk,
		Log: obs.NewLogger(io.Discard, "error", nil), Metrics: obs.NewMetrics(io.Discard, "test"),
		RegionOf: func(context.Context, string) (string, error) { return "eu", nil },
	}
	const n = 50
	for i := range n {
		a := streaks.Activity{Type: streaks.MatchPlayed, Source: streaks.Console, Timezone: "Europe/Berlin", By: streaks.GameServers}
		if _, err := svc.Record(context.Background(), fmt.Sprintf("player-%d", i%5), fmt.Sprintf("key-%d", i), "hash", a); err != nil {
			t.Fatal(err)
		}
	}
	per := map[string]float64{}
	var total float64
	for op, u := range units.byOp {
		per[op] = u / n
		total += u / n
	}
	t.Logf("DynamoDB capacity per activity, as reported: %.2f units (%v)", total, per)
	if per["get"] <= 0 || per["day"] <= 0 || per["commit"] <= 0 {
		t.Fatalf("an operation reported no capacity: %v", per)
	}
	// Four items of at most 1 KB, written transactionally: at most 2 WCU
	// each; two strongly consistent reads of at most 4 KB: 1 RCU each.
	if per["commit"] > 8 || per["get"] > 1 || per["day"] > 1 {
		t.Fatalf("an activity costs more than its items should: %v", per)
	}
}
