package faults_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/infra/local/testenv/await"
	"github.com/rallyhq/rally/shared/app/all"
	"github.com/rallyhq/rally/shared/deadletters"
	"github.com/rallyhq/rally/shared/jobs"
	"github.com/rallyhq/rally/shared/privacy"
	privacybind "github.com/rallyhq/rally/shared/privacy/bind"
	"github.com/rallyhq/rally/shared/reactions"
	rxbind "github.com/rallyhq/rally/shared/reactions/bind"
	"github.com/rallyhq/rally/shared/reactions/mirror"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
)

// edgeKey names an edge in the model.
type edgeKey struct {
	user   string
	kind   reactions.Kind
	target string
}

// edgeState is an edge as the operations left it.
type edgeState struct {
	active, trend bool
	since         time.Time
}

// reactionsModel is what the operations say, and nothing else: each
// edge's state. A count is the edges active; trending the edges active
// and counted in trending (the fraud controls' flag), by when they became
// active: the last 24 hours are the current UTC hour and the 23 before,
// the last 7 days the current UTC day and the 6 before.
type reactionsModel struct {
	edges map[edgeKey]edgeState
	// written are the edges that exist in the table (an erasure deletes
	// each, one more record on the stream).
	written map[edgeKey]bool
}

func (m *reactionsModel) add(k edgeKey, trend bool, now time.Time) bool {
	if m.edges[k].active {
		return false
	}
	m.written[k] = true
	m.edges[k] = edgeState{active: true, trend: trend, since: now}
	return true
}

func (m *reactionsModel) remove(k edgeKey) bool {
	e := m.edges[k]
	if !e.active {
		return false
	}
	m.edges[k] = edgeState{}
	return true
}

func hourOf(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), 0, 0, 0, time.UTC)
}

func dayOf(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
}

// window is the span a trending window covers at now.
func window(w reactions.Window, now time.Time) (from, to time.Time) {
	switch w {
	case reactions.Last24h:
		return hourOf(now).Add(-23 * time.Hour), hourOf(now).Add(time.Hour)
	case reactions.Last7d:
		return dayOf(now).AddDate(0, 0, -6), dayOf(now).AddDate(0, 0, 1)
	}
	return time.Time{}, time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
}

func (m *reactionsModel) count(kind reactions.Kind, target string) int64 {
	n := int64(0)
	for k, e := range m.edges {
		if k.kind == kind && k.target == target && e.active {
			n++
		}
	}
	return n
}

func (m *reactionsModel) trending(kind reactions.Kind, target string, w reactions.Window, now time.Time) int64 {
	from, to := window(w, now)
	n := int64(0)
	for k, e := range m.edges {
		if k.kind == kind && k.target == target && e.active && e.trend && !e.since.Before(from) && e.since.Before(to) {
			n++
		}
	}
	return n
}

// countersRig is a rig with the counter processor fed by the Reactions
// stream, and erasures with the dead-letter and reactions parts.
type countersRig struct {
	*rig
	edges    rxEdges
	stream   *stream
	erasures *erasures
	model    *reactionsModel
	users    []string
	erasing  map[string]bool
	targets  []reactions.Target
}

// rxEdges is the edge store the handlers write.
type rxEdges interface {
	Add(ctx context.Context, ref reactions.Ref, at time.Time, trend reactions.Trend) (reactions.Edge, bool, error)
	Remove(ctx context.Context, ref reactions.Ref, at time.Time) (reactions.Edge, bool, error)
	Toggle(ctx context.Context, ref reactions.Ref, at time.Time, trend reactions.Trend, commit *reactions.Commit) (reactions.Edge, error)
	Get(ctx context.Context, user string, kind reactions.Kind, targets []string) (map[string]reactions.Edge, error)
}

