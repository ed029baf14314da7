package main

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/shared/routes"
)

func TestRoutesMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 2, 3}, 2.5}, {[]float64{1, 1, 1, 2, 2}, 1}} {
		if got := routesMedian(c.in); got != c.want {
			t.Errorf("median of %v = %g, want %g", c.in, got, c.want)
		}
	}
}

// The meter asks every input that can for its capacity, and leaves
// inputs without the field alone.
func TestRoutesAskCapacity(t *testing.T) {
	get := &dynamodb.GetItemInput{}
	routesAskCapacity(get)
	if get.ReturnConsumedCapacity != types.ReturnConsumedCapacityIndexes {
		t.Errorf("GetItem input: %q", get.ReturnConsumedCapacity)
	}
	tx := &dynamodb.TransactWriteItemsInput{}
	routesAskCapacity(tx)
	if tx.ReturnConsumedCapacity != types.ReturnConsumedCapacityIndexes {
		t.Errorf("TransactWriteItems input: %q", tx.ReturnConsumedCapacity)
	}
	describe := &dynamodb.DescribeTableInput{TableName: aws.String("t")}
	routesAskCapacity(describe) // no such field: untouched, no panic
	routesAskCapacity(nil)
	routesAskCapacity((*dynamodb.GetItemInput)(nil))
}

