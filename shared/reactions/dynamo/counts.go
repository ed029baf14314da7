package dynamo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/errs"
	"github.com/rallyhq/rally/shared/reactions"
	"github.com/rallyhq/rally/shared/schema"
)

// Counts writes five of the Counters table's item families (see
// schema.CountersTotalSK and the keys declared with it): a target's total
// (its count, its all-time trending total, and the intent written with it)
// and its hourly (h#2026112210) and daily (d#20261122) trending buckets
// under pk {kind}#{target}, the applied markers, the intents (see
// applyOnce) and the trending snapshots.
//
// Counts hold states, not sums of deltas (reactions.Counted): each edge's
// marker records the state the counts hold for it, and a change moves the
// counts by the difference between that state and the one the change
// leaves. So an edge's newest change, applied once, makes its counts right
// whatever came before it: a change parked behind newer ones and redriven
// days later is older than the marker and changes nothing, a change that
// never arrives is made good by the next one, and erasing an edge takes
// back exactly what it counted. A bucket takes an edge's activation in the
// span the edge became active in (reactions.Change.Since), and its end
// takes it back from the same span.
const (
	hourlyRetention = 49 * time.Hour
	dailyRetention  = 9 * 24 * time.Hour
	// inactiveRetention is how long a marker of an edge counted inactive
	// outlives its last write: longer than any change older than it can
	// come back (a stream keeps records 24 h, a parked batch is archived
	// within half of that and kept 30 days from then), so an older change
	// redriven late still finds it. A marker of an edge counted active
	// never expires: its state is part of the count.
	inactiveRetention = 32 * 24 * time.Hour
	// maxTransactItems is DynamoDB's limit; a unit leaves room for the
	// intent.
	maxTransactItems = ddb.MaxTransact
	maxUnitItems     = maxTransactItems - 1
	// maxIntentBytes keeps an intent well under DynamoDB's 400 KB item
	// limit: a few thousand edges.
	maxIntentBytes = 300 << 10
)

// targetKey is a target's key in the by_target index and in Counters.
func targetKey(t reactions.Target) string { return string(t.Kind) + "#" + t.ID }

func parseTargetKey(s string) (reactions.Target, bool) {
	kind, id, ok := strings.Cut(s, "#")
	if !ok {
		return reactions.Target{}, false
	}
	k, err := reactions.ParseKind(kind)
	if err != nil {
		return reactions.Target{}, false
	}
	return reactions.Target{Kind: k, ID: id}, true
}

func bucketSK(b reactions.BucketRef) string { return string(b.Span) + "#" + b.Name() }

func parseBucketSK(sk string) (reactions.BucketRef, bool) {
	span, name, ok := strings.Cut(sk, "#")
	if !ok {
		return reactions.BucketRef{}, false
	}
	switch reactions.Span(span) {
	case reactions.Hourly:
		t, err := time.Parse("2006010215", name)
		return reactions.BucketRef{Span: reactions.Hourly, Start: t}, err == nil
	case reactions.Daily:
		t, err := time.Parse("20060102", name)
		return reactions.BucketRef{Span: reactions.Daily, Start: t}, err == nil
	}
	return reactions.BucketRef{}, false
}

// Counts keeps durable counts and trending buckets in the Counters table.
type Counts struct {
	DB    ddb.DB
	Table string

	// finished are intents this instance finished (deleted): a total that
	// still names one needs no read to learn it is gone. Most batches touch
	// targets whose last intent this instance wrote.
	finished finishedIntents
}

var _ reactions.Counts = (*Counts)(nil)

var errRaced = errors.New("another writer applied some of these changes meanwhile")

// maxRaces is how many times in a row Apply reads again after losing a
// race without committing anything.
const maxRaces = 8

// Apply counts each edge's newest change once, writing each target's total
// once per batch (see applyOnce), and tells committed (when not nil) what
// each commit moved before its markers are written. A transaction that loses a race to another
// writer of its targets is read again from the start, as many times as it
// takes while changes commit, up to maxRaces losses in a row.
func (s *Counts) Apply(ctx context.Context, changes []reactions.Change, now time.Time, committed reactions.Committed) (int, error) {
	total := 0
	for lost := 0; ; {
		n, err := s.applyOnce(ctx, changes, now, committed)
		total += n
		if !errors.Is(err, errRaced) {
			return total, err
		}
		if n > 0 {
			lost = 0
		}
		if lost++; lost == maxRaces {
			return total, err
		}
		if err := ddb.Pause(ctx, lost); err != nil {
			return total, err
		}
	}
}

