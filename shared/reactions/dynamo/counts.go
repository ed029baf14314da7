package dynamo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
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

// Counts writes four of the Counters table's item families (see
// schema.CountersTotalSK and the keys declared with it): a target's total
// (its count and its all-time trending total) and its hourly (h#2026112210)
// and daily (d#20261122) trending buckets under pk {kind}#{target}, the
// applied markers and the trending snapshots. Counts take every change;
// trending (the trending total and the buckets) only the changes that
// count in trending (reactions.Change.Trend).
const (
	hourlyRetention = 49 * time.Hour
	dailyRetention  = 9 * 24 * time.Hour
	// Markers outlive every possible redelivery: stream records live 24h.
	markerRetention = 48 * time.Hour
	// maxTransactItems leaves room under DynamoDB's 100-item limit.
	maxTransactItems = ddb.MaxTransact
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
}

var _ reactions.Counts = (*Counts)(nil)

var errRaced = errors.New("another writer applied some of these changes meanwhile")

// Apply counts each change at most once. For every edge it reads the last
// version counted (a marker), keeps only newer changes, and commits, in one
// transaction per chunk, the new markers together with the coalesced deltas
// of their targets: a redelivered batch, or half of one, finds its markers
// and changes nothing. A chunk that loses a race is re-read and retried.
func (s *Counts) Apply(ctx context.Context, changes []reactions.Change, now time.Time) (int, error) {
	total := 0
	for attempt := 0; ; attempt++ {
		n, err := s.applyOnce(ctx, changes, now)
		total += n
		if err == nil || !errors.Is(err, errRaced) || attempt == 5 {
			return total, err
		}
	}
}

type edgeRun struct {
	ref     reactions.Ref
	seen    int64 // marker version read; 0 = none
	changes []reactions.Change
}

func (r *edgeRun) maxVersion() int64 { return r.changes[len(r.changes)-1].Version }

type unit struct {
	target  reactions.Target
	edges   []*edgeRun
	buckets map[reactions.BucketRef]int64
	delta   int64 // of the count
	trend   int64 // of the all-time trending total
}

func newUnit(t reactions.Target) *unit {
	return &unit{target: t, buckets: map[reactions.BucketRef]int64{}}
}

// items is how many transaction items the unit writes: a marker per edge,
// the total, and a bucket per span touched (an upper bound: buckets whose
// deltas cancel out are skipped when written).
func (u *unit) items() int { return len(u.edges) + 1 + len(u.buckets) }

// growth is how many items adding r would add.
func (u *unit) growth(r *edgeRun) int {
	n := 1
	seen := map[reactions.BucketRef]bool{}
	for _, c := range r.changes {
		for _, b := range changeBuckets(c) {
			if _, ok := u.buckets[b]; !ok && !seen[b] {
				seen[b] = true
				n++
			}
		}
	}
	return n
}

func (u *unit) add(r *edgeRun) {
	u.edges = append(u.edges, r)
	for _, c := range r.changes {
		u.delta += int64(c.Delta)
		if c.Trend {
			u.trend += int64(c.Delta)
		}
		for _, b := range changeBuckets(c) {
			u.buckets[b] += int64(c.Delta)
		}
	}
}

// changeBuckets names the trending buckets a change moves: none when it
// does not count in trending.
func changeBuckets(c reactions.Change) []reactions.BucketRef {
	if c.Delta == 0 || !c.Trend {
		return nil
	}
	return []reactions.BucketRef{reactions.BucketOf(reactions.Hourly, c.At), reactions.BucketOf(reactions.Daily, c.At)}
}

func (s *Counts) applyOnce(ctx context.Context, changes []reactions.Change, now time.Time) (int, error) {
	runs, err := s.unapplied(ctx, changes)
	if err != nil || len(runs) == 0 {
		return 0, err
	}
	applied := 0
	for _, tx := range pack(runs) {
		items, n := s.transactItems(tx, now)
		_, err := s.DB.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
		if failed, ok := ddb.CancelledBy(err); ok && len(failed) > 0 {
			return applied, errRaced
		}
		if err != nil {
			return applied, fmt.Errorf("apply %d reaction changes: %w", n, err)
		}
		applied += n
	}
	return applied, nil
}