func newCountersRig(t *testing.T, users int) *countersRig {
	r := newRig(t)
	d := r.d
	st := newStream(r, schema.Reactions, routes.CounterProcessor.Function, d.Stream(rxbind.Reactions, routes.CounterProcessor))
	rx := rxbind.Eraser(d, &privacy.Awaits{DB: d.DB, Table: d.Table(schema.Counters), Clock: r.clk, Hasher: privacybind.Hasher(d)})
	rx.Wait = time.Millisecond
	dl := &deadletters.Eraser{Archive: st.archive, Invoker: st, Compensates: func(fn string) bool { return fn == st.function }}
	c := &countersRig{
		rig: r, edges: rxbind.Edges(d), stream: st, erasures: newErasures(r, dl, rx, dl),
		model: &reactionsModel{edges: map[edgeKey]edgeState{}, written: map[edgeKey]bool{}}, erasing: map[string]bool{},
		targets: []reactions.Target{{Kind: reactions.Favorite, ID: "g1"}, {Kind: reactions.Favorite, ID: "g2"}, {Kind: reactions.Like, ID: "p1"}},
	}
	for i := range users {
		c.users = append(c.users, fmt.Sprintf("player-%d", i+1))
	}
	c.erasures.afterRun = c.countDeletions
	// The first tick builds the (empty) cache and marks it current.
	st.tick()
	return c
}

// countDeletions counts the records an erasure's deleted edges put on the
// stream (the edges of the user no longer in the table), and drops them
// from the model.
func (c *countersRig) countDeletions(user string) {
	left := 0
	for _, kind := range reactions.Kinds() {
		var ids []string
		for _, t := range c.targets {
			if t.Kind == kind {
				ids = append(ids, t.ID)
			}
		}
		got, err := c.edges.Get(context.Background(), user, kind, ids)
		if err != nil {
			c.fatal(err)
		}
		for _, e := range got {
			if e.Version > 0 {
				left++
			}
		}
	}
	existed := 0
	for k := range c.model.written {
		if k.user == user {
			existed++
		}
	}
	if deleted := existed - left; deleted > 0 {
		for k := range c.model.written {
			if k.user == user {
				if e, _ := c.edges.Get(context.Background(), user, k.kind, []string{k.target}); e[k.target].Version == 0 {
					delete(c.model.written, k)
					delete(c.model.edges, k)
				}
			}
		}
		c.stream.wrote(deleted)
		c.logf("the erasure of %s deleted %d edges", user, deleted)
	}
}

// write makes one random reaction through the edge store, as the handlers
// do, and checks the store agrees with the model on what changed.
func (c *countersRig) write(rng *rand.Rand) {
	var live []string
	for _, u := range c.users {
		if !c.erasing[u] {
			live = append(live, u)
		}
	}
	if len(live) == 0 {
		return
	}
	user, target := live[rng.IntN(len(live))], c.targets[rng.IntN(len(c.targets))]
	k := edgeKey{user: user, kind: target.Kind, target: target.ID}
	ref := reactions.Ref{UserID: user, Kind: target.Kind, TargetID: target.ID}
	trend := rng.IntN(5) != 0
	now := c.clk.Now()
	ctx := context.Background()
	var changed, want bool
	var err error
	switch rng.IntN(3) {
	case 0:
		_, changed, err = c.edges.Add(ctx, ref, now, reactions.Trend(trend))
		want = c.model.add(k, trend, now)
		c.logf("%s adds %s (trend %v): changed %v", user, target, trend, changed)
	case 1:
		_, changed, err = c.edges.Remove(ctx, ref, now)
		want = c.model.remove(k)
		c.logf("%s removes %s: changed %v", user, target, changed)
	default:
		var e reactions.Edge
		e, err = c.edges.Toggle(ctx, ref, now, reactions.Trend(trend), nil)
		if c.model.edges[k].active {
			want = c.model.remove(k)
		} else {
			want = c.model.add(k, trend, now)
		}
		changed = e.Active() == c.model.edges[k].active
		c.logf("%s toggles %s (trend %v): active %v", user, target, trend, e.Active())
	}
	if err != nil {
		c.fatalf("write: %v", err)
	}
	if changed != want {
		c.fatalf("%s on %s changed=%v, the model says %v", user, target, changed, want)
	}
	if changed {
		c.stream.wrote(1)
	}
}