// edgeRun is one edge of a batch: the newest of its changes there, and
// the state the counts hold for it (its marker).
type edgeRun struct {
	ref reactions.Ref
	// seen is the edge's marker: the state counted (Version 0: none);
	// marked is whether the marker exists (an erasure's placeholder is
	// one at version 0).
	seen   reactions.Counted
	marked bool
	// next is the newest change of the edge in the batch; versions are
	// those of all its changes there (what applying next applies are the
	// ones past the marker).
	next     reactions.Change
	versions []int64
}

// changes is how many of the edge's changes in the batch are past its
// marker: what applying its newest applies.
func (r *edgeRun) changes() int {
	n := 0
	for _, v := range r.versions {
		if v > r.seen.Version {
			n++
		}
	}
	return n
}

// intentBytes is about what r takes in an intent's edges.
func (r *edgeRun) intentBytes() int { return len(r.ref.UserID) + 64 }

// bucketDeltas is what applying r moves in the target's trending buckets:
// the counted activation leaves its spans, the new one joins its own.
// Buckets past their retention are left alone: nothing reads them.
func (r *edgeRun) bucketDeltas(now time.Time) map[reactions.BucketRef]int64 {
	deltas := map[reactions.BucketRef]int64{}
	move := func(c reactions.Counted, d int64) {
		if !c.Trending() {
			return
		}
		for _, b := range []reactions.BucketRef{reactions.BucketOf(reactions.Hourly, c.Since), reactions.BucketOf(reactions.Daily, c.Since)} {
			if bucketExpiry(b).After(now) {
				deltas[b] += d
			}
		}
	}
	move(r.seen, -1)
	move(r.next.Counted(), +1)
	for b, d := range deltas {
		if d == 0 {
			delete(deltas, b)
		}
	}
	return deltas
}

