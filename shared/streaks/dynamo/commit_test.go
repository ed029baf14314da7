package dynamo_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"

	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/schema"
	"github.com/rallyhq/rally/shared/streaks"
	"github.com/rallyhq/rally/shared/streaks/dynamo"
)

// storedEvent is an evt# item as the Activity table holds it.
type storedEvent struct {
	EventID          string `dynamodbav:"event_id"`
	EventType        string `dynamodbav:"event_type"`
	Source           string `dynamodbav:"source"`
	OccurredAt       string `dynamodbav:"occurred_at"`
	Date             string `dynamodbav:"date"`
	Points           int64  `dynamodbav:"points"`
	Timezone         string `dynamodbav:"timezone"`
	RejectedTimezone string `dynamodbav:"rejected_timezone"`
	ExpiresAt        int64  `dynamodbav:"expires_at"`
}

// storedIndex is the index part of a Streaks item.
type storedIndex struct {
	BreaksAt int64  `dynamodbav:"breaks_at"`
	LivePK   string `dynamodbav:"live_pk"`
	RegionPK string `dynamodbav:"region_live_pk"`
	LiveSK   string `dynamodbav:"live_sk"`
}

// A player's activities across zone changes (two accepted, one refused)
// and a region move read back exactly: the streak, each day, each receipt,
// each event, the history, and the index attributes that place the streak
// on the boards.
func TestCommitReadsBackEveryField(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newRig(t)
	const user = "ada"
	at := time.Date(year, 3, 9, 21, 15, 30, 123_000_000, time.UTC)
	steps := []struct {
		key, region, zone string
		typ               streaks.EventType
		at                time.Time
	}{
		{"k1", "eu", "Europe/Berlin", streaks.DailyOpen, at},
		{"k2", "eu", "Europe/Berlin", streaks.MatchWon, at.Add(3 * time.Hour)},              // the next Berlin day
		{"k3", "eu", "America/New_York", streaks.MatchPlayed, at.Add(20 * time.Hour)},       // change 1
		{"k4", "na", "Pacific/Kiritimati", streaks.SocialShare, at.Add(26 * time.Hour)},     // change 2, region move
		{"k5", "na", "Pacific/Pago_Pago", streaks.LevelCompleted, at.Add(50 * time.Hour)},   // refused: a third change in 7 days
		{"k6", "", "Pacific/Pago_Pago", streaks.LevelCompleted, at.Add(50*time.Hour + 1e6)}, // same day, leaves the region
	}
	days := map[string]streaks.Day{}
	everIn := map[string]bool{}
	for _, st := range steps {
		c := r.record(t, user, st.key, st.region, streaks.Activity{Type: st.typ, Source: streaks.Web, Timezone: st.zone, At: st.at})
		days[c.Day.Date] = c.Day

		equal(t, "state after "+st.key, r.mustGet(t, user), stored(c.Next))
		day, err := r.store.Day(ctx, user, c.Day.Date)
		if err != nil {
			t.Fatal(err)
		}
		equal(t, "day after "+st.key, day, c.Day)
		rep, ok, err := r.store.Replay(ctx, user, st.key)
		if err != nil || !ok {
			t.Fatalf("replay %s: ok=%v err=%v", st.key, ok, err)
		}
		equal(t, "replay of "+st.key, rep, streaks.Replay{Hash: c.Hash, Response: c.Response})

		var ev storedEvent
		if err := attributevalue.UnmarshalMap(r.rawItem(t, schema.Activity, activityKey(user, dynamo.EventSK(c.Event))), &ev); err != nil {
			t.Fatal(err)
		}
		equal(t, "event of "+st.key, ev, storedEvent{
			EventID: c.Event.ID, EventType: string(c.Event.Type), Source: string(c.Event.Source),
			OccurredAt: ddb.FormatTime(c.Event.OccurredAt), Date: c.Event.Date, Points: c.Event.Points,
			Timezone: c.Event.Timezone, RejectedTimezone: c.Event.RejectedTimezone,
			ExpiresAt: c.Event.OccurredAt.Add(90 * 24 * time.Hour).Unix(),
		})

		raw := r.rawItem(t, schema.Streaks, streakKey(user))
		var idx storedIndex
		if err := attributevalue.UnmarshalMap(raw, &idx); err != nil {
			t.Fatal(err)
		}
		want := storedIndex{
			BreaksAt: c.Next.BreaksAt().UnixMilli(),
			LivePK:   dynamo.LivePartition(c.Next.LastDate, dynamo.ShardOf(user)),
			LiveSK:   dynamo.LiveSortKey(c.Next.Current, c.Next.ReachedAt, user),
		}
		if st.region != "" {
			want.RegionPK = dynamo.RegionPartition(st.region, c.Next.LastDate, dynamo.ShardOf(user))
		}
		equal(t, "index attributes after "+st.key, idx, want)
		if _, ok := raw["region"]; ok != (st.region != "") {
			t.Fatalf("after %s: region attribute present=%v, region %q", st.key, ok, st.region)
		}
		// The regions set keeps every region the streak was ever in, for
		// erasure to clear their boards.
		if st.region != "" {
			everIn[st.region] = true
		}
		var kept struct {
			Regions []string `dynamodbav:"regions,stringset"`
		}
		if err := attributevalue.UnmarshalMap(raw, &kept); err != nil {
			t.Fatal(err)
		}
		slices.Sort(kept.Regions)
		equal(t, "regions after "+st.key, kept.Regions, slices.Sorted(maps.Keys(everIn)))
	}

	final := r.mustGet(t, user)
	if len(final.TZChanges) != 2 || final.TZRejected != 2 || final.Timezone != "Pacific/Kiritimati" || final.Current < 2 {
		t.Fatalf("the steps did not exercise zone changes and a refusal: %+v", final)
	}
	key := r.rawItem(t, schema.Activity, activityKey(user, dynamo.KeySK("k1")))
	var keyTimes struct {
		CreatedAt string `dynamodbav:"created_at"`
		ExpiresAt int64  `dynamodbav:"expires_at"`
	}
	if err := attributevalue.UnmarshalMap(key, &keyTimes); err != nil {
		t.Fatal(err)
	}
	equal(t, "idempotency record times", keyTimes, struct {
		CreatedAt string `dynamodbav:"created_at"`
		ExpiresAt int64  `dynamodbav:"expires_at"`
	}{ddb.FormatTime(t0), t0.Add(24 * time.Hour).Unix()})

	var dates []string
	for d := range days {
		dates = append(dates, d)
	}
	slices.Sort(dates)
	history, err := r.store.History(ctx, user, dates[0], dates[len(dates)-1])
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(history, func(a, b streaks.Day) int { return strings.Compare(a.Date, b.Date) })
	want := make([]streaks.Day, len(dates))
	for i, d := range dates {
		want[i] = days[d]
	}
	equal(t, "history", history, want)
	inner, err := r.store.History(ctx, user, dates[1], dates[1])
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "one day of history", inner, want[1:2])
}

