package main

import (
	"context"
	"testing"
)

// The erasure section's measure at a small size: a player erased among
// 200 and one with the same footprint among 2,000 others cost the same
// capacity on every table but Counters (where it waits for the counter
// processor), within the section's goal.
func TestErasureCostsTheSameAmongFewAndManyPlayers(t *testing.T) {
	ctx := context.Background()
	env := testEnv(t)
	few, err := erasureMeasure(ctx, env, 200, 1, "few")
	if err != nil {
		t.Fatal(err)
	}
	many, err := erasureMeasure(ctx, env, 2_000, 1, "many")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range erasureRows(few, many) {
		t.Logf("%s: %s %s (%s)", r.Name, number(r.Value), r.Unit, r.Note)
		if r.Value == 0 && r.Unit == "WCU" {
			t.Errorf("%s: nothing written", r.Name)
		}
		if r.Met != nil && !*r.Met {
			t.Errorf("%s: %.1f %s, %.2f× the erasure among %d", r.Name, r.Value, r.Unit, r.Ratio(), few.others)
		}
	}
}