// bucketExpiry is when a bucket is no longer read (its TTL).
func bucketExpiry(b reactions.BucketRef) time.Time {
	if b.Span == reactions.Daily {
		return b.Start.Add(dailyRetention)
	}
	return b.Start.Add(hourlyRetention)
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// total is what applyOnce reads of a target's total item.
type total struct {
	ver    int64  // 0: no total yet
	intent string // the intent written with it, if any
}

// unit is what one transaction writes of one target: its total and
// buckets, for the changes of its edges.
type unit struct {
	target reactions.Target
	// expect is the total's ver the transaction requires (0: no total).
	expect  int64
	edges   []*edgeRun
	buckets map[reactions.BucketRef]int64
	delta   int64 // of the count
	trend   int64 // of the all-time trending total
	bytes   int   // of its edges in the intent
}

func newUnit(t reactions.Target, expect int64) *unit {
	return &unit{target: t, expect: expect, buckets: map[reactions.BucketRef]int64{}}
}

// items is how many transaction items the unit writes: its total, always
// (its ver guards the target against racing writers, even when the count
// does not move), and every bucket that moves.
func (u *unit) items() int {
	n := 1
	for _, d := range u.buckets {
		if d != 0 {
			n++
		}
	}
	return n
}

// fits reports whether r, moving buckets, may join the unit: a unit takes
// at most a transaction's items (its total and a bucket per span touched,
// counting buckets whose deltas may yet cancel out) and a share of an
// intent.
func (u *unit) fits(r *edgeRun, buckets map[reactions.BucketRef]int64) bool {
	if len(u.edges) == 0 {
		return true
	}
	n := len(u.buckets)
	for b := range buckets {
		if _, ok := u.buckets[b]; !ok {
			n++
		}
	}
	return 1+n <= maxUnitItems && u.bytes+r.intentBytes() <= maxIntentBytes
}

func (u *unit) add(r *edgeRun, buckets map[reactions.BucketRef]int64) {
	u.edges = append(u.edges, r)
	u.bytes += r.intentBytes()
	next := r.next.Counted()
	u.delta += b2i(next.Active) - b2i(r.seen.Active)
	u.trend += b2i(next.Trending()) - b2i(r.seen.Trending())
	for b, d := range buckets {
		u.buckets[b] += d
	}
}

// applyOnce applies a batch once, each edge's newest change once, and
// writes each target's total once:
//
//  1. It reads the touched targets' totals (each names the intent written
//     with it), then the intents they name, then the markers of the
//     batch's edges (an edge's marker is the state counted).
//  2. It finishes every intent still there: the transaction that wrote it
//     committed, but its markers may not all be written yet.
//  3. It keeps each edge's newest change if it is newer than its marker,
//     coalesces them into one unit per target, and commits units in
//     transactions: per target the total, on condition its ver is still
//     the one read (bumping ver and naming the transaction's intent), and
//     the buckets that move, plus one intent item listing every edge
//     counted with the state counted.
//  4. After each commit it tells committed what the commit moved (so
//     Redis mirrors it), then finishes the transaction's own intent:
//     writes the markers (deletes those of deleted edges), then deletes
//     the intent.
//
// A crash between a commit and the end of its intent leaves the counts
// right and the intent behind; the next batch that touches any of its
// targets (the redelivery of this one) tells its committed what the
// intent moved and finishes it before it reads markers. An intent is finished before any newer transaction on its
// targets commits: the newer one read the total naming it, and its ver
// condition fails if another commit came between. The read order is what
// makes this exact: markers read before the totals could miss those an
// intent finished between the two reads, pairing a total's new ver with
// old markers. Markers only ever grow (each write is conditional), so a
// finisher that stalled never sets one back.
//
// A target's unit is split over several transactions only when it would
// not fit one: more than maxUnitItems-1 buckets, or edges filling more
// than maxIntentBytes of an intent (thousands of edges). Its parts commit
// in order, each expecting the ver the previous one left.
func (s *Counts) applyOnce(ctx context.Context, changes []reactions.Change, now time.Time, committed reactions.Committed) (int, error) {
	runs := byEdge(changes)
	totals, err := s.readTotals(ctx, targetsOf(runs))
	if err != nil {
		return 0, err
	}
	if err := s.finishNamed(ctx, totals, now, committed); err != nil {
		return 0, err
	}
	if err := s.readMarkers(ctx, runs); err != nil {
		return 0, err
	}
	runs = unapplied(runs)
	if err := s.forgetUncounted(ctx, runs); err != nil {
		return 0, err
	}
	applied := 0
	for _, tx := range pack(coalesce(counting(runs), totals, now)) {
		in := newIntent(tx)
		items, n := s.transactItems(tx, in, now)
		_, err := s.DB.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
		if raced(err) {
			return applied, errRaced
		}
		if err != nil {
			return applied, fmt.Errorf("apply %d reaction changes: %w", n, err)
		}
		applied += n
		if committed != nil {
			if err := committed(ctx, in.touched()); err != nil {
				return applied, err
			}
		}
		if err := s.finish(ctx, in, now); err != nil {
			return applied, fmt.Errorf("mark %d reaction changes counted: %w", n, err)
		}
	}
	for _, r := range runs {
		if uncounted(r) && r.marked {
			applied += r.changes()
		}
	}
	return applied, nil
}

// uncounted reports whether r is the deletion of an edge the counts hold
// nothing for: it moves no count, and leaves no marker behind.
func uncounted(r *edgeRun) bool { return r.next.Deleted && !r.seen.Active }

// counting drops the runs that move nothing (see uncounted).
func counting(runs []*edgeRun) []*edgeRun {
	out := runs[:0:0]
	for _, r := range runs {
		if !uncounted(r) {
			out = append(out, r)
		}
	}
	return out
}

// forgetUncounted deletes the markers of deleted edges the counts hold
// nothing for (an erasure's placeholder, or an edge counted inactive):
// nothing is left to count, and no marker may outlive the edge. Each
// delete is conditional on the marker being older than the deletion.
func (s *Counts) forgetUncounted(ctx context.Context, runs []*edgeRun) error {
	for _, r := range runs {
		if !uncounted(r) || !r.marked {
			continue
		}
		if err := s.deleteMarker(ctx, r.ref.UserID, targetKey(r.ref.Target()), r.next.Version); err != nil {
			return err
		}
	}
	return nil
}

// raced reports whether a transaction was cancelled by another writer: a
// total's ver moved on, or a transaction on the same items ran at once.
func raced(err error) bool {
	var tce *types.TransactionCanceledException
	if !errors.As(err, &tce) {
		return false
	}
	for _, r := range tce.CancellationReasons {
		if code := aws.ToString(r.Code); code == "ConditionalCheckFailed" || code == "TransactionConflict" {
			return true
		}
	}
	return false
}

// byEdge groups changes by edge, in the order edges first appear, keeping
// each edge's newest.
func byEdge(changes []reactions.Change) []*edgeRun {
	byRef := map[reactions.Ref]*edgeRun{}
	var runs []*edgeRun
	for _, c := range changes {
		r := byRef[c.Ref]
		if r == nil {
			r = &edgeRun{ref: c.Ref, next: c}
			byRef[c.Ref] = r
			runs = append(runs, r)
		}
		if !slices.Contains(r.versions, c.Version) {
			r.versions = append(r.versions, c.Version)
		}
		if c.Version > r.next.Version {
			r.next = c
		}
	}
	return runs
}

func totalKey(t reactions.Target) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{schema.AttrPK: ddb.S(targetKey(t)), schema.AttrSK: ddb.S(schema.CountersTotalSK)}
}

