package reactions

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/jobs"
)

// ActiveEdges is what the jobs read of the edges, the truth of every count
// and all-time trending total.
type ActiveEdges interface {
	// CountActive counts a target's ACTIVE edges (its count) and those of
	// them that count in trending (its all-time trending total).
	CountActive(ctx context.Context, t Target) (Totals, error)
	// ScanTargets reads a page of the targets with ACTIVE edges.
	ScanTargets(ctx context.Context, after Position) ([]Target, Position, error)
	// ScanEdges reads a page of every edge, whatever its state.
	ScanEdges(ctx context.Context, after Position) ([]Edge, Position, error)
	// Get returns user's edges to targets (a missing one at Version 0).
	Get(ctx context.Context, user string, kind Kind, targets []string) (map[string]Edge, error)
}

// JobCounts is what the jobs read and repair of the durable counts.
type JobCounts interface {
	ScanTallies(ctx context.Context, after Position, now time.Time) ([]Tally, Position, error)
	// Tallies reads the totals (and the named buckets) of targets; a
	// target without a count item is absent or has no total.
	Tallies(ctx context.Context, touched map[Target][]BucketRef) ([]Tally, error)
	TargetTally(ctx context.Context, t Target, now time.Time) (Tally, error)
	// SetTotals rewrites a count and all-time trending total if their
	// version is still seen (0: none).
	SetTotals(ctx context.Context, t Target, to Totals, seen int64, now time.Time) (bool, error)
	// MarkCounted sets each edge's counter marker to the edge's state.
	MarkCounted(ctx context.Context, edges []Edge, now time.Time) error
	// ScanMarkers reads a page of the markers counted active.
	ScanMarkers(ctx context.Context, after Position) (map[Ref]Counted, Position, error)
	// ForgetMarker deletes an edge's marker if it is still at ver.
	ForgetMarker(ctx context.Context, ref Ref, ver int64) error
}

// JobMirror is what the jobs read and repair of Redis.
type JobMirror interface {
	Apply(ctx context.Context, tallies []Tally, edges []Edge) error
	Stored(ctx context.Context, targets []Target) (map[Target]Count, map[Target]int64, error)
	Reset(ctx context.Context, tallies []Tally) error
}

// Jobs are the reactions' tasks: rebuild Redis's counts and trending from
// the durable tallies, reconcile durable totals with the edges and Redis
// with the durable totals, and recompute every total from the edges.
type Jobs struct {
	Edges  ActiveEdges
	Counts JobCounts
	Mirror JobMirror
	Clock  clock.Clock
	// Settle is how long a reconcile waits before it confirms a count off
	// its edges: longer than the counter processor's lag.
	Settle time.Duration
	// Parallel bounds the targets checked at once (default 16).
	Parallel int
}

// Tasks registers the counters and trending targets of every kind: a
// target's count and all-time trending total are one item, read and
// written together, so both targets run the same task.
func (j *Jobs) Tasks() jobs.Tasks {
	rebuild := jobs.Named("reactions-rebuild", j.rebuild)
	reconcile := jobs.Named("reactions-reconcile", j.reconcile)
	recompute := jobs.Named("reactions-recompute", j.recompute)
	return jobs.Tasks{
		{Kind: jobs.Rebuild, Target: jobs.Counters}:   rebuild,
		{Kind: jobs.Rebuild, Target: jobs.Trending}:   rebuild,
		{Kind: jobs.Reconcile, Target: jobs.Counters}: reconcile,
		{Kind: jobs.Reconcile, Target: jobs.Trending}: reconcile,
		{Kind: jobs.Recompute, Target: jobs.Counters}: recompute,
		{Kind: jobs.Recompute, Target: jobs.Trending}: recompute,
	}
}

// countsCursor is a reactions job's position: the phase (recompute first
// walks the edges' targets, then the count items) and the page.
type countsCursor struct {
	Phase      int         `json:"phase,omitempty"`
	After      Position    `json:"after,omitempty"`
	Candidates []candidate `json:"candidates,omitempty"`
	ConfirmAt  time.Time   `json:"confirm_at,omitzero"`
}

func decodeCursor(s string) (countsCursor, error) {
	var c countsCursor
	if s == "" {
		return c, nil
	}
	err := json.Unmarshal([]byte(s), &c)
	return c, err
}

