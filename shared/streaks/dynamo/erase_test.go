package dynamo_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/schema"
	"github.com/rallyhq/rally/shared/streaks"
	"github.com/rallyhq/rally/shared/streaks/dynamo"
)

func TestErasePlayerDeletesTheStreakAndEveryActivityItem(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newRig(t)
	eraser := &dynamo.Store{DB: &testenv.SmallPages{Client: r.db}, Streaks: r.names.Of(schema.Streaks), Activity: r.names.Of(schema.Activity), Clock: clock.Fixed(t0)}
	const ann, bob = "erased-ann", "kept-bob"
	at := time.Date(year, 3, 10, 8, 0, 0, 0, time.UTC)
	for i := range 5 {
		r.record(t, ann, fmt.Sprintf("k%d", i), "eu", streaks.Activity{Type: streaks.DailyOpen, Source: streaks.Web, At: at.Add(time.Duration(i) * 24 * time.Hour)})
	}
	for i := range 2 {
		r.record(t, bob, fmt.Sprintf("k%d", i), "eu", streaks.Activity{Type: streaks.DailyOpen, Source: streaks.Web, At: at.Add(time.Duration(i) * 24 * time.Hour)})
	}
	equal(t, "the player's activity items", r.activityKinds(t, ann), map[string]int{"evt": 5, "day": 5, "idem": 5})
	bobState, bobItems := r.mustGet(t, bob), r.activityKinds(t, bob)
	// An activity read before the erasure and committed after it.
	late := r.prepare(t, ann, "k-late", "eu", streaks.Activity{Type: streaks.MatchWon, Source: streaks.Web, At: at.Add(100 * time.Hour)})

	for run := 1; run <= 2; run++ {
		if err := eraser.ErasePlayer(ctx, ann); err != nil {
			t.Fatalf("erasure %d: %v", run, err)
		}
		if _, ok, err := r.store.Get(ctx, ann); ok || err != nil {
			t.Fatalf("erasure %d: the streak is still there (%v)", run, err)
		}
		if r.rawItem(t, schema.Streaks, streakKey(ann)) != nil {
			t.Fatalf("erasure %d: the streak item is still there", run)
		}
		equal(t, fmt.Sprintf("erasure %d: the player's activity items", run), r.activityKinds(t, ann), map[string]int{})
		equal(t, fmt.Sprintf("erasure %d: another player's streak", run), r.mustGet(t, bob), bobState)
		equal(t, fmt.Sprintf("erasure %d: another player's activity items", run), r.activityKinds(t, bob), bobItems)
	}

	if err := r.store.Commit(ctx, late); !errors.Is(err, streaks.ErrConflict) {
		t.Fatalf("an activity read before the erasure: %v, want ErrConflict", err)
	}
	equal(t, "activity items after the late commit", r.activityKinds(t, ann), map[string]int{})
	// The player starts again from nothing; their old keys are free.
	c := r.record(t, ann, "k0", "eu", streaks.Activity{Type: streaks.DailyOpen, Source: streaks.Web, At: at.Add(120 * time.Hour)})
	if c.Prev.Version != 0 || c.Next.TotalPoints != c.Event.Points {
		t.Fatalf("after erasure the player restarted from %+v", c.Prev)
	}
}