func TestRoutesCapacityOf(t *testing.T) {
	units := aws.Float64
	for _, c := range []struct {
		name   string
		op     string
		result any
		want   routesCapacity
	}{
		{"a read's total is read capacity", "GetItem", &dynamodb.GetItemOutput{ConsumedCapacity: &types.ConsumedCapacity{CapacityUnits: units(0.5)}}, routesCapacity{RCU: 0.5}},
		{"a write's total is write capacity, with its indexes' part", "UpdateItem", &dynamodb.UpdateItemOutput{ConsumedCapacity: &types.ConsumedCapacity{
			CapacityUnits: units(3), GlobalSecondaryIndexes: map[string]types.Capacity{"a": {CapacityUnits: units(1)}, "b": {CapacityUnits: units(1)}},
		}}, routesCapacity{WCU: 3, IndexWCU: 2}},
		{"read and write units win over the total", "UpdateItem", &dynamodb.UpdateItemOutput{ConsumedCapacity: &types.ConsumedCapacity{
			CapacityUnits: units(3), ReadCapacityUnits: units(1), WriteCapacityUnits: units(2),
		}}, routesCapacity{RCU: 1, WCU: 2}},
		{"a batch sums its tables", "BatchGetItem", &dynamodb.BatchGetItemOutput{ConsumedCapacity: []types.ConsumedCapacity{{CapacityUnits: units(1)}, {CapacityUnits: units(2.5)}}}, routesCapacity{RCU: 3.5}},
		{"a transaction's writes are taken as reported", "TransactWriteItems", &dynamodb.TransactWriteItemsOutput{ConsumedCapacity: []types.ConsumedCapacity{{
			CapacityUnits: units(4), LocalSecondaryIndexes: map[string]types.Capacity{"l": {CapacityUnits: units(2)}},
		}}}, routesCapacity{WCU: 4, IndexWCU: 2}},
		{"no capacity reported", "PutItem", &dynamodb.PutItemOutput{}, routesCapacity{}},
		{"an output without the field", "DescribeTable", &dynamodb.DescribeTableOutput{}, routesCapacity{}},
	} {
		if got := routesCapacityOf(c.op, c.result); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestRoutesFloorKind(t *testing.T) {
	for _, c := range []struct {
		calls map[string]int
		want  string
	}{
		{nil, routesGetItem},
		{map[string]int{"GetItem": 1, "BatchGetItem": 1}, routesGetItem},
		{map[string]int{"GetItem": 1, "UpdateItem": 2}, routesPutItem},
		{map[string]int{"PutItem": 1, "TransactWriteItems": 1}, routesTransact},
	} {
		if got := routesFloorKind(routesUsage{Calls: c.calls}); got != c.want {
			t.Errorf("%v: %s, want %s", c.calls, got, c.want)
		}
	}
	u := routesUsage{Calls: map[string]int{"UpdateItem": 4, "GetItem": 2}}
	if got := routesPerRequest(u, 2); got != "GetItem×1, UpdateItem×2" {
		t.Errorf("per request: %s", got)
	}
	if got := routesPerRequest(routesUsage{}, 2); got != "no DynamoDB call" {
		t.Errorf("per request: %s", got)
	}
}

func TestRoutesUsageMinus(t *testing.T) {
	before := routesUsage{RCU: 1, WCU: 2, Calls: map[string]int{"GetItem": 1}, Failed: 1}
	after := routesUsage{RCU: 1.5, WCU: 5, IndexWCU: 2, Calls: map[string]int{"GetItem": 1, "PutItem": 3}, Failed: 1}
	d := after.Minus(before)
	if d.RCU != 0.5 || d.WCU != 3 || d.IndexWCU != 2 || d.Failed != 0 || len(d.Calls) != 1 || d.Calls["PutItem"] != 3 {
		t.Errorf("difference: %+v", d)
	}
}

// Workers run every index once; with a time limit they stop starting new
// ones past the minimum; the first error stops them.
func TestRoutesWorkers(t *testing.T) {
	ctx := context.Background()
	var seen [100]atomic.Int32
	if err := routesWorkers(ctx, 100, 8, 0, time.Time{}, func(_ context.Context, i int) error { seen[i].Add(1); return nil }); err != nil {
		t.Fatal(err)
	}
	for i := range seen {
		if n := seen[i].Load(); n != 1 {
			t.Fatalf("index %d ran %d times", i, n)
		}
	}

	var ran atomic.Int64
	err := routesWorkers(ctx, 1_000_000, 4, 20, time.Now(), func(context.Context, int) error { ran.Add(1); return nil })
	if err != nil || ran.Load() < 20 || ran.Load() > 20+4 {
		t.Errorf("past its time limit: %d runs (want the minimum, 20, give or take the workers), %v", ran.Load(), err)
	}

	boom := errors.New("boom")
	ran.Store(0)
	err = routesWorkers(ctx, 1_000_000, 4, 0, time.Time{}, func(_ context.Context, i int) error {
		ran.Add(1)
		if i == 10 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) || ran.Load() > 1000 {
		t.Errorf("after an error: %v, %d runs", err, ran.Load())
	}

	took, err := routesTimed(ctx, 50, routesPhase{Concurrency: 4, Min: 10, For: time.Nanosecond}, func(context.Context, int) error { return nil })
	if err != nil || len(took) < 10 || len(took) > 14 {
		t.Errorf("timed: %d latencies, %v", len(took), err)
	}
}

// The mix is 80% reads, and every removal follows the favorite it
// removes, by the same player.
func TestRoutesMix(t *testing.T) {
	reads, favorites := 0, map[string]string{}
	for i := range 1000 {
		c := routesMixCall(i)
		if routesMixRead(i) != (c.Route.Method == "GET") {
			t.Fatalf("request %d (%s) is counted as a read: %v", i, c.Route.Key(), routesMixRead(i))
		}
		if routesMixRead(i) {
			reads++
		}
		switch c.Route.Key() {
		case routes.FavoriteGame.Key():
			favorites[c.Path] = c.Sub
		case routes.UnfavoriteGame.Key():
			if sub, ok := favorites[c.Path]; !ok || sub != c.Sub {
				t.Fatalf("request %d removes %s by %s, favorited by %q", i, c.Path, c.Sub, sub)
			}
		}
	}
	if reads != 800 {
		t.Errorf("%d reads in 1000", reads)
	}
	if !strings.Contains(routesMixCall(0).Path, "game_ids=lat-g000,lat-g001") {
		t.Errorf("status path: %s", routesMixCall(0).Path)
	}
}