func (c countsCursor) String() string {
	raw, _ := json.Marshal(c)
	return string(raw)
}

// eachTallyPage walks the durable tallies from the cursor, a page at a
// time, checkpointing after each.
// fn may add to the cursor (a reconcile's candidates): the checkpoints
// keep what it added.
func (j *Jobs) eachTallyPage(ctx context.Context, c *countsCursor, w *jobs.Work, fn func([]Tally) error) (string, bool, error) {
	for {
		if ctx.Err() != nil {
			return c.String(), false, nil
		}
		tallies, next, err := j.Counts.ScanTallies(ctx, c.After, j.Clock.Now())
		if err != nil {
			return "", false, err
		}
		if err := fn(tallies); err != nil {
			if ctx.Err() != nil {
				return c.String(), false, nil
			}
			return "", false, err
		}
		if next == nil {
			return "", true, nil
		}
		c.After = next
		if err := w.Checkpoint(ctx, c.String()); err != nil {
			return "", false, err
		}
	}
}

// rebuild mirrors every durable tally into Redis.
func (j *Jobs) rebuild(ctx context.Context, _ jobs.Spec, cursor string, w *jobs.Work) (string, bool, error) {
	c, err := decodeCursor(cursor)
	if err != nil {
		return "", false, err
	}
	return j.eachTallyPage(ctx, &c, w, func(tallies []Tally) error {
		if err := j.Mirror.Apply(ctx, tallies, nil); err != nil {
			return err
		}
		w.Progress.Done += int64(len(tallies))
		w.Findings.Checked += int64(len(tallies))
		return nil
	})
}

// MaxCandidates bounds the drifted counts one reconcile confirms; more
// are reported, not repaired.
const MaxCandidates = 1000

// candidate is a count or trending total a reconcile found off its edges,
// to confirm once the counter processor had time to apply what was in
// flight.
type candidate struct {
	Target        Target `json:"target"`
	Count         int64  `json:"count"`
	Trending      int64  `json:"trending"`
	Version       int64  `json:"ver"`
	Edges         int64  `json:"edges"`
	TrendingEdges int64  `json:"trending_edges"`
}

func (c candidate) totals() Totals { return Totals{Count: c.Count, Trending: c.Trending} }

func (c candidate) edges() Totals { return Totals{Count: c.Edges, Trending: c.TrendingEdges} }

// offEdges says how a tally's durable totals differ from what the edges
// say.
func offEdges(t Tally, edges Totals) string {
	if !t.HasTotal {
		return fmt.Sprintf("%s: no count item, %d active edges (%d in trending)", t.Target, edges.Count, edges.Trending)
	}
	durable := t.Totals()
	var parts []string
	if durable.Count != edges.Count {
		parts = append(parts, fmt.Sprintf("count %d, %d active edges", durable.Count, edges.Count))
	}
	if durable.Trending != edges.Trending {
		parts = append(parts, fmt.Sprintf("all-time trending %d, %d active edges in trending", durable.Trending, edges.Trending))
	}
	return t.Target.String() + ": " + strings.Join(parts, "; ")
}

// The phases of a reconcile, in the order they run (the numbers are kept
// in the cursors of running jobs).
const (
	// reconcileTallies checks every count item against its edges, and
	// Redis against the count items that hold.
	reconcileTallies = 0
	// reconcileLost walks the targets with ACTIVE edges for those whose
	// count item is gone.
	reconcileLost = 2
	// reconcileConfirm waits Settle, then confirms and repairs.
	reconcileConfirm = 1
)

