package dynamo_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/rallyhq/rally/shared/streaks"
	"github.com/rallyhq/rally/shared/streaks/internal/streakmodel"
)

// seedStreaks commits n random streaks: players in zones from UTC+14 to
// UTC−12 and in a few regions, last active over the three days up to base
// (so many have broken by base and later), with few distinct lengths and
// reach times so the boards are full of ties.
func seedStreaks(t *testing.T, r rig, n int, base time.Time) []streaks.State {
	t.Helper()
	rng := rand.New(rand.NewPCG(7, 11))
	zones := []string{"", "Pacific/Kiritimati", "Pacific/Pago_Pago", "Etc/GMT+12", "Europe/Berlin", "America/New_York", "Asia/Kolkata"}
	regions := []string{"", "eu", "na", "apac"}
	var reached []time.Time
	for i := range 4 {
		reached = append(reached, base.Add(-10*24*time.Hour+time.Duration(i)*time.Hour+time.Duration(i)*time.Millisecond))
	}
	states := make([]streaks.State, n)
	for i := range states {
		user := fmt.Sprintf("p%03d", i)
		switch i % 5 {
		case 0:
			user = fmt.Sprintf("Q%d", i) // uppercase sorts before lowercase
		case 1:
			user += "-x" // a prefix of another id's byte order
		}
		zone := zones[rng.IntN(len(zones))]
		at := base.Add(-time.Duration(rng.Int64N(int64(3 * 24 * time.Hour)))).Truncate(time.Millisecond)
		cur := 1 + rng.Int64N(5)
		st := streaks.State{
			UserID: user, Current: cur, Longest: cur + rng.Int64N(3), LastDate: streakmodel.Date(at, zone),
			ReachedAt: reached[rng.IntN(len(reached))], Timezone: zone, Region: regions[rng.IntN(len(regions))],
			TotalPoints: rng.Int64N(1000), Version: 1 + rng.Int64N(4), UpdatedAt: at,
		}
		if rng.IntN(4) == 0 {
			st.TZChanges = []time.Time{at.Add(-time.Hour)}
		}
		states[i] = st
	}
	g, ctx := errgroup.WithContext(context.Background())
	g.SetLimit(16)
	for _, st := range states {
		g.Go(func() error {
			return r.store.Commit(ctx, streaks.Commit{
				Key: "seed", Hash: "seed", Prev: streaks.State{UserID: st.UserID}, Next: st,
				Event: streaks.Event{ID: "seed-" + st.UserID, UserID: st.UserID, Type: streaks.DailyOpen, Source: streaks.Web,
					OccurredAt: st.UpdatedAt, Date: st.LastDate, Points: 10, Timezone: st.Timezone},
				Day:      streaks.Day{Date: st.LastDate, Points: 10, Events: 1, ByType: map[streaks.EventType]int64{streaks.DailyOpen: 10}},
				Response: []byte("{}"),
			})
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	return states
}

// bruteTop ranks the streaks live at now the obvious way, by the rules
// written out in streakmodel: live while the player was active today or
// yesterday in their zone; the longer first, then the one reached
// earlier, then the user id.
func bruteTop(states []streaks.State, region string, n int, now time.Time) []streaks.Entry {
	entries := []streaks.Entry{}
	for _, st := range states {
		if (region == "" || st.Region == region) && streakmodel.Live(st.LastDate, st.Timezone, now) {
			entries = append(entries, streaks.Entry{UserID: st.UserID, Streak: st.Current, ReachedAt: st.ReachedAt})
		}
	}
	slices.SortFunc(entries, func(a, b streaks.Entry) int {
		if streakmodel.Ahead(a.Streak, a.ReachedAt, a.UserID, b.Streak, b.ReachedAt, b.UserID) {
			return -1
		}
		return 1
	})
	entries = entries[:min(n, len(entries))]
	for i := range entries {
		entries[i].Rank = i + 1
	}
	return entries
}

// The Redis-less boards are exactly the brute-force ranking of the live
// streaks, globally and per region, as streaks break over the following
// days across every zone (the days around the last Sunday of March, when
// summer time starts in Berlin, included); and a rebuild
// loads exactly the live streaks.
func TestTopAndLiveMatchABruteForceRanking(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	base := time.Date(year, 3, 28, 22, 0, 0, 0, time.UTC)
	states := seedStreaks(t, r, 300, base)

	mixed, most := false, 0
	for _, after := range []time.Duration{0, 3 * time.Hour, 11*time.Hour + 30*time.Minute, 26 * time.Hour, 37 * time.Hour, 50 * time.Hour, 96 * time.Hour} {
		now := base.Add(after)
		live := 0
		for _, st := range states {
			if streakmodel.Live(st.LastDate, st.Timezone, now) {
				live++
			}
		}
		mixed = mixed || (live > len(states)/5 && live < len(states)*4/5)
		most = max(most, live)
		t.Run(fmt.Sprintf("%d live at %s", live, now.Format(time.RFC3339)), func(t *testing.T) {
			t.Parallel()
			checkBoardsAt(t, r, states, now)
		})
	}
	if !mixed {
		t.Fatal("no moment had both many live and many broken streaks; the seed does not test liveness")
	}
	if most <= 100 {
		t.Fatalf("at most %d streaks are live at once; the rebuild is never paged", most)
	}
}

// checkBoardsAt compares every board at now, and the rebuild load, with
// the brute force over the seeded states.
func checkBoardsAt(t *testing.T, r rig, states []streaks.State, now time.Time) {
	t.Helper()
	ctx := context.Background()
	for _, region := range []string{"", "eu", "na", "apac", "mars"} {
		for _, n := range []int{1, 4, 400} {
			got, err := r.store.Top(ctx, region, n, now)
			if err != nil {
				t.Fatal(err)
			}
			equal(t, fmt.Sprintf("top %d in %q at %s", n, region, now.Format(time.RFC3339)), got, bruteTop(states, region, n, now))
		}
	}

	var loaded []streaks.State
	err := r.store.Live(ctx, now, func(page []streaks.State) error {
		if len(page) == 0 || len(page) > 100 {
			t.Fatalf("a page of %d states", len(page))
		}
		loaded = append(loaded, page...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []streaks.State{}
	for _, st := range states {
		if streakmodel.Live(st.LastDate, st.Timezone, now) {
			want = append(want, st)
		}
	}
	slices.SortFunc(want, func(a, b streaks.State) int { return strings.Compare(a.UserID, b.UserID) })
	slices.SortFunc(loaded, func(a, b streaks.State) int { return strings.Compare(a.UserID, b.UserID) })
	if loaded == nil {
		loaded = []streaks.State{}
	}
	equal(t, "live at "+now.Format(time.RFC3339), loaded, want)
}

// No entries are asked for, none are read.
func TestTopOfNothing(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	for _, n := range []int{0, -3} {
		got, err := r.store.Top(context.Background(), "", n, time.Now())
		if err != nil || got == nil || len(got) != 0 {
			t.Fatalf("top %d: %v %v", n, got, err)
		}
	}
}
