package main

import (
	"context"
	"testing"
)

// A daily board played for a few days on the stack's clock keeps Redis
// bounded: after each close only the closed day waits in Redis (the day
// before it has left by the stack's clock, though its Redis expiry is a
// day away), every day is archived, and memory after the last day is
// within 1.2× of memory after the first two.
func TestAgeingKeepsRedisBounded(t *testing.T) {
	ctx := context.Background()
	env := testEnv(t)
	plan := ageingPlan{Players: 400, Active: 200, Days: 4}
	r, err := ageingSimulate(ctx, env, plan, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range r.Days {
		if len(d.Periods) > 1 {
			t.Errorf("after day %d Redis holds periods %v, want the closed day alone", d.Day, d.Periods)
		}
		t.Logf("day %d: used_memory +%d B, periods %v", d.Day, d.Used, d.Periods)
	}
	if r.Archived != plan.Days || r.ArchivedMembers != plan.Days*plan.Active {
		t.Errorf("%d days archived with %d members, want %d with %d", r.Archived, r.ArchivedMembers, plan.Days, plan.Days*plan.Active)
	}
	// A board this small is a few tens of KiB beside the clients' buffers,
	// which come and go by about 20 KiB: the first days' larger reading
	// is the reference.
	if early, last := max(r.day(1).Used, r.day(2).Used), r.day(plan.Days).Used; float64(last) > 1.2*float64(early) {
		t.Errorf("used_memory after day %d is %d B over the start, after days 1 and 2 up to %d B: more than 1.2×", plan.Days, last, early)
	}
	t.Logf("took %s", r.Took)
}