// reconcile checks every durable count and all-time trending total against
// its target's ACTIVE edges, and Redis's cached count and all-time trending
// score against them (resetting those that drifted); then it looks for
// targets with ACTIVE edges and no count item. A total off its edges (or
// missing) may only be a change the counter processor has not applied
// yet, so it is a candidate: Settle later it is read again, and rewritten
// only if neither it nor its edges moved meanwhile (and then on condition
// that it still has the version read, so a change applied since is never
// lost).
func (j *Jobs) reconcile(ctx context.Context, _ jobs.Spec, cursor string, w *jobs.Work) (string, bool, error) {
	c, err := decodeCursor(cursor)
	if err != nil {
		return "", false, err
	}
	if c.Phase == reconcileTallies {
		next, done, err := j.eachTallyPage(ctx, &c, w, func(tallies []Tally) error {
			var totals []Tally
			for _, t := range tallies {
				if t.HasTotal {
					totals = append(totals, t)
				}
			}
			edges, err := j.countEdges(ctx, totals)
			if err != nil {
				return err
			}
			var settled []Tally
			for i, t := range totals {
				if c.check(w, t, edges[i]) {
					settled = append(settled, t)
				}
			}
			w.Progress.Done += int64(len(totals))
			return j.checkRedis(ctx, settled, w)
		})
		if err != nil || !done {
			return next, false, err
		}
		c.Phase, c.After = reconcileLost, nil
	}
	for c.Phase == reconcileLost {
		if ctx.Err() != nil {
			return c.String(), false, nil
		}
		if err := j.findLost(ctx, &c, w); err != nil {
			return "", false, err
		}
		if c.After == nil {
			c.Phase, c.ConfirmAt = reconcileConfirm, j.Clock.Now().Add(j.Settle)
		}
		if err := w.Checkpoint(ctx, c.String()); err != nil {
			return "", false, err
		}
	}
	if now := j.Clock.Now(); now.Before(c.ConfirmAt) {
		w.Sleep(c.ConfirmAt)
		return c.String(), false, nil
	}
	return "", true, j.confirm(ctx, c.Candidates, w)
}

// check counts t as checked against its edges and makes it a candidate
// when they differ; it reports whether they agree.
func (c *countsCursor) check(w *jobs.Work, t Tally, edges Totals) bool {
	w.Findings.Checked++
	if t.HasTotal && edges == t.Totals() {
		return true
	}
	if len(c.Candidates) >= MaxCandidates {
		w.Findings.Found("count", offEdges(t, edges)+" (not confirmed: too many)", false)
		return false
	}
	c.Candidates = append(c.Candidates, candidate{
		Target: t.Target, Count: t.Count, Trending: t.Trending, Version: t.Version,
		Edges: edges.Count, TrendingEdges: edges.Trending,
	})
	return false
}

// findLost reads the next page of targets with ACTIVE edges and makes a
// candidate of each whose count item is gone (a lost item is not among the
// tallies the first phase walked).
func (j *Jobs) findLost(ctx context.Context, c *countsCursor, w *jobs.Work) error {
	targets, next, err := j.Edges.ScanTargets(ctx, c.After)
	if err != nil {
		return err
	}
	touched := make(map[Target][]BucketRef, len(targets))
	for _, t := range targets {
		touched[t] = nil
	}
	held, err := j.Counts.Tallies(ctx, touched)
	if err != nil {
		return err
	}
	for _, t := range held {
		if t.HasTotal {
			delete(touched, t.Target)
		}
	}
	lost := make([]Tally, 0, len(touched))
	for _, t := range targets {
		if _, ok := touched[t]; ok {
			lost = append(lost, Tally{Target: t})
		}
	}
	edges, err := j.countEdges(ctx, lost)
	if err != nil {
		return err
	}
	for i, t := range lost {
		// A target whose edges span pages comes in each; one whose edges
		// all went since the scan read them has nothing to count.
		known := slices.ContainsFunc(c.Candidates, func(k candidate) bool { return k.Target == t.Target })
		if !known && edges[i] != (Totals{}) {
			c.check(w, t, edges[i])
		}
	}
	w.Progress.Done += int64(len(targets))
	c.After = next
	return nil
}

// confirm reads the candidates again and repairs those still drifted,
// unchanged.
func (j *Jobs) confirm(ctx context.Context, cands []candidate, w *jobs.Work) error {
	var fixed, recreated []Tally
	for _, cand := range cands {
		t, err := j.Counts.TargetTally(ctx, cand.Target, j.Clock.Now())
		if err != nil {
			return err
		}
		edges, err := j.Edges.CountActive(ctx, cand.Target)
		if err != nil {
			return err
		}
		switch {
		case edges == t.Totals():
			continue // it was in flight
		case t.Version != cand.Version || edges != cand.edges():
			w.Findings.Found("count", offEdges(t, edges)+" (still changing; not repaired)", false)
			continue
		}
		repaired, err := j.Counts.SetTotals(ctx, t.Target, edges, t.Version, j.Clock.Now())
		if err != nil {
			return err
		}
		w.Findings.Found("count", offEdges(t, edges), repaired)
		if !repaired {
			continue
		}
		lost := !t.HasTotal
		t.HasTotal, t.Count, t.Trending, t.Version = true, edges.Count, edges.Trending, t.Version+1
		if lost {
			// Its versions begin again at 1: Redis may hold a later one.
			recreated = append(recreated, t)
		} else {
			fixed = append(fixed, t)
		}
	}
	if len(recreated) > 0 {
		if err := j.Mirror.Reset(ctx, recreated); err != nil {
			return err
		}
	}
	return j.checkRedis(ctx, fixed, w)
}

