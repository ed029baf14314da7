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
	"github.com/rallyhq/rally/shared/leaderboards"
	lbbind "github.com/rallyhq/rally/shared/leaderboards/bind"
	lbmirror "github.com/rallyhq/rally/shared/leaderboards/mirror"
	playersbind "github.com/rallyhq/rally/shared/players/bind"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
)

// bestScore is a player's place on a "best" board, as the model keeps it.
type bestScore struct {
	player  string
	score   int64
	reached time.Time
}

// boardsRig is a rig with the leaderboard processor fed by the Scores
// stream, and erasures with the dead-letter and scores parts.
type boardsRig struct {
	*rig
	svc      *leaderboards.Service
	stream   *stream
	erasures *erasures
	// best is the model: each player's best score and when it was first
	// reached.
	best    map[string]bestScore
	players []string
	erasing map[string]bool
	match   int
}

const board = "arena"

func newBoardsRig(t *testing.T, players int) *boardsRig {
	r := newRig(t)
	d := r.d
	st := newStream(r, schema.Scores, routes.LeaderboardProcessor.Function, d.Stream(lbbind.Leaderboards, routes.LeaderboardProcessor))
	// A first score also writes the period's member count, and an
	// erasure deletes scores: the test counts the scores it writes.
	st.exact = false
	dl := &deadletters.Eraser{Archive: st.archive, Invoker: st, Compensates: func(fn string) bool { return fn == st.function }}
	// The stream is delivered between erasure runs, never during one: a
	// run waiting on the processor's markers resumes on the next run.
	scores := lbbind.Eraser(d, nil)
	scores.Wait = time.Millisecond
	b := &boardsRig{
		rig: r, stream: st, erasures: newErasures(r, dl, scores, dl),
		svc:  leaderboards.NewService(lbbind.Definitions(d), lbbind.Scores(d), playersbind.Store(d), lbbind.Mirror(d, d.Generations(lbmirror.Scope)), r.clk, d.Log),
		best: map[string]bestScore{}, erasing: map[string]bool{},
	}
	for i := range players {
		b.players = append(b.players, fmt.Sprintf("gamer-%d", i+1))
	}
	if _, _, err := b.svc.PutDefinition(context.Background(), leaderboards.Definition{
		ID: board, Title: "Arena", Policy: leaderboards.Best, Order: leaderboards.Desc, Reset: leaderboards.Never,
		TieBreak: leaderboards.Earliest, Status: leaderboards.Active, MaxN: 100, Timezone: "UTC",
	}); err != nil {
		t.Fatal(err)
	}
	st.tick()
	return b
}

// submit sends one match's score, as a game server does, and keeps the
// model: a higher score is a new best, reached now; an equal or lower one
// changes nothing.
func (b *boardsRig) submit(rng *rand.Rand) {
	var live []string
	for _, p := range b.players {
		if !b.erasing[p] {
			live = append(live, p)
		}
	}
	if len(live) == 0 {
		return
	}
	player := live[rng.IntN(len(live))]
	score := int64(rng.IntN(40)) * 10
	b.match++
	b.clk.Advance(time.Second)
	now := b.clk.Now()
	res, err := b.svc.Submit(context.Background(), board, leaderboards.Match{PlayerID: player, MatchID: fmt.Sprintf("m-%d", b.match), Score: score})
	if err != nil {
		b.fatalf("submit %d for %s: %v", score, player, err)
	}
	cur, seen := b.best[player]
	better := !seen || score > cur.score
	if better {
		b.best[player] = bestScore{player: player, score: score, reached: now}
		b.stream.wrote(1)
	}
	if res.Changed != better {
		b.fatalf("%s scored %d (best %d): changed %v, the model says %v", player, score, cur.score, res.Changed, better)
	}
	b.logf("%s scores %d: changed %v", player, score, res.Changed)
}

