package main

import (
	"math"
	"testing"
	"time"

	"github.com/rallyhq/rally/infra/cost"
	"github.com/rallyhq/rally/shared/routes"
)

func TestCostECPU(t *testing.T) {
	for _, c := range []struct {
		name                                     string
		commands, scripts, micros, perGET, bytes float64
		want                                     float64
	}{
		// 5 plain commands of small replies: 1 each.
		{"plain commands", 5, 0, 0, 10, 2048, 5},
		// 4 commands, 2 of them scripts taking 60 µs of a 10 µs GET: 2 + 6.
		{"scripts weighted by their vCPU", 4, 2, 60, 10, 1024, 8},
		// a script faster than a GET still costs 1: 1 + max(1, 0.5).
		{"a script at least 1", 2, 1, 5, 10, 0, 2},
		// 2 commands moving 10 KiB: the bytes win.
		{"bytes win", 2, 0, 0, 10, 10 * 1024, 10},
	} {
		if got := costECPU(c.commands, c.scripts, c.micros, c.perGET, c.bytes); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("%s: %v ECPU, want %v", c.name, got, c.want)
		}
	}
}

func TestCostBilledRoundsEachInvocationUp(t *testing.T) {
	// 0.2 ms → 1, 1 ms → 1, 1.01 ms → 2, 7.5 ms → 8: (1+1+2+8)/4 = 3.
	took := []time.Duration{200 * time.Microsecond, time.Millisecond, 1010 * time.Microsecond, 7500 * time.Microsecond}
	if got := costBilled(took); got != 3 {
		t.Errorf("billed %v ms, want 3", got)
	}
}

func TestCostInvocationsLeaveTicksOut(t *testing.T) {
	inv := &costInvocations{by: map[string]costDuration{}}
	inv.add(routes.CounterProcessor.Function, 0, 5*time.Millisecond) // a tick
	inv.add(routes.CounterProcessor.Function, 3, 2500*time.Microsecond)
	inv.add(routes.FavoriteGame.Function, 0, 400*time.Microsecond)
	got := inv.snapshot()
	if d := got[routes.CounterProcessor.Function]; d.invocations != 1 || d.records != 3 || d.billed != 3 {
		t.Errorf("counter processor %+v, want one batch of 3 records billed 3 ms", d)
	}
	if d := got[routes.FavoriteGame.Function]; d.invocations != 1 || d.billed != 1 {
		t.Errorf("route %+v, want one invocation billed 1 ms", d)
	}
}

func TestCostFunctionsNameEachOnce(t *testing.T) {
	seen := map[string]bool{}
	for _, f := range costFunctions(routes.FavoriteGame.Function) {
		if seen[f] {
			t.Errorf("%s twice", f)
		}
		seen[f] = true
	}
	if !seen["analytics-shipper"] || !seen[routes.FavoriteGame.Function] {
		t.Errorf("functions %v lack the route's or the shipper", seen)
	}
}

// Every route the capacity section measures has a cost floor, and every
// route a seed's month needs is measured.
func TestCostCoversTheSeedsRoutes(t *testing.T) {
	measured := map[string]bool{}
	for _, r := range routesCapacityRoutes() {
		measured[r.load.name] = true
		if _, ok := costFloor[r.load.name]; !ok {
			t.Errorf("%s has no cost floor", r.load.name)
		}
	}
	for _, s := range cost.Seeds() {
		for _, l := range s.Loads {
			if !measured[l.Route] {
				t.Errorf("seed %s needs %q, which is not measured", s.Name, l.Route)
			}
		}
	}
}

func TestCostMoney(t *testing.T) {
	for v, want := range map[float64]string{0: "$0", 0.0123: "$0.012", 1.234: "$1.23", 12.6: "$13", 1234567.4: "$1,234,567"} {
		if got := costMoney(v); got != want {
			t.Errorf("costMoney(%v) = %q, want %q", v, got, want)
		}
	}
}