// countEdges counts the ACTIVE edges of each tally's target (all, and
// those in trending), a few at a time.
func (j *Jobs) countEdges(ctx context.Context, tallies []Tally) ([]Totals, error) {
	edges := make([]Totals, len(tallies))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(cmp.Or(j.Parallel, 16))
	for i, t := range tallies {
		g.Go(func() error {
			n, err := j.Edges.CountActive(gctx, t.Target)
			edges[i] = n
			return err
		})
	}
	return edges, g.Wait()
}

// rewrite sets each tally's count and all-time trending total to its
// target's ACTIVE edges where they differ (a recompute, run without load).
func (j *Jobs) rewrite(ctx context.Context, tallies []Tally, w *jobs.Work) error {
	edges, err := j.countEdges(ctx, tallies)
	if err != nil {
		return err
	}
	for i, t := range tallies {
		w.Findings.Checked++
		if edges[i] == t.Totals() {
			continue
		}
		repaired, err := j.Counts.SetTotals(ctx, t.Target, edges[i], t.Version, j.Clock.Now())
		if err != nil {
			return err
		}
		w.Findings.Found("count", offEdges(t, edges[i]), repaired)
	}
	return nil
}

// checkRedis compares Redis's cached counts and all-time scores with the
// durable counts and trending totals and resets the targets that drifted.
func (j *Jobs) checkRedis(ctx context.Context, tallies []Tally, w *jobs.Work) error {
	targets := make([]Target, len(tallies))
	for i, t := range tallies {
		targets[i] = t.Target
	}
	counts, allTime, err := j.Mirror.Stored(ctx, targets)
	if err != nil {
		return err
	}
	var reset []Tally
	for _, t := range tallies {
		if c, ok := counts[t.Target]; ok && c.Version > t.Version {
			// Redis holds a later change than the tally read: the counter
			// processor applied one since (it writes DynamoDB first), or
			// Redis is ahead of the truth. The tally read again tells.
			if t, err = j.Counts.TargetTally(ctx, t.Target, j.Clock.Now()); err != nil {
				return err
			}
			if c.Version > t.Version {
				w.Findings.Found("redis_count", fmt.Sprintf("%s: redis at version %d, dynamodb at %d", t.Target, c.Version, t.Version), true)
				reset = append(reset, t)
				continue
			}
		}
		drifted := false
		if c, ok := counts[t.Target]; ok && c.N != t.Count {
			w.Findings.Found("redis_count", fmt.Sprintf("%s: redis %d, dynamodb %d", t.Target, c.N, t.Count), true)
			drifted = true
		}
		if s, ok := allTime[t.Target]; (ok && s != t.Trending) || (!ok && t.Trending != 0) {
			w.Findings.Found("trending", fmt.Sprintf("%s: all-time score %d, trending total %d", t.Target, s, t.Trending), true)
			drifted = true
		}
		if drifted {
			reset = append(reset, t)
		}
	}
	if len(reset) == 0 {
		return nil
	}
	return j.Mirror.Reset(ctx, reset)
}

// The phases of a recompute, in the order they run (the numbers are kept
// in the cursors of running jobs).
const (
	// recomputeMarkers sets every edge's counter marker to its state.
	recomputeMarkers = 3
	// recomputeTargets rewrites the totals of every target with ACTIVE
	// edges, recomputeTallies those of every count item.
	recomputeTargets = 0
	recomputeTallies = 1
	// recomputeStale drops the markers of edges that no longer exist.
	recomputeStale = 4
)

