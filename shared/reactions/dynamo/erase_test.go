package dynamo_test

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/shared/reactions"
	"github.com/rallyhq/rally/shared/reactions/dynamo"
	"github.com/rallyhq/rally/shared/schema"
)

func TestEraseUserDeletesEveryEdgeAndItsDeletionCountsOnce(t *testing.T) {
	ctx := context.Background()
	client, names, _ := testenv.DynamoDB(t)
	edges := &dynamo.Edges{DB: &testenv.SmallPages{Client: client}, Table: names.Of(schema.Reactions)}
	counts := &dynamo.Counts{DB: &testenv.SmallPages{Client: client}, Table: names.Of(schema.Counters)}
	// Markers and trending buckets expire relative to the time applied, so
	// the test counts now, not at a fixed date.
	now := time.Now().UTC().Truncate(time.Millisecond)
	const ann, bob = "erased-ann", "kept-bob"
	ref := func(user string, kind reactions.Kind, target string) reactions.Ref {
		return reactions.Ref{UserID: user, Kind: kind, TargetID: target}
	}

	// Build each edge's history through the store and count it, as the
	// counter processor would.
	var history []reactions.Change
	step := func(r reactions.Ref, add bool) {
		t.Helper()
		var e reactions.Edge
		var changed bool
		var err error
		if add {
			e, changed, err = edges.Add(ctx, r, now, reactions.InTrending)
		} else {
			e, changed, err = edges.Remove(ctx, r, now)
		}
		if err != nil || !changed {
			t.Fatalf("%s (add=%v): changed=%v err=%v", r, add, changed, err)
		}
		delta := 1
		if !add {
			delta = -1
		}
		c := reactions.Change{Ref: r, Version: e.Version, Active: e.Active(), Delta: delta, At: now, Trend: true}
		if c.Active {
			c.Since = now
		}
		history = append(history, c)
	}
	step(ref(ann, reactions.Favorite, "g1"), true)
	step(ref(ann, reactions.Favorite, "g2"), true)
	step(ref(ann, reactions.Favorite, "g2"), false)
	for _, add := range []bool{true, false, true} {
		step(ref(ann, reactions.Favorite, "g3"), add)
	}
	for _, g := range []string{"g4", "g5", "g6"} {
		step(ref(ann, reactions.Favorite, g), true)
	}
	step(ref(ann, reactions.Like, "p1"), true)
	step(ref(bob, reactions.Favorite, "g1"), true)
	step(ref(bob, reactions.Like, "p1"), true)
	if _, err := counts.Apply(ctx, history, now, nil); err != nil {
		t.Fatal(err)
	}
	countOf := func(kind reactions.Kind, target string) int64 {
		t.Helper()
		n, err := counts.Count(ctx, reactions.Target{Kind: kind, ID: target})
		if err != nil {
			t.Fatal(err)
		}
		return n.N
	}
	type target struct {
		kind reactions.Kind
		id   string
	}
	wantCounts := func(when string, want map[target]int64) {
		t.Helper()
		for tg, n := range want {
			if got := countOf(tg.kind, tg.id); got != n {
				t.Fatalf("%s: %s %s counts %d, want %d", when, tg.kind, tg.id, got, n)
			}
		}
	}
	wantCounts("before erasure", map[target]int64{
		{reactions.Favorite, "g1"}: 2, {reactions.Favorite, "g2"}: 0, {reactions.Favorite, "g3"}: 1,
		{reactions.Favorite, "g4"}: 1, {reactions.Like, "p1"}: 2,
	})

	// Each page's versions are announced before anything on it is deleted.
	announced := map[reactions.Ref]int64{}
	deleted, err := edges.EraseUser(ctx, ann, func(page map[reactions.Ref]int64) error {
		for r, v := range page {
			if got, err := edges.Get(ctx, r.UserID, r.Kind, []string{r.TargetID}); err != nil || got[r.TargetID].Version == 0 {
				return fmt.Errorf("%v was deleted before it was announced (%v)", r, err)
			}
			announced[r] = v
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(announced, deleted) {
		t.Fatalf("announced %v, deleted %v", announced, deleted)
	}
	// One past each edge's last version, whatever its state.
	want := map[reactions.Ref]int64{
		ref(ann, reactions.Favorite, "g1"): 2, ref(ann, reactions.Favorite, "g2"): 3, ref(ann, reactions.Favorite, "g3"): 4,
		ref(ann, reactions.Favorite, "g4"): 2, ref(ann, reactions.Favorite, "g5"): 2, ref(ann, reactions.Favorite, "g6"): 2,
		ref(ann, reactions.Like, "p1"): 2,
	}
	if !maps.Equal(deleted, want) {
		t.Fatalf("deleted edges %v, want %v", deleted, want)
	}
	for _, kind := range reactions.Kinds() {
		got, err := edges.Get(ctx, ann, kind, []string{"g1", "g2", "g3", "g4", "g5", "g6", "p1"})
		if err != nil {
			t.Fatal(err)
		}
		for tg, e := range got {
			if e.Version != 0 || e.Active() {
				t.Fatalf("the %s edge to %s survived: %+v", kind, tg, e)
			}
		}
	}
	if got, err := edges.Get(ctx, bob, reactions.Favorite, []string{"g1"}); err != nil || !got["g1"].Active() || got["g1"].Version != 1 {
		t.Fatalf("another user's edge: %+v %v, want it kept", got, err)
	}

	// The caller counts the deletions; the stream may deliver them too.
	wasActive := map[string]bool{"g1": true, "g3": true, "g4": true, "g5": true, "g6": true, "p1": true}
	var deletions []reactions.Change
	for r, v := range deleted {
		c := reactions.Change{Ref: r, Version: v, Active: false, At: now, Deleted: true}
		if wasActive[r.TargetID] {
			c.Delta = -1
		}
		deletions = append(deletions, c)
	}
	afterErasure := map[target]int64{
		{reactions.Favorite, "g1"}: 1, {reactions.Favorite, "g2"}: 0, {reactions.Favorite, "g3"}: 0,
		{reactions.Favorite, "g4"}: 0, {reactions.Favorite, "g5"}: 0, {reactions.Favorite, "g6"}: 0, {reactions.Like, "p1"}: 1,
	}
	// Counting a deletion deletes its edge's marker: the erased user is
	// left none, and a second delivery finds nothing to do.
	for i, wantApplied := range []int{len(deletions), 0} {
		n, err := counts.Apply(ctx, deletions, now, nil)
		if err != nil || n != wantApplied {
			t.Fatalf("delivery %d of the deletions applied %d (%v), want %d", i+1, n, err, wantApplied)
		}
		wantCounts(fmt.Sprintf("after delivery %d of the deletions", i+1), afterErasure)
		if markers, err := counts.Markers(ctx, ann); err != nil || len(markers) != 0 {
			t.Fatalf("markers after delivery %d: %v (%v), want none", i+1, markers, err)
		}
	}
	bobs := map[reactions.Ref]int64{ref(bob, reactions.Favorite, "g1"): 1, ref(bob, reactions.Like, "p1"): 1}
	if got, err := counts.Markers(ctx, bob); err != nil || !maps.Equal(got, bobs) {
		t.Fatalf("another user's markers %v (%v), want %v", got, err, bobs)
	}

	if again, err := edges.EraseUser(ctx, ann, nil); err != nil || len(again) != 0 {
		t.Fatalf("a second erasure found %v (%v), want nothing", again, err)
	}
	if n, err := counts.ForgetUser(ctx, ann); err != nil || n != 0 {
		t.Fatalf("forgetting again removed %d markers (%v), want 0", n, err)
	}
	if got, err := counts.Markers(ctx, bob); err != nil || !maps.Equal(got, bobs) {
		t.Fatalf("another user's markers after forgetting %v (%v), want %v", got, err, bobs)
	}
	wantCounts("after forgetting", afterErasure)
}
