package faults_test

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/infra/local/testenv/await"
	"github.com/rallyhq/rally/shared/deadletters"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
	"github.com/rallyhq/rally/shared/streaks"
	stbind "github.com/rallyhq/rally/shared/streaks/bind"
	stmirror "github.com/rallyhq/rally/shared/streaks/mirror"
)

// streakState is a player's streak as the model keeps it, in UTC days
// (the players here all live in UTC).
type streakState struct {
	last    time.Time // the day of the last activity
	current int64
}

// streaksRig is a rig with the streak processor fed by the Streaks stream,
// and erasures with the dead-letter and streaks parts.
type streaksRig struct {
	*rig
	svc      *streaks.Service
	stream   *stream
	erasures *erasures
	model    map[string]streakState
	players  []string
	erasing  map[string]bool
	key      int
}

func newStreaksRig(t *testing.T, players int) *streaksRig {
	r := newRig(t)
	d := r.d
	st := newStream(r, schema.Streaks, routes.StreakProcessor.Function, d.Stream(stbind.Streaks, routes.StreakProcessor))
	// An erasure deletes streaks: the test counts the activities it
	// records.
	st.exact = false
	gen := d.Generations(stmirror.Scope)
	dl := &deadletters.Eraser{Archive: st.archive, Invoker: st, Compensates: func(fn string) bool { return fn == st.function }}
	s := &streaksRig{
		rig: r, stream: st, erasures: newErasures(r, dl, stbind.Eraser(d), dl),
		svc: &streaks.Service{
			Store: stbind.Store(d), Cache: stmirror.New(d.Redis, gen), Gen: gen, Clock: r.clk, Log: d.Log, Metrics: d.Metrics,
			RegionOf: func(context.Context, string) (string, error) { return "", nil },
		},
		model: map[string]streakState{}, erasing: map[string]bool{},
	}
	for i := range players {
		s.players = append(s.players, fmt.Sprintf("daily-%d", i+1))
	}
	st.tick()
	return s
}

// record reports one DAILY_OPEN of a player and keeps the model: the same
// day leaves the streak, the next day grows it, a later one restarts it
// at 1.
func (s *streaksRig) record(rng *rand.Rand) {
	var live []string
	for _, p := range s.players {
		if !s.erasing[p] {
			live = append(live, p)
		}
	}
	if len(live) == 0 {
		return
	}
	p := live[rng.IntN(len(live))]
	s.key++
	_, err := s.svc.Record(context.Background(), p, fmt.Sprintf("k-%d", s.key), fmt.Sprintf("h-%d", s.key),
		streaks.Activity{Type: streaks.DailyOpen, Source: streaks.MobileApp, Timezone: "UTC", By: streaks.Players})
	if err != nil {
		s.fatalf("record for %s: %v", p, err)
	}
	today := dayOf(s.clk.Now())
	cur := s.model[p]
	switch {
	case cur.current > 0 && cur.last.Equal(today):
	case cur.current > 0 && cur.last.AddDate(0, 0, 1).Equal(today):
		cur.current++
	default:
		cur.current = 1
	}
	cur.last = today
	s.model[p] = cur
	s.stream.wrote(1)
	s.logf("%s opens on %s: streak %d", p, today.Format(time.DateOnly), cur.current)
}

// board is the model's live streaks (activity today or yesterday), best
// first; equal streaks by player, as the check compares them.
func (s *streaksRig) board() []string {
	today := dayOf(s.clk.Now())
	type entry struct {
		player string
		streak int64
	}
	var live []entry
	for p, st := range s.model {
		if !s.erasing[p] && st.current > 0 && !st.last.Before(today.AddDate(0, 0, -1)) {
			live = append(live, entry{p, st.current})
		}
	}
	slices.SortFunc(live, func(a, b entry) int { return cmp.Or(cmp.Compare(b.streak, a.streak), cmp.Compare(a.player, b.player)) })
	out := make([]string, len(live))
	for i, e := range live {
		out[i] = fmt.Sprintf("%s=%d", e.player, e.streak)
	}
	return out
}

