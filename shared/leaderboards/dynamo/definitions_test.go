package dynamo_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rallyhq/rally/shared/errs"
	"github.com/rallyhq/rally/shared/leaderboards"
)

func TestDefinitionsCreateUpdateAndKeepImmutableFields(t *testing.T) {
	ctx := context.Background()
	s := newStores(t)
	d := board("season-1", leaderboards.Best, leaderboards.Desc, leaderboards.Earliest)
	d.Scope = leaderboards.Scope{Game: "g1", Mode: "ranked", Region: "eu"}
	d.Timezone = "Europe/Berlin"

	s.clock.Set(t0)
	got, created, err := s.defs.Put(ctx, d)
	if err != nil || !created || got.Version != 1 || !got.CreatedAt.Equal(t0) || got.Scope != d.Scope || got.Timezone != "Europe/Berlin" {
		t.Fatalf("create: %+v created=%v err=%v", got, created, err)
	}

	later := t0.Add(time.Hour)
	s.clock.Set(later)
	d.Title, d.Status, d.MaxN, d.Scope = "Season one", leaderboards.Frozen, 50, leaderboards.Scope{}
	got, created, err = s.defs.Put(ctx, d)
	if err != nil || created || got.Version != 2 || got.Title != "Season one" || got.Status != leaderboards.Frozen || got.MaxN != 50 ||
		got.Scope != (leaderboards.Scope{}) || !got.CreatedAt.Equal(t0) || !got.UpdatedAt.Equal(later) {
		t.Fatalf("update of mutable fields: %+v created=%v err=%v", got, created, err)
	}

	changed := d
	changed.Policy, changed.Order, changed.Title = leaderboards.Latest, leaderboards.Asc, "renamed too"
	_, _, err = s.defs.Put(ctx, changed)
	var e *errs.Error
	if !errors.As(err, &e) || e.Kind != errs.Conflict {
		t.Fatalf("changing policy and order: %v, want a Conflict", err)
	}
	if !strings.Contains(e.Detail, "policy") || !strings.Contains(e.Detail, "order") || strings.Contains(e.Detail, "tie_break") {
		t.Fatalf("the conflict must name exactly the changed fields: %q", e.Detail)
	}
	var fields []string
	for _, f := range e.Fields {
		fields = append(fields, f.Field)
	}
	if !slices.Equal(fields, []string{"policy", "order"}) {
		t.Fatalf("conflict fields %v", fields)
	}
	for _, field := range []func(*leaderboards.Definition){
		func(d *leaderboards.Definition) { d.Reset = leaderboards.Daily },
		func(d *leaderboards.Definition) { d.TieBreak = leaderboards.Shared },
		func(d *leaderboards.Definition) { d.Timezone = "UTC" },
	} {
		c := d
		field(&c)
		if _, _, err := s.defs.Put(ctx, c); !errs.Is(err, errs.Conflict) {
			t.Fatalf("changing an immutable field of %+v: %v", c, err)
		}
	}

	stored, err := s.defs.Get(ctx, d.ID)
	if err != nil || stored.Version != 2 || stored.Title != "Season one" || stored.Policy != leaderboards.Best {
		t.Fatalf("a refused change wrote something: %+v %v", stored, err)
	}
	if _, err := s.defs.Get(ctx, "nope"); !errs.Is(err, errs.NotFound) || !strings.Contains(err.Error(), "leaderboard nope not found") {
		t.Fatalf("unknown board: %v", err)
	}

	if _, _, err := s.defs.Put(ctx, board("other", leaderboards.Increment, leaderboards.Asc, leaderboards.Shared)); err != nil {
		t.Fatal(err)
	}
	all, err := s.defs.List(ctx)
	if err != nil || len(all) != 2 {
		t.Fatalf("list: %+v %v", all, err)
	}
}

// Concurrent creations of one board: exactly one creates it, the others
// update it, and the version counts every write.
func TestConcurrentPutsOfOneBoardCreateItOnce(t *testing.T) {
	s := newStores(t)
	d := board("race", leaderboards.Best, leaderboards.Desc, leaderboards.Earliest)
	results := make(chan bool, 10)
	for i := 0; i < 10; i++ {
		go func() {
			_, created, err := s.defs.Put(context.Background(), d)
			if err != nil {
				t.Error(err)
			}
			results <- created
		}()
	}
	creations := 0
	for i := 0; i < 10; i++ {
		if <-results {
			creations++
		}
	}
	got, err := s.defs.Get(context.Background(), d.ID)
	if creations != 1 || err != nil || got.Version != 10 {
		t.Fatalf("%d creations, stored %+v %v; want 1 creation and version 10", creations, got, err)
	}
}