// targetsOf lists the runs' targets.
func targetsOf(runs []*edgeRun) []reactions.Target {
	targets := make([]reactions.Target, 0, len(runs))
	for _, r := range runs {
		targets = append(targets, r.ref.Target())
	}
	return targets
}

// readTotals reads the ver and intent of the totals of targets.
func (s *Counts) readTotals(ctx context.Context, targets []reactions.Target) (map[reactions.Target]total, error) {
	totals := map[reactions.Target]total{}
	var keys []map[string]types.AttributeValue
	for _, t := range targets {
		if _, ok := totals[t]; !ok {
			totals[t] = total{}
			keys = append(keys, totalKey(t))
		}
	}
	items, err := ddb.BatchGet(ctx, s.DB, s.Table, keys, true, schema.AttrPK, schema.AttrVer, schema.AttrIntent)
	if err != nil {
		return nil, fmt.Errorf("read totals: %w", err)
	}
	for _, it := range items {
		var tot struct {
			PK     string `dynamodbav:"pk"`
			Ver    int64  `dynamodbav:"ver"`
			Intent string `dynamodbav:"intent"`
		}
		if err := attributevalue.UnmarshalMap(it, &tot); err != nil {
			return nil, fmt.Errorf("decode a total: %w", err)
		}
		if t, ok := parseTargetKey(tot.PK); ok {
			totals[t] = total{ver: tot.Ver, intent: tot.Intent}
		}
	}
	return totals, nil
}

// readMarkers sets each run's seen to its edge's marker.
func (s *Counts) readMarkers(ctx context.Context, runs []*edgeRun) error {
	byRef := make(map[reactions.Ref]*edgeRun, len(runs))
	keys := make([]map[string]types.AttributeValue, 0, len(runs))
	for _, r := range runs {
		byRef[r.ref] = r
		keys = append(keys, markerKey(r.ref))
	}
	items, err := ddb.BatchGet(ctx, s.DB, s.Table, keys, true)
	if err != nil {
		return fmt.Errorf("read applied markers: %w", err)
	}
	for _, it := range items {
		ref, counted, err := decodeMarker(it)
		if err != nil {
			return err
		}
		if r := byRef[ref]; r != nil {
			r.seen, r.marked = counted, true
		}
	}
	return nil
}

// unapplied drops the edges whose newest change is not newer than their
// marker: the counts already hold it, or a newer state.
func unapplied(runs []*edgeRun) []*edgeRun {
	var out []*edgeRun
	for _, r := range runs {
		if r.next.Version > r.seen.Version {
			out = append(out, r)
		}
	}
	return out
}

// coalesce groups runs into one unit per target, in the order targets
// first appear, splitting a target's only when it would not fit one
// transaction (see unit.fits); each part expects the ver its predecessor
// leaves.
func coalesce(runs []*edgeRun, totals map[reactions.Target]total, now time.Time) []*unit {
	var targets []reactions.Target
	byTarget := map[reactions.Target][]*edgeRun{}
	for _, r := range runs {
		t := r.ref.Target()
		if _, ok := byTarget[t]; !ok {
			targets = append(targets, t)
		}
		byTarget[t] = append(byTarget[t], r)
	}
	var units []*unit
	for _, t := range targets {
		u := newUnit(t, totals[t].ver)
		for _, r := range byTarget[t] {
			buckets := r.bucketDeltas(now)
			if !u.fits(r, buckets) {
				units = append(units, u)
				u = newUnit(t, u.expect+1)
			}
			u.add(r, buckets)
		}
		units = append(units, u)
	}
	return units
}

