package mirror_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/shared/streaks"
	"github.com/rallyhq/rally/shared/streaks/mirror"
)

// An erased player leaves nothing in Redis that holds their id: not the
// cached streak, not a deadline, not an entry, lookup or tombstone on the
// global board or on any region board they were on, including the one a
// move took them off. A player whose record predates the regions set
// still leaves the boards their deadlines name. Everyone else stays.
func TestAnErasureLeavesNoTraceOfThePlayer(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	const who, legacy = "erase.me:7", "legacy.8"
	put := func(st streaks.State, prev string) {
		t.Helper()
		st.PrevRegion = prev
		if err := e.m.Put(ctx, st); err != nil {
			t.Fatal(err)
		}
	}
	put(state(who, 1, 1, "2026-05-01", "eu"), "")
	put(state(who, 2, 2, "2026-05-02", "eu"), "")
	put(state(who, 3, 3, "2026-05-03", "na"), "eu") // a move leaves a tombstone on eu
	put(state(legacy, 1, 1, "2026-05-02", "apac"), "")
	put(state(legacy, 2, 2, "2026-05-03", "eu"), "apac")
	put(state("ann", 1, 4, "2026-05-03", "eu"), "")
	put(state("bo", 1, 2, "2026-05-03", "na"), "")
	if _, err := e.m.Sweep(ctx, time.Date(2026, 5, 3, 0, 30, 0, 0, time.UTC)); err != nil { // who's version 1 broke
		t.Fatal(err)
	}
	for _, id := range []string{who, legacy} {
		if len(testenv.RedisTraces(t, e.rdb, id)) == 0 {
			t.Fatalf("%s left no trace to erase", id)
		}
	}

	// The erasures as the stream decodes them: the last state, Removed,
	// with the regions the record kept (none before the set existed).
	erased := state(who, 3, 3, "2026-05-03", "na")
	erased.Removed, erased.Regions = true, []string{"eu", "na"}
	erasedLegacy := state(legacy, 2, 2, "2026-05-03", "eu")
	erasedLegacy.Removed = true
	if err := e.m.Put(ctx, erased, erasedLegacy); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{who, legacy} {
		if found := testenv.RedisTraces(t, e.rdb, id); len(found) > 0 {
			t.Fatalf("after erasure Redis still holds %s:\n%s", id, strings.Join(found, "\n"))
		}
	}

	now := at("2026-05-03")
	for region, want := range map[string]string{"": "ann:4 bo:2", "eu": "ann:4", "na": "bo:2", "apac": ""} {
		if got := users(t, e, region, now); got != want {
			t.Fatalf("board %q after erasure: %q, want %q", region, got, want)
		}
	}
	if st, ok, err := e.m.Cached(ctx, "ann"); err != nil || !ok || st.Current != 4 {
		t.Fatalf("ann's cached streak after another's erasure: %+v, %v, %v", st, ok, err)
	}
	if n, _ := e.rdb.ZCard(ctx, mirror.DeadlinesKey).Result(); n != 2 {
		t.Fatalf("%d deadlines left, want ann's and bo's", n)
	}
	// Their streaks still break on time.
	if got := users(t, e, "", at("2026-05-06")); got != "" {
		t.Fatalf("global board three days on: %q", got)
	}
}