// recompute rewrites every durable count and all-time trending total from
// the edges, and the counter markers with them (counts hold the state
// each edge's marker records, so the two must agree): first every edge's
// marker, then the totals of every target with ACTIVE edges (a lost count
// item comes back), then those of every count item (a target whose edges
// all went reads 0), then it drops the markers of edges gone. Like any
// disaster recovery it is run with the writes stopped.
func (j *Jobs) recompute(ctx context.Context, spec jobs.Spec, cursor string, w *jobs.Work) (string, bool, error) {
	c, err := decodeCursor(cursor)
	if err != nil {
		return "", false, err
	}
	if cursor == "" {
		c.Phase = recomputeMarkers
	}
	for c.Phase == recomputeMarkers {
		if ctx.Err() != nil {
			return c.String(), false, nil
		}
		edges, next, err := j.Edges.ScanEdges(ctx, c.After)
		if err != nil {
			return "", false, err
		}
		if err := j.Counts.MarkCounted(ctx, edges, j.Clock.Now()); err != nil {
			return "", false, err
		}
		w.Findings.Checked += int64(len(edges))
		c.After = next
		if next == nil {
			c.Phase = recomputeTargets
		}
		if err := w.Checkpoint(ctx, c.String()); err != nil {
			return "", false, err
		}
	}
	if c.Phase == recomputeStale {
		return j.forgetStale(ctx, &c, w)
	}
	for c.Phase == recomputeTargets {
		if ctx.Err() != nil {
			return c.String(), false, nil
		}
		targets, next, err := j.Edges.ScanTargets(ctx, c.After)
		if err != nil {
			return "", false, err
		}
		now := j.Clock.Now()
		tallies := make([]Tally, len(targets))
		for i, t := range targets {
			if tallies[i], err = j.Counts.TargetTally(ctx, t, now); err != nil {
				return "", false, err
			}
		}
		if err := j.rewrite(ctx, tallies, w); err != nil {
			return "", false, err
		}
		w.Progress.Done += int64(len(targets))
		c.After = next
		if next == nil {
			c.Phase = recomputeTallies
		}
		if err := w.Checkpoint(ctx, c.String()); err != nil {
			return "", false, err
		}
	}
	next, done, err := j.eachTallyPage(ctx, &c, w, func(tallies []Tally) error {
		var totals []Tally
		for _, t := range tallies {
			if t.HasTotal && t.Totals() != (Totals{}) {
				totals = append(totals, t)
			}
		}
		w.Progress.Done += int64(len(totals))
		return j.rewrite(ctx, totals, w)
	})
	if err != nil || !done {
		return next, false, err
	}
	c = countsCursor{Phase: recomputeStale}
	if err := w.Checkpoint(ctx, c.String()); err != nil {
		return "", false, err
	}
	return j.forgetStale(ctx, &c, w)
}

// forgetStale drops the markers counted active of edges that no longer
// exist (an erasure's deletion the counter processor never got).
func (j *Jobs) forgetStale(ctx context.Context, c *countsCursor, w *jobs.Work) (string, bool, error) {
	for {
		if ctx.Err() != nil {
			return c.String(), false, nil
		}
		markers, next, err := j.Counts.ScanMarkers(ctx, c.After)
		if err != nil {
			return "", false, err
		}
		type owner struct {
			user string
			kind Kind
		}
		byOwner := map[owner][]string{}
		for ref := range markers {
			o := owner{ref.UserID, ref.Kind}
			byOwner[o] = append(byOwner[o], ref.TargetID)
		}
		for o, targets := range byOwner {
			edges, err := j.Edges.Get(ctx, o.user, o.kind, targets)
			if err != nil {
				return "", false, err
			}
			for _, id := range targets {
				if edges[id].Version > 0 {
					continue
				}
				ref := Ref{UserID: o.user, Kind: o.kind, TargetID: id}
				if err := j.Counts.ForgetMarker(ctx, ref, markers[ref].Version); err != nil {
					return "", false, err
				}
				w.Findings.Found("marker", fmt.Sprintf("%s: counted active, the edge is gone", Target{Kind: o.kind, ID: id}), true)
			}
		}
		if next == nil {
			return "", true, nil
		}
		c.After = next
		if err := w.Checkpoint(ctx, c.String()); err != nil {
			return "", false, err
		}
	}
}