// A player with no activity has no state, empty days, no keys and no
// history; none of that is an error.
func TestReadsOfANewPlayerAreEmpty(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newRig(t)
	if st, ok, err := r.store.Get(ctx, "nobody"); err != nil || ok {
		t.Fatalf("get: %+v ok=%v err=%v", st, ok, err)
	}
	day, err := r.store.Day(ctx, "nobody", "2026-03-10")
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "day", day, streaks.Day{Date: "2026-03-10", ByType: map[streaks.EventType]int64{}})
	if rep, ok, err := r.store.Replay(ctx, "nobody", "k"); err != nil || ok {
		t.Fatalf("replay: %+v ok=%v err=%v", rep, ok, err)
	}
	history, err := r.store.History(ctx, "nobody", "2026-01-01", "2026-03-10")
	if err != nil || len(history) != 0 {
		t.Fatalf("history: %+v err=%v", history, err)
	}
}

// A commit prepared from a stale read changes nothing: another activity
// won, and the loser must read again.
func TestStaleCommitConflictsAndWritesNothing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		stale func(cur streaks.State) streaks.State
	}{
		{"read before the first activity", func(streaks.State) streaks.State { return streaks.State{UserID: "bo"} }},
		{"read an older version", func(cur streaks.State) streaks.State { cur.Version--; return cur }},
		{"version from the future", func(cur streaks.State) streaks.State { cur.Version += 5; return cur }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			r := newRig(t)
			at := time.Date(year, 3, 10, 8, 0, 0, 0, time.UTC)
			r.record(t, "bo", "k1", "", streaks.Activity{Type: streaks.DailyOpen, Source: streaks.MobileApp, At: at})
			second := r.record(t, "bo", "k2", "", streaks.Activity{Type: streaks.DailyOpen, Source: streaks.MobileApp, At: at.Add(24 * time.Hour)})
			before := r.mustGet(t, "bo")

			// The stale commit is dated a day later still, so its day item
			// would be a new one.
			c := r.prepare(t, "bo", "k3", "eu", streaks.Activity{Type: streaks.MatchWon, Source: streaks.Web, At: at.Add(48 * time.Hour)})
			c.Prev = tc.stale(second.Next)
			c.Next.Version = c.Prev.Version + 1
			if err := r.store.Commit(ctx, c); !errors.Is(err, streaks.ErrConflict) {
				t.Fatalf("stale commit: %v, want ErrConflict", err)
			}
			equal(t, "state", r.mustGet(t, "bo"), before)
			equal(t, "activity items", r.activityKinds(t, "bo"), map[string]int{"evt": 2, "day": 2, "idem": 2})
			if _, ok, _ := r.store.Replay(ctx, "bo", "k3"); ok {
				t.Fatal("the stale commit's key was recorded")
			}
			if r.rawItem(t, schema.Activity, activityKey("bo", dynamo.DaySK(c.Day.Date))) != nil {
				t.Fatal("the stale commit's day was recorded")
			}
		})
	}
}