// sequence runs one random sequence of ops operations and faults.
func (c *countersRig) sequence(rng *rand.Rand, ops int) {
	for range ops {
		switch k := rng.IntN(100); {
		case k < 45:
			c.write(rng)
		case k < 80:
			c.stream.step(rng)
		case k < 88:
			c.stream.redrive(rng, true)
		case k < 94:
			d := time.Duration(1+rng.IntN(6*60)) * time.Minute
			if rng.IntN(8) == 0 {
				d = time.Duration(1+rng.IntN(3)) * 24 * time.Hour
			}
			c.clk.Advance(d)
			c.logf("clock +%v", d)
		case k < 96 && len(c.erasing) < len(c.users)-1:
			u := c.users[rng.IntN(len(c.users))]
			if !c.erasing[u] {
				c.erasing[u] = true
				c.erasures.request(u)
			}
		default:
			c.erasures.run()
		}
	}
}

// settle delivers and redrives everything, completes every erasure, and
// lets the processor repair Redis.
func (c *countersRig) settle(rng *rand.Rand) {
	// An erasure may wait out Redis's circuit breaker (open for a second
	// after the outages the sequence caused).
	await.Until(c.t, time.Minute, "everything delivered and every erasure completed", func() bool {
		c.stream.drain(rng)
		c.erasures.run()
		c.stream.pull()
		return len(c.erasures.pending) == 0 && c.stream.backlog() == 0
	})
	// Redis is trusted again once a tick repairs what its outages left
	// dirty (after its circuit breaker lets calls through again).
	m := mirror.New(c.d.Redis, c.d.Generations(mirror.Scope))
	await.Until(c.t, time.Minute, "redis repaired and trusted", func() bool {
		c.stream.tick()
		_, _, err := m.Count(context.Background(), c.targets[0])
		return err == nil
	})
}