// unapplied groups changes by edge and drops those at or below the edge's
// marker.
func (s *Counts) unapplied(ctx context.Context, changes []reactions.Change) ([]*edgeRun, error) {
	byRef := map[reactions.Ref]*edgeRun{}
	var order []*edgeRun
	for _, c := range changes {
		r := byRef[c.Ref]
		if r == nil {
			r = &edgeRun{ref: c.Ref}
			byRef[c.Ref] = r
			order = append(order, r)
		}
		r.changes = append(r.changes, c)
	}
	keys := make([]map[string]types.AttributeValue, 0, len(order))
	for _, r := range order {
		keys = append(keys, markerKey(r.ref))
	}
	items, err := ddb.BatchGet(ctx, s.DB, s.Table, keys, true)
	if err != nil {
		return nil, fmt.Errorf("read applied markers: %w", err)
	}
	for _, it := range items {
		var m struct {
			PK  string `dynamodbav:"pk"`
			SK  string `dynamodbav:"sk"`
			Ver int64  `dynamodbav:"ver"`
		}
		if err := attributevalue.UnmarshalMap(it, &m); err != nil {
			return nil, fmt.Errorf("decode applied marker: %w", err)
		}
		t, ok := parseTargetKey(m.SK)
		if !ok {
			continue
		}
		ref := reactions.Ref{UserID: strings.TrimPrefix(m.PK, schema.CountersAppliedPrefix), Kind: t.Kind, TargetID: t.ID}
		if r := byRef[ref]; r != nil {
			r.seen = m.Ver
		}
	}
	var runs []*edgeRun
	for _, r := range order {
		sort.Slice(r.changes, func(i, j int) bool { return r.changes[i].Version < r.changes[j].Version })
		var keep []reactions.Change
		for _, c := range r.changes {
			if c.Version > r.seen && (len(keep) == 0 || keep[len(keep)-1].Version < c.Version) {
				keep = append(keep, c)
			}
		}
		if len(keep) > 0 {
			r.changes = keep
			runs = append(runs, r)
		}
	}
	return runs, nil
}

// pack groups edge runs into units per target, splitting a target's unit
// when it would exceed a transaction, and units into transactions of at
// most maxTransactItems items, never two units of one target in one
// transaction (a transaction may touch an item only once).
func pack(runs []*edgeRun) [][]*unit {
	var units []*unit
	open := map[reactions.Target]*unit{}
	for _, r := range runs {
		t := r.ref.Target()
		u := open[t]
		if u == nil {
			u = newUnit(t)
			open[t] = u
			units = append(units, u)
		} else if u.items()+u.growth(r) > maxTransactItems {
			u = newUnit(t)
			open[t] = u
			units = append(units, u)
		}
		u.add(r)
	}
	var txs [][]*unit
	var cur []*unit
	size := 0
	inTx := map[reactions.Target]bool{}
	for _, u := range units {
		if len(cur) > 0 && (size+u.items() > maxTransactItems || inTx[u.target]) {
			txs = append(txs, cur)
			cur, size, inTx = nil, 0, map[reactions.Target]bool{}
		}
		cur = append(cur, u)
		size += u.items()
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

func (s *Counts) transactItems(tx []*unit, now time.Time) ([]types.TransactWriteItem, int) {
	var items []types.TransactWriteItem
	n := 0
	ver := expression.Name(schema.AttrVer)
	stamp := expression.Value(ddb.FormatTime(now))
	for _, u := range tx {
		for _, r := range u.edges {
			n += len(r.changes)
			key := markerKey(r.ref)
			// The marker must still be the one unapplied read.
			seen := ver.Equal(expression.Value(r.seen))
			if r.seen == 0 {
				seen = expression.Name(schema.AttrPK).AttributeNotExists().Or(seen)
			}
			marker := map[string]types.AttributeValue{
				schema.AttrPK:  key[schema.AttrPK],
				schema.AttrSK:  key[schema.AttrSK],
				schema.AttrVer: ddb.N(r.maxVersion()),
				schema.TTL:     ddb.N(now.Add(markerRetention).Unix()),
			}
			items = append(items, types.TransactWriteItem{Put: ddb.TransactPut(s.Table, marker,
				ddb.MustBuild(expression.NewBuilder().WithCondition(seen)))})
		}
		tk := ddb.S(targetKey(u.target))
		if u.delta != 0 || u.trend != 0 {
			count, trend := expression.Name(schema.AttrCount), expression.Name(schema.AttrTrendTotal)
			// A total written before the trending total existed trends as
			// its count: every edge it counted was in trending.
			trendWas := expression.IfNotExists(trend, expression.IfNotExists(count, expression.Value(0)))
			total := expression.Add(count, expression.Value(u.delta)).
				Set(trend, expression.Plus(trendWas, expression.Value(u.trend))).
				Add(ver, expression.Value(1)).
				Set(expression.Name(schema.AttrUpdatedAt), stamp)
			key := map[string]types.AttributeValue{schema.AttrPK: tk, schema.AttrSK: ddb.S(schema.CountersTotalSK)}
			items = append(items, types.TransactWriteItem{Update: ddb.TransactUpdate(s.Table, key,
				ddb.MustBuild(expression.NewBuilder().WithUpdate(total)))})
		}
		for b, d := range u.buckets {
			if d == 0 {
				continue
			}
			keep := hourlyRetention
			if b.Span == reactions.Daily {
				keep = dailyRetention
			}
			bucket := expression.Add(expression.Name(schema.AttrDelta), expression.Value(d)).
				Add(ver, expression.Value(1)).
				Set(expression.Name(schema.AttrUpdatedAt), stamp).
				Set(expression.Name(schema.TTL), expression.Value(b.Start.Add(keep).Unix()))
			key := map[string]types.AttributeValue{schema.AttrPK: tk, schema.AttrSK: ddb.S(bucketSK(b))}
			items = append(items, types.TransactWriteItem{Update: ddb.TransactUpdate(s.Table, key,
				ddb.MustBuild(expression.NewBuilder().WithUpdate(bucket)))})
		}
	}
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