// pack groups units into transactions of at most maxTransactItems items
// (one of them the intent) whose intent stays within maxIntentBytes, never
// two units of one target in one transaction (a transaction may touch an
// item only once, and a target's parts must commit in order).
func pack(units []*unit) [][]*unit {
	var txs [][]*unit
	var cur []*unit
	size, bytes := 1, 0
	inTx := map[reactions.Target]bool{}
	for _, u := range units {
		if len(cur) > 0 && (size+u.items() > maxTransactItems || bytes+u.bytes > maxIntentBytes || inTx[u.target]) {
			txs = append(txs, cur)
			cur, size, bytes, inTx = nil, 1, 0, map[reactions.Target]bool{}
		}
		cur = append(cur, u)
		size += u.items()
		bytes += u.bytes
		inTx[u.target] = true
	}
	if len(cur) > 0 {
		txs = append(txs, cur)
	}
	return txs
}

func markerKey(ref reactions.Ref) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		schema.AttrPK: ddb.S(schema.CountersAppliedPrefix + ref.UserID),
		schema.AttrSK: ddb.S(targetKey(ref.Target())),
	}
}

// transactItems writes, for each unit, its total and its buckets that
// move, and the intent; n is how many changes it counts.
func (s *Counts) transactItems(tx []*unit, in intent, now time.Time) (items []types.TransactWriteItem, n int) {
	ver := expression.Name(schema.AttrVer)
	stamp := expression.Value(ddb.FormatTime(now))
	for _, u := range tx {
		for _, r := range u.edges {
			n += r.changes()
		}
		// The total must still be the one read: no other transaction
		// counted changes of the target since.
		seen := ver.Equal(expression.Value(u.expect))
		if u.expect == 0 {
			seen = expression.Name(schema.AttrPK).AttributeNotExists().Or(seen)
		}
		count, trend := expression.Name(schema.AttrCount), expression.Name(schema.AttrTrendTotal)
		// A total written before the trending total existed trends as
		// its count: every edge it counted was in trending.
		trendWas := expression.IfNotExists(trend, expression.IfNotExists(count, expression.Value(0)))
		tot := expression.Add(count, expression.Value(u.delta)).
			Set(trend, expression.Plus(trendWas, expression.Value(u.trend))).
			Add(ver, expression.Value(1)).
			Set(expression.Name(schema.AttrIntent), expression.Value(in.id)).
			Set(expression.Name(schema.AttrUpdatedAt), stamp)
		items = append(items, types.TransactWriteItem{Update: ddb.TransactUpdate(s.Table, totalKey(u.target),
			ddb.MustBuild(expression.NewBuilder().WithCondition(seen).WithUpdate(tot)))})
		tk := ddb.S(targetKey(u.target))
		for b, d := range u.buckets {
			if d == 0 {
				continue
			}
			bucket := expression.Add(expression.Name(schema.AttrDelta), expression.Value(d)).
				Add(ver, expression.Value(1)).
				Set(expression.Name(schema.AttrUpdatedAt), stamp).
				Set(expression.Name(schema.TTL), expression.Value(bucketExpiry(b).Unix()))
			key := map[string]types.AttributeValue{schema.AttrPK: tk, schema.AttrSK: ddb.S(bucketSK(b))}
			items = append(items, types.TransactWriteItem{Update: ddb.TransactUpdate(s.Table, key,
				ddb.MustBuild(expression.NewBuilder().WithUpdate(bucket)))})
		}
	}
	items = append(items, types.TransactWriteItem{Put: &types.Put{TableName: aws.String(s.Table), Item: in.item(now)}})
	return items, n
}

// counterItem is any item under a target's partition.
type counterItem struct {
	PK         string `dynamodbav:"pk"`
	SK         string `dynamodbav:"sk"`
	Count      int64  `dynamodbav:"count"`
	TrendTotal *int64 `dynamodbav:"trend_total"`
	Delta      int64  `dynamodbav:"delta"`
	Ver        int64  `dynamodbav:"ver"`
	UpdatedAt  string `dynamodbav:"updated_at"`
	ExpiresAt  int64  `dynamodbav:"expires_at"`
}