// check compares every durable count, Redis count and trending value with
// the model, and looks for any trace of an erased user.
func (c *countersRig) check() {
	ctx := context.Background()
	counts := rxbind.Counts(c.d)
	m := mirror.New(c.d.Redis, c.d.Generations(mirror.Scope))
	now := c.clk.Now()
	for _, t := range c.targets {
		want := c.model.count(t.Kind, t.ID)
		got, err := counts.Count(ctx, t)
		if err != nil || got.N != want {
			c.fatalf("%s: durable count %d (%v), the model says %d", t, got.N, err, want)
		}
		cached, found, err := m.Count(ctx, t)
		if err != nil || (found && cached.N != want) || (!found && want != 0) {
			c.fatalf("%s: redis count %d (found %v, %v), the model says %d", t, cached.N, found, err, want)
		}
		tally, err := counts.TargetTally(ctx, t, now)
		if err != nil {
			c.fatal(err)
		}
		if want := c.model.trending(t.Kind, t.ID, reactions.AllTime, now); tally.Trending != want {
			c.fatalf("%s: all-time trending total %d, the model says %d", t, tally.Trending, want)
		}
		for _, w := range []reactions.Window{reactions.Last24h, reactions.Last7d} {
			from, to := window(w, now)
			span := reactions.Hourly
			if w == reactions.Last7d {
				span = reactions.Daily
			}
			sum := int64(0)
			for _, b := range tally.Buckets {
				if b.Span == span && !b.Start.Before(from) && b.Start.Before(to) {
					sum += b.Delta
				}
			}
			if want := c.model.trending(t.Kind, t.ID, w, now); sum != want {
				c.fatalf("%s: durable %s trending %d, the model says %d (buckets %+v)", t, w, sum, want, tally.Buckets)
			}
		}
	}
	for _, w := range reactions.Windows() {
		top, err := m.ComputeTop(ctx, reactions.Favorite, w, 100, now)
		if err != nil {
			c.fatal(err)
		}
		got := map[string]int64{}
		for _, it := range top.Items {
			got[it.ID] = it.Score
		}
		want := map[string]int64{}
		for _, t := range c.targets {
			if n := c.model.trending(t.Kind, t.ID, w, now); t.Kind == reactions.Favorite && n > 0 {
				want[t.ID] = n
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			c.fatalf("redis %s trending %v, the model says %v", w, got, want)
		}
	}
	c.noTrace()
}

func (c *rig) fatal(err error) {
	c.t.Helper()
	c.fatalf("%v", err)
}

// noTrace fails if anything names a user erased: an item of Counters,
// DeadLetters or Reactions, a record of a parked batch, a Redis key.
func (c *countersRig) noTrace() {
	c.rig.noTrace(c.stream, c.erasing, schema.Counters, schema.DeadLetters, schema.Reactions)
}

// TestCountsFollowTheModelUnderEveryFaultOrder runs random sequences of
// favorites, unfavorites, likes and toggles, delivered by a simulated
// event source mapping in batches that crash between any two writes,
// meet Redis outages, are redelivered whole or in halves, parked and
// redriven in any order (long after the stream forgot them), with
// erasures in between: once everything is delivered, every durable count,
// Redis count and trending value equals the model of the operations, and
// nothing names an erased user.
func TestCountsFollowTheModelUnderEveryFaultOrder(t *testing.T) {
	sequences, ops := testenv.Scale(envInt("RALLY_FAULT_SEQUENCES", 24), 200), testenv.Scale(40, 80)
	start := time.Now()
	var stats struct{ ops, delivered, crashed, parked, redriven int }
	for seq := range sequences {
		t.Run(fmt.Sprintf("seed-%d", seq), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(seq), 23))
			c := newCountersRig(t, 3)
			c.sequence(rng, ops)
			c.settle(rng)
			c.check()
			stats.ops += ops
			stats.delivered += c.stream.delivered
			stats.crashed += c.stream.crashed
			stats.parked += c.stream.parked
			stats.redriven += c.stream.redriven
		})
	}
	t.Logf("%d sequences, %d operations: %d deliveries (%d crashed), %d batches parked, %d redrives, in %v",
		sequences, stats.ops, stats.delivered, stats.crashed, stats.parked, stats.redriven, time.Since(start).Round(time.Second))
}

// The case the generator found first: a favorite counted, its unfavorite
// parked, a favorite again counted, then the unfavorite redriven. It
// changes nothing: the count stays 1 (it was 2 when counts moved by
// deltas guarded by the highest version counted). An erasure after it
// takes the count to 0, and a redrive of what was parked before the
// erasure cannot bring the user back.
func TestAChangeParkedBehindNewerOnesIsRedrivenRight(t *testing.T) {
	ctx := context.Background()
	c := newCountersRig(t, 2)
	ann := reactions.Ref{UserID: c.users[0], Kind: reactions.Favorite, TargetID: "g1"}
	g1 := ann.Target()
	counts := rxbind.Counts(c.d)
	expect := func(when string, want int64) {
		t.Helper()
		if n, err := counts.Count(ctx, g1); err != nil || n.N != want {
			c.fatalf("%s: count %d (%v), want %d", when, n.N, err, want)
		}
	}
	deliverAll := func() {
		c.stream.pull()
		for id, recs := range c.stream.pending {
			if applied, ok := c.stream.invoke(recs, fault{}); !ok {
				c.fatalf("delivery applied %d of %d", applied, len(recs))
			}
			c.stream.pending[id] = nil
		}
	}
	parkAll := func() {
		c.stream.pull()
		for id, recs := range c.stream.pending {
			c.stream.park(id, recs, "RetryAttemptsExhausted")
		}
	}
	now := c.clk.Now()
	flip := func(add bool) {
		t.Helper()
		var err error
		if add {
			_, _, err = c.edges.Add(ctx, ann, now, reactions.InTrending)
			c.model.add(edgeKey{ann.UserID, ann.Kind, ann.TargetID}, true, now)
		} else {
			_, _, err = c.edges.Remove(ctx, ann, now)
			c.model.remove(edgeKey{ann.UserID, ann.Kind, ann.TargetID})
		}
		if err != nil {
			t.Fatal(err)
		}
		c.stream.wrote(1)
	}
	flip(true)
	deliverAll() // v1 counted
	flip(false)
	parkAll() // v2 parked
	flip(true)
	deliverAll() // v3 counted
	expect("v1 and v3 counted", 1)
	for c.stream.redrive(rand.New(rand.NewPCG(1, 1)), false) {
	}
	expect("v2 redriven", 1)

	// Parked before the erasure: v4 (an unfavorite) and v5 (a favorite).
	for _, add := range []bool{false, true} {
		flip(add)
		parkAll()
	}
	c.erasing[ann.UserID] = true
	c.erasures.request(ann.UserID)
	c.settle(rand.New(rand.NewPCG(2, 2)))
	expect("the fan erased", 0)
	c.check()
}