// ranking is the model's board: best first, then the earlier reached,
// then the player id.
func (b *boardsRig) ranking() []bestScore {
	out := make([]bestScore, 0, len(b.best))
	for _, s := range b.best {
		if !b.erasing[s.player] {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(x, y bestScore) int {
		return cmp.Or(cmp.Compare(y.score, x.score), x.reached.Compare(y.reached), cmp.Compare(x.player, y.player))
	})
	return out
}

func (b *boardsRig) sequence(rng *rand.Rand, ops int) {
	for range ops {
		switch k := rng.IntN(100); {
		case k < 45:
			b.submit(rng)
		case k < 82:
			b.stream.step(rng)
		case k < 92:
			b.stream.redrive(rng, true)
		case k < 95 && len(b.erasing) < len(b.players)-1:
			p := b.players[rng.IntN(len(b.players))]
			if !b.erasing[p] {
				b.erasing[p] = true
				b.erasures.request(p)
			}
		default:
			b.erasures.run()
		}
	}
}

func (b *boardsRig) settle(rng *rand.Rand) {
	await.Until(b.t, time.Minute, "everything delivered and every erasure completed", func() bool {
		b.stream.drain(rng)
		b.erasures.run()
		b.stream.pull()
		return len(b.erasures.pending) == 0 && b.stream.backlog() == 0
	})
	await.Until(b.t, time.Minute, "the board served from redis", func() bool {
		b.stream.tick()
		top, err := b.svc.Top(context.Background(), board, "", "", 1, 100)
		return err == nil && !top.Degraded
	})
}

// check compares the Redis board with the model's, and looks for any
// trace of an erased player.
func (b *boardsRig) check() {
	ctx := context.Background()
	top, err := b.svc.Top(ctx, board, "", "", 1, 100)
	if err != nil {
		b.fatal(err)
	}
	want := b.ranking()
	var got, expected []string
	for _, e := range top.Entries {
		got = append(got, fmt.Sprintf("%d:%s=%d", e.Rank, e.PlayerID, e.Score))
	}
	for i, s := range want {
		expected = append(expected, fmt.Sprintf("%d:%s=%d", i+1, s.player, s.score))
	}
	if top.Degraded || fmt.Sprint(got) != fmt.Sprint(expected) || top.Total != int64(len(want)) {
		b.fatalf("board %v (total %d, degraded %v), the model says %v", got, top.Total, top.Degraded, expected)
	}
	b.rig.noTrace(b.stream, b.erasing, schema.Scores, schema.ScoreEvents, schema.Counters, schema.DeadLetters)
}

// TestBoardsFollowTheModelUnderEveryFaultOrder is the fault matrix of the
// leaderboard processor: scores parked behind newer ones and redriven in
// any order, crashes between any two writes, Redis outages, erasures in
// between; the Redis board ends equal to the model's, and an erased
// player is nowhere.
func TestBoardsFollowTheModelUnderEveryFaultOrder(t *testing.T) {
	sequences, ops := testenv.Scale(envInt("RALLY_FAULT_SEQUENCES", 12), 100), testenv.Scale(40, 80)
	start := time.Now()
	var delivered, crashed, parked, redriven int
	for seq := range sequences {
		t.Run(fmt.Sprintf("seed-%d", seq), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(seq), 31))
			b := newBoardsRig(t, 4)
			b.sequence(rng, ops)
			b.settle(rng)
			b.check()
			delivered, crashed, parked, redriven = delivered+b.stream.delivered, crashed+b.stream.crashed, parked+b.stream.parked, redriven+b.stream.redriven
		})
	}
	t.Logf("%d sequences, %d operations: %d deliveries (%d crashed), %d batches parked, %d redrives, in %v",
		sequences, sequences*ops, delivered, crashed, parked, redriven, time.Since(start).Round(time.Second))
}

// A score parked behind a newer one and redriven after it changes
// nothing: the board keeps the newer best.
func TestAScoreParkedBehindANewerOneIsRedrivenRight(t *testing.T) {
	ctx := context.Background()
	b := newBoardsRig(t, 1)
	p := b.players[0]
	submit := func(score int64) {
		t.Helper()
		b.match++
		b.clk.Advance(time.Second)
		if _, err := b.svc.Submit(ctx, board, leaderboards.Match{PlayerID: p, MatchID: fmt.Sprintf("m-%d", b.match), Score: score}); err != nil {
			t.Fatal(err)
		}
		b.best[p] = bestScore{player: p, score: score, reached: b.clk.Now()}
		b.stream.wrote(1)
	}
	deliver := func(park bool) {
		b.stream.pull()
		for id, recs := range b.stream.pending {
			if park {
				b.stream.park(id, recs, "RetryAttemptsExhausted")
			} else if _, ok := b.stream.invoke(recs, fault{}); !ok {
				b.fatalf("delivery failed")
			}
			b.stream.pending[id] = nil
		}
	}
	submit(100)
	deliver(false)
	submit(200)
	deliver(true)
	submit(300)
	deliver(false)
	for b.stream.redrive(rand.New(rand.NewPCG(1, 1)), false) {
	}
	b.settle(rand.New(rand.NewPCG(2, 2)))
	b.check()
}