// trending is a total item's all-time trending total; one written before
// it existed trends as its count.
func (it counterItem) trending() int64 {
	if it.TrendTotal == nil {
		return it.Count
	}
	return *it.TrendTotal
}

// tallies folds target-partition items into tallies, skipping expired
// buckets (DynamoDB deletes expired items lazily) and foreign items.
func tallies(raw []map[string]types.AttributeValue, now time.Time) ([]reactions.Tally, error) {
	byTarget := map[reactions.Target]*reactions.Tally{}
	var order []reactions.Target
	for _, r := range raw {
		var it counterItem
		if err := attributevalue.UnmarshalMap(r, &it); err != nil {
			return nil, fmt.Errorf("decode counter item: %w", err)
		}
		t, ok := parseTargetKey(it.PK)
		if !ok {
			continue
		}
		ta := byTarget[t]
		if ta == nil {
			ta = &reactions.Tally{Target: t}
			byTarget[t] = ta
			order = append(order, t)
		}
		if it.SK == schema.CountersTotalSK {
			ta.HasTotal, ta.Count, ta.Trending, ta.Version, ta.UpdatedAt = true, it.Count, it.trending(), it.Ver, ddb.ParseTime(it.UpdatedAt)
			continue
		}
		if b, ok := parseBucketSK(it.SK); ok && (it.ExpiresAt == 0 || it.ExpiresAt > now.Unix()) {
			ta.Buckets = append(ta.Buckets, reactions.Bucket{BucketRef: b, Delta: it.Delta, Version: it.Ver})
		}
	}
	out := make([]reactions.Tally, 0, len(order))
	for _, t := range order {
		out = append(out, *byTarget[t])
	}
	return out, nil
}

// Tallies reads the totals and the named buckets of targets, consistently.
func (s *Counts) Tallies(ctx context.Context, touched map[reactions.Target][]reactions.BucketRef) ([]reactions.Tally, error) {
	var keys []map[string]types.AttributeValue
	for t, buckets := range touched {
		tk := ddb.S(targetKey(t))
		keys = append(keys, map[string]types.AttributeValue{schema.AttrPK: tk, schema.AttrSK: ddb.S(schema.CountersTotalSK)})
		for _, b := range buckets {
			keys = append(keys, map[string]types.AttributeValue{schema.AttrPK: tk, schema.AttrSK: ddb.S(bucketSK(b))})
		}
	}
	raw, err := ddb.BatchGet(ctx, s.DB, s.Table, keys, true)
	if err != nil {
		return nil, fmt.Errorf("read tallies: %w", err)
	}
	return tallies(raw, time.Time{})
}

// TargetTally reads a target's total and live buckets.
func (s *Counts) TargetTally(ctx context.Context, t reactions.Target, now time.Time) (reactions.Tally, error) {
	in := ddb.QueryInput(s.Table, ddb.MustBuild(expression.NewBuilder().WithKeyCondition(
		expression.Key(schema.AttrPK).Equal(expression.Value(targetKey(t))))))
	in.ConsistentRead = aws.Bool(true)
	var raw []map[string]types.AttributeValue
	for {
		out, err := s.DB.Query(ctx, in)
		if err != nil {
			return reactions.Tally{}, fmt.Errorf("read tally of %s: %w", t, err)
		}
		raw = append(raw, out.Items...)
		if len(out.LastEvaluatedKey) == 0 {
			break
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
	ts, err := tallies(raw, now)
	if err != nil || len(ts) == 0 {
		return reactions.Tally{Target: t}, err
	}
	return ts[0], nil
}

// ScanTallies reads one page of every target's tallies.
func (s *Counts) ScanTallies(ctx context.Context, after reactions.Position, now time.Time) ([]reactions.Tally, reactions.Position, error) {
	in := &dynamodb.ScanInput{TableName: aws.String(s.Table), Limit: aws.Int32(1000)}
	if after != nil {
		in.ExclusiveStartKey = map[string]types.AttributeValue{
			schema.AttrPK: ddb.S(after[schema.AttrPK]), schema.AttrSK: ddb.S(after[schema.AttrSK]),
		}
	}
	out, err := s.DB.Scan(ctx, in)
	if err != nil {
		return nil, nil, fmt.Errorf("scan tallies: %w", err)
	}
	ts, err := tallies(out.Items, now)
	if err != nil {
		return nil, nil, err
	}
	return ts, position(out.LastEvaluatedKey), nil
}

// Count reads a target's durable count.
func (s *Counts) Count(ctx context.Context, t reactions.Target) (reactions.Count, error) {
	out, err := s.DB.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(s.Table),
		Key:       map[string]types.AttributeValue{schema.AttrPK: ddb.S(targetKey(t)), schema.AttrSK: ddb.S(schema.CountersTotalSK)},
	})
	if err != nil {
		return reactions.Count{}, errs.Wrap(errs.Unavailable, fmt.Errorf("read count of %s: %w", t, err), "the counts store is unreachable")
	}
	var it counterItem
	if err := attributevalue.UnmarshalMap(out.Item, &it); err != nil {
		return reactions.Count{}, fmt.Errorf("decode count of %s: %w", t, err)
	}
	return reactions.Count{N: it.Count, AsOf: ddb.ParseTime(it.UpdatedAt), Version: it.Ver}, nil
}