func (s *streaksRig) sequence(rng *rand.Rand, ops int) {
	for range ops {
		switch k := rng.IntN(100); {
		case k < 40:
			s.record(rng)
		case k < 75:
			s.stream.step(rng)
		case k < 85:
			s.stream.redrive(rng, true)
		case k < 93:
			d := time.Duration(1+rng.IntN(30)) * time.Hour
			s.clk.Advance(d)
			s.logf("clock +%v", d)
		case k < 95 && len(s.erasing) < len(s.players)-1:
			p := s.players[rng.IntN(len(s.players))]
			if !s.erasing[p] {
				s.erasing[p] = true
				s.erasures.request(p)
			}
		default:
			s.erasures.run()
		}
	}
}

func (s *streaksRig) settle(rng *rand.Rand) {
	await.Until(s.t, time.Minute, "everything delivered and every erasure completed", func() bool {
		s.stream.drain(rng)
		s.erasures.run()
		s.stream.pull()
		return len(s.erasures.pending) == 0 && s.stream.backlog() == 0
	})
	await.Until(s.t, time.Minute, "the streak board served from redis", func() bool {
		s.stream.tick()
		top, err := s.svc.Top(context.Background(), "", 100)
		return err == nil && !top.Degraded
	})
}

// check compares the Redis streak board with the model's (equal streaks
// in any order), and looks for any trace of an erased player.
func (s *streaksRig) check() {
	ctx := context.Background()
	top, err := s.svc.Top(ctx, "", 100)
	if err != nil {
		s.fatal(err)
	}
	type entry struct {
		player string
		streak int64
	}
	var got []entry
	for _, e := range top.Entries {
		got = append(got, entry{e.UserID, e.Streak})
	}
	for i := 1; i < len(got); i++ {
		if got[i].streak > got[i-1].streak {
			s.fatalf("the board is not best first: %v", got)
		}
	}
	slices.SortFunc(got, func(a, b entry) int { return cmp.Or(cmp.Compare(b.streak, a.streak), cmp.Compare(a.player, b.player)) })
	var served []string
	for _, e := range got {
		served = append(served, fmt.Sprintf("%s=%d", e.player, e.streak))
	}
	if want := s.board(); top.Degraded || fmt.Sprint(served) != fmt.Sprint(want) {
		s.fatalf("streak board %v (degraded %v), the model says %v", served, top.Degraded, want)
	}
	s.rig.noTrace(s.stream, s.erasing, schema.Streaks, schema.Activity, schema.Counters, schema.DeadLetters)
}

// TestStreakBoardsFollowTheModelUnderEveryFaultOrder is the fault matrix
// of the streak processor: activity parked behind newer activity and
// redriven in any order, crashes between any two writes, Redis outages,
// days passing, erasures in between; the Redis streak board ends equal to
// the model's live streaks, and an erased player is nowhere.
func TestStreakBoardsFollowTheModelUnderEveryFaultOrder(t *testing.T) {
	sequences, ops := testenv.Scale(envInt("RALLY_FAULT_SEQUENCES", 12), 100), testenv.Scale(40, 80)
	start := time.Now()
	var delivered, crashed, parked, redriven int
	for seq := range sequences {
		t.Run(fmt.Sprintf("seed-%d", seq), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(seq), 41))
			s := newStreaksRig(t, 4)
			s.sequence(rng, ops)
			s.settle(rng)
			s.check()
			delivered, crashed, parked, redriven = delivered+s.stream.delivered, crashed+s.stream.crashed, parked+s.stream.parked, redriven+s.stream.redriven
		})
	}
	t.Logf("%d sequences, %d operations: %d deliveries (%d crashed), %d batches parked, %d redrives, in %v",
		sequences, sequences*ops, delivered, crashed, parked, redriven, time.Since(start).Round(time.Second))
}