// The disaster-recovery drill with the counter markers: every total and
// every marker is lost after a faulty sequence; a recompute brings both
// back from the edges, a rebuild Redis from them, and a second faulty
// sequence after it still ends equal to the model: the markers it rewrote
// are the states the counts hold.
func TestARecomputeBringsBackCountsAndTheirMarkers(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(99, 7))
	c := newCountersRig(t, 3)
	c.sequence(rng, testenv.Scale(40, 80))
	c.settle(rng)
	c.check()

	table := c.d.Table(schema.Counters)
	lost := 0
	for _, it := range testenv.TableItems(t, c.d.DB, table) {
		pk, _ := it[schema.AttrPK].(*types.AttributeValueMemberS)
		sk, _ := it[schema.AttrSK].(*types.AttributeValueMemberS)
		if pk == nil || sk == nil || !(strings.HasPrefix(pk.Value, schema.CountersAppliedPrefix) || sk.Value == schema.CountersTotalSK) {
			continue
		}
		if _, err := c.d.DB.DeleteItem(ctx, &dynamodb.DeleteItemInput{
			TableName: &table, Key: map[string]types.AttributeValue{schema.AttrPK: pk, schema.AttrSK: sk},
		}); err != nil {
			t.Fatal(err)
		}
		lost++
	}
	if lost == 0 {
		t.Fatal("the sequence left no totals or markers to lose")
	}
	job := runJob(t, c.rig, jobs.Spec{Kind: jobs.Recompute, Target: jobs.Counters})
	c.logf("recompute after losing %d items: %+v", lost, job.Findings)
	if err := c.d.Redis.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	c.settle(rng)
	c.check()

	c.sequence(rng, testenv.Scale(40, 80))
	c.settle(rng)
	c.check()
}

// runJob runs a job to its end with the job runner, invocation after
// invocation, as the Jobs stream would.
func runJob(t *testing.T, r *rig, spec jobs.Spec) jobs.Job {
	t.Helper()
	ctx := context.Background()
	runner := all.JobRunner(r.d)
	j, err := jobs.Start(ctx, runner.Store, spec, r.clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	for range 1000 {
		if err := runner.Work(ctx, j.ID); err != nil {
			t.Fatal(err)
		}
		if j, err = runner.Store.Get(ctx, j.ID); err != nil {
			t.Fatal(err)
		}
		if j.State != jobs.Running {
			if j.State != jobs.Done {
				t.Fatalf("job %s %s: %s (%s)", spec.Kind, spec.Target, j.State, j.Error)
			}
			return j
		}
	}
	t.Fatalf("job %s %s still running", spec.Kind, spec.Target)
	return j
}