type snapshotItem struct {
	PK    string `dynamodbav:"pk"`
	SK    string `dynamodbav:"sk"`
	Items string `dynamodbav:"items"`
	AsOf  string `dynamodbav:"as_of"`
}

type snapshotEntry struct {
	Rank  int    `json:"r"`
	ID    string `json:"id"`
	Score int64  `json:"s"`
}

// SaveSnapshot stores a trending list for reads while Redis is down. A
// snapshot computed as of an older change never replaces a newer one; one
// as of the same change does (the window moved on while nothing changed).
func (s *Counts) SaveSnapshot(ctx context.Context, kind reactions.Kind, top reactions.Top) error {
	entries := make([]snapshotEntry, len(top.Items))
	for i, it := range top.Items {
		entries[i] = snapshotEntry{Rank: it.Rank, ID: it.ID, Score: it.Score}
	}
	body, err := json.Marshal(entries)
	if err != nil {
		return err
	}
	item, err := attributevalue.MarshalMap(snapshotItem{
		PK: schema.CountersSnapshotPrefix + string(kind), SK: string(top.Window), Items: string(body), AsOf: ddb.FormatTime(top.AsOf),
	})
	if err != nil {
		return err
	}
	newer := expression.Name(schema.AttrPK).AttributeNotExists().
		Or(expression.Name(schema.AttrAsOf).LessThanEqual(expression.Value(ddb.FormatTime(top.AsOf))))
	_, err = s.DB.PutItem(ctx, ddb.PutInput(s.Table, item, ddb.MustBuild(expression.NewBuilder().WithCondition(newer))))
	if err != nil && !ddb.IsConditionFailed(err) {
		return fmt.Errorf("save %s %s snapshot: %w", kind, top.Window, err)
	}
	return nil
}

// Snapshot reads the stored trending list of a window.
func (s *Counts) Snapshot(ctx context.Context, kind reactions.Kind, w reactions.Window) (reactions.Top, bool, error) {
	out, err := s.DB.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(s.Table),
		Key:       map[string]types.AttributeValue{schema.AttrPK: ddb.S(schema.CountersSnapshotPrefix + string(kind)), schema.AttrSK: ddb.S(string(w))},
	})
	if err != nil {
		return reactions.Top{}, false, errs.Wrap(errs.Unavailable, err, "the counts store is unreachable")
	}
	if len(out.Item) == 0 {
		return reactions.Top{Window: w}, false, nil
	}
	var it snapshotItem
	if err := attributevalue.UnmarshalMap(out.Item, &it); err != nil {
		return reactions.Top{}, false, fmt.Errorf("decode snapshot: %w", err)
	}
	var entries []snapshotEntry
	if err := json.Unmarshal([]byte(it.Items), &entries); err != nil {
		return reactions.Top{}, false, fmt.Errorf("decode snapshot entries: %w", err)
	}
	top := reactions.Top{Window: w, AsOf: ddb.ParseTime(it.AsOf)}
	for _, e := range entries {
		top.Items = append(top.Items, reactions.Ranked{Rank: e.Rank, ID: e.ID, Score: e.Score})
	}
	return top, true, nil
}