// A key that was already committed answers ErrKeyUsed, whatever the
// version, and the repeat writes nothing.
func TestUsedKeyWritesNothing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		stale bool
	}{{"current version", false}, {"stale version too", true}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			r := newRig(t)
			at := time.Date(year, 3, 10, 8, 0, 0, 0, time.UTC)
			first := r.record(t, "cy", "k1", "", streaks.Activity{Type: streaks.DailyOpen, Source: streaks.MobileApp, At: at})
			before := r.mustGet(t, "cy")

			c := r.prepare(t, "cy", "k1", "", streaks.Activity{Type: streaks.MatchWon, Source: streaks.Web, At: at.Add(24 * time.Hour)})
			c.Hash, c.Response = "another body", []byte(`{"other":true}`)
			if tc.stale {
				c.Prev.Version, c.Next.Version = 7, 8
			}
			if err := r.store.Commit(ctx, c); !errors.Is(err, streaks.ErrKeyUsed) {
				t.Fatalf("repeated key: %v, want ErrKeyUsed", err)
			}
			equal(t, "state", r.mustGet(t, "cy"), before)
			equal(t, "activity items", r.activityKinds(t, "cy"), map[string]int{"evt": 1, "day": 1, "idem": 1})
			rep, ok, err := r.store.Replay(ctx, "cy", "k1")
			if err != nil || !ok {
				t.Fatalf("replay: ok=%v err=%v", ok, err)
			}
			equal(t, "replay", rep, streaks.Replay{Hash: first.Hash, Response: first.Response})
		})
	}
}

// Twenty activities of one player prepared from the same read race: one
// commits, every other is told to read again, and only the winner's items
// exist.
func TestOnlyOneOfRacingCommitsWins(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		prior int // activities before the race
	}{{"first activity", 0}, {"later activity", 2}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			r := newRig(t)
			at := time.Date(year, 3, 10, 8, 0, 0, 0, time.UTC)
			for i := range tc.prior {
				r.record(t, "dee", fmt.Sprintf("prior%d", i), "", streaks.Activity{Type: streaks.MatchPlayed, Source: streaks.Web, At: at.Add(time.Duration(i) * time.Minute)})
			}
			commits := make([]streaks.Commit, 20)
			for i := range commits {
				commits[i] = r.prepare(t, "dee", fmt.Sprintf("race%d", i), "", streaks.Activity{
					Type: streaks.MatchPlayed, Source: streaks.Web, At: at.Add(time.Hour + time.Duration(i)*time.Millisecond),
				})
			}
			results := make([]error, len(commits))
			var wg sync.WaitGroup
			for i, c := range commits {
				wg.Go(func() { results[i] = r.store.Commit(ctx, c) })
			}
			wg.Wait()
			winner := -1
			for i, err := range results {
				switch {
				case err == nil && winner >= 0:
					t.Fatalf("commits %d and %d both won", winner, i)
				case err == nil:
					winner = i
				case !errors.Is(err, streaks.ErrConflict):
					t.Fatalf("commit %d: %v, want ErrConflict", i, err)
				}
			}
			if winner < 0 {
				t.Fatal("no commit won")
			}
			equal(t, "state", r.mustGet(t, "dee"), stored(commits[winner].Next))
			equal(t, "activity items", r.activityKinds(t, "dee"), map[string]int{"evt": tc.prior + 1, "day": 1, "idem": tc.prior + 1})
			for i := range commits {
				_, ok, err := r.store.Replay(ctx, "dee", commits[i].Key)
				if err != nil || ok != (i == winner) {
					t.Fatalf("key of commit %d: recorded=%v err=%v (winner %d)", i, ok, err, winner)
				}
			}
		})
	}
}

// Operations report the capacity they consumed, for the cost dashboards.
func TestCapacityIsReported(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newRig(t)
	at := time.Date(year, 3, 10, 8, 0, 0, 0, time.UTC)
	r.record(t, "eve", "k1", "eu", streaks.Activity{Type: streaks.DailyOpen, Source: streaks.Web, At: at})
	if _, _, err := r.store.Replay(ctx, "eve", "k1"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.store.History(ctx, "eve", streaks.AddDays(at.Format(streaks.DateLayout), -9), at.Format(streaks.DateLayout)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.store.Top(ctx, "", 10, at); err != nil {
		t.Fatal(err)
	}
	if err := r.store.Live(ctx, at, func([]streaks.State) error { return nil }); err != nil {
		t.Fatal(err)
	}
	for _, op := range []string{"get", "day", "commit", "replay", "history", "top", "live"} {
		if r.units.of(op) <= 0 {
			t.Errorf("%s reported %v capacity units", op, r.units.of(op))
		}
	}
}
