package dynamo_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/shared/reactions"
	"github.com/rallyhq/rally/shared/reactions/dynamo"
	"github.com/rallyhq/rally/shared/schema"
)

func newCounts(t *testing.T) *dynamo.Counts {
	t.Helper()
	db, names, _ := testenv.DynamoDB(t)
	return &dynamo.Counts{DB: db, Table: names.Of(schema.Counters)}
}

// change is a change of a favorite that counts in trending.
func change(user, target string, ver int64, active bool, delta int, at time.Time) reactions.Change {
	c := reactions.Change{
		Ref:     reactions.Ref{UserID: user, Kind: reactions.Favorite, TargetID: target},
		Version: ver, Active: active, Delta: delta, At: at, Trend: true,
	}
	if active {
		c.Since = at
	}
	return c
}

// untrended is a change the fraud controls kept out of trending.
func untrended(c reactions.Change) reactions.Change {
	c.Trend = false
	return c
}

func count(t *testing.T, c *dynamo.Counts, target string) int64 {
	t.Helper()
	n, err := c.Count(context.Background(), reactions.Target{Kind: reactions.Favorite, ID: target})
	if err != nil {
		t.Fatal(err)
	}
	return n.N
}

// Lambda may redeliver a batch, or part of one; no change is counted twice.
func TestApplyCountsEveryChangeExactlyOnce(t *testing.T) {
	ctx := context.Background()
	c := newCounts(t)
	batch := []reactions.Change{
		change("u1", "g1", 1, true, 1, t0),
		change("u2", "g1", 1, true, 1, t0),
		change("u3", "g1", 1, true, 1, t0),
		change("u1", "g1", 2, false, -1, t0.Add(time.Minute)),
		change("u1", "g2", 1, true, 1, t0),
	}
	n, err := c.Apply(ctx, batch, t0, nil)
	if err != nil || n != 5 {
		t.Fatalf("first delivery applied %d, %v", n, err)
	}
	if g1, g2 := count(t, c, "g1"), count(t, c, "g2"); g1 != 2 || g2 != 1 {
		t.Fatalf("counts g1=%d g2=%d, want 2 and 1", g1, g2)
	}
	for name, again := range map[string][]reactions.Change{"whole batch": batch, "second half": batch[2:], "first half": batch[:3]} {
		n, err := c.Apply(ctx, again, t0, nil)
		if err != nil || n != 0 {
			t.Fatalf("%s redelivered: applied %d, %v", name, n, err)
		}
	}
	if g1, g2 := count(t, c, "g1"), count(t, c, "g2"); g1 != 2 || g2 != 1 {
		t.Fatalf("after redelivery g1=%d g2=%d, want 2 and 1", g1, g2)
	}
	// A redelivered record mixed with a new one: only the new one counts.
	n, err = c.Apply(ctx, []reactions.Change{batch[1], change("u2", "g1", 2, false, -1, t0.Add(2*time.Minute))}, t0, nil)
	if err != nil || n != 1 || count(t, c, "g1") != 1 {
		t.Fatalf("mixed batch applied %d (count %d), %v", n, count(t, c, "g1"), err)
	}
}

// A hot target touched by hundreds of users in one batch needs several
// transactions; the count and trending buckets still add up.
func TestApplyHotTargetAcrossTransactions(t *testing.T) {
	ctx := context.Background()
	c := newCounts(t)
	var batch []reactions.Change
	for i := 0; i < 260; i++ {
		batch = append(batch, change(fmt.Sprintf("u%03d", i), "hot", 1, true, 1, t0.Add(time.Duration(i%3)*time.Hour)))
	}
	if n, err := c.Apply(ctx, batch, t0, nil); err != nil || n != 260 {
		t.Fatalf("applied %d, %v", n, err)
	}
	if got := count(t, c, "hot"); got != 260 {
		t.Fatalf("count %d, want 260", got)
	}
	tally, err := c.TargetTally(ctx, reactions.Target{Kind: reactions.Favorite, ID: "hot"}, t0)
	if err != nil {
		t.Fatal(err)
	}
	var hourly, daily int64
	for _, b := range tally.Buckets {
		if b.Span == reactions.Hourly {
			hourly += b.Delta
		} else {
			daily += b.Delta
		}
	}
	if !tally.HasTotal || tally.Count != 260 || hourly != 260 || daily != 260 {
		t.Fatalf("tally %+v: hourly %d daily %d, want 260 each", tally, hourly, daily)
	}
	if n, err := c.Apply(ctx, batch, t0, nil); err != nil || n != 0 || count(t, c, "hot") != 260 {
		t.Fatalf("redelivery of the hot batch applied %d, %v", n, err)
	}
}

func TestTalliesScanAndExpiredBuckets(t *testing.T) {
	ctx := context.Background()
	c := newCounts(t)
	old := t0.Add(-3 * 24 * time.Hour)
	batch := []reactions.Change{change("u1", "g1", 1, true, 1, old), change("u2", "g1", 1, true, 1, t0), change("u1", "g2", 1, true, 1, t0)}
	if _, err := c.Apply(ctx, batch, t0, nil); err != nil {
		t.Fatal(err)
	}
	tally, err := c.TargetTally(ctx, reactions.Target{Kind: reactions.Favorite, ID: "g1"}, t0)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range tally.Buckets {
		if b.Span == reactions.Hourly && b.Start.Before(t0.Add(-48*time.Hour)) {
			t.Fatalf("an expired hourly bucket was returned: %+v", b)
		}
	}
	seen := map[string]int64{}
	var after reactions.Position
	for {
		ts, next, err := c.ScanTallies(ctx, after, t0)
		if err != nil {
			t.Fatal(err)
		}
		for _, ta := range ts {
			if ta.HasTotal {
				seen[ta.Target.ID] = ta.Count
			}
		}
		if next == nil {
			break
		}
		after = next
	}
	if seen["g1"] != 2 || seen["g2"] != 1 || len(seen) != 2 {
		t.Fatalf("scan found %v", seen)
	}
}

func TestSnapshotsNeverGoBackInTime(t *testing.T) {
	ctx := context.Background()
	c := newCounts(t)
	newer := reactions.Top{Window: reactions.Last24h, AsOf: t0, Items: []reactions.Ranked{{Rank: 1, ID: "g1", Score: 5}}}
	older := reactions.Top{Window: reactions.Last24h, AsOf: t0.Add(-time.Minute), Items: []reactions.Ranked{{Rank: 1, ID: "g2", Score: 9}}}
	if err := c.SaveSnapshot(ctx, reactions.Favorite, newer); err != nil {
		t.Fatal(err)
	}
	if err := c.SaveSnapshot(ctx, reactions.Favorite, older); err != nil {
		t.Fatal(err)
	}
	got, found, err := c.Snapshot(ctx, reactions.Favorite, reactions.Last24h)
	if err != nil || !found || len(got.Items) != 1 || got.Items[0].ID != "g1" || !got.AsOf.Equal(t0) {
		t.Fatalf("snapshot %+v found=%v err=%v", got, found, err)
	}
	if _, found, _ := c.Snapshot(ctx, reactions.Favorite, reactions.Last7d); found {
		t.Fatal("a window never saved was found")
	}
}

// tallyOf reads a target's total, trending total and the sums of its live
// hourly and daily buckets.
func tallyOf(t *testing.T, c *dynamo.Counts, target string) (count, trending, hourly, daily int64) {
	t.Helper()
	tally, err := c.TargetTally(context.Background(), reactions.Target{Kind: reactions.Favorite, ID: target}, t0)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range tally.Buckets {
		if b.Span == reactions.Hourly {
			hourly += b.Delta
		} else {
			daily += b.Delta
		}
	}
	return tally.Count, tally.Trending, hourly, daily
}

// Changes kept out of trending count in the count and nowhere in
// trending (all-time total, hourly and daily buckets); the end of such an
// edge takes nothing back from trending, the end of a trending one takes
// back its +1. Redelivered, whole or in part, nothing counts twice.
func TestChangesOutOfTrendingCountButDoNotTrend(t *testing.T) {
	ctx := context.Background()
	c := newCounts(t)
	if n, err := c.Apply(ctx, []reactions.Change{change("old-fan", "g1", 2, true, 1, t0)}, t0, nil); err != nil || n != 1 {
		t.Fatalf("applied %d, %v", n, err)
	}
	batch := []reactions.Change{
		change("trusted", "g1", 1, true, 1, t0),
		untrended(change("young", "g1", 1, true, 1, t0)),
		untrended(change("flipper", "g1", 11, true, 1, t0.Add(time.Minute))),
		untrended(change("flipper", "g1", 12, false, -1, t0.Add(2*time.Minute))),
		change("old-fan", "g1", 3, false, -1, t0.Add(3*time.Minute)),
	}
	if n, err := c.Apply(ctx, batch, t0, nil); err != nil || n != len(batch) {
		t.Fatalf("applied %d, %v", n, err)
	}
	// Counted: trusted and young; in trending: trusted (old-fan's
	// activation, in the same hour, is taken back).
	if count, trending, hourly, daily := tallyOf(t, c, "g1"); count != 2 || trending != 1 || hourly != 1 || daily != 1 {
		t.Fatalf("count %d, trending %d, hourly %d, daily %d; want 2, 1, 1, 1", count, trending, hourly, daily)
	}
	for name, again := range map[string][]reactions.Change{"whole batch": batch, "second half": batch[2:], "first half": batch[:3]} {
		if n, err := c.Apply(ctx, again, t0, nil); err != nil || n != 0 {
			t.Fatalf("%s redelivered: applied %d, %v", name, n, err)
		}
	}
	// One batch whose count does not move while its trending does: a
	// trusted favorite ends as an untrusted one starts.
	more := []reactions.Change{
		change("trusted", "g1", 2, false, -1, t0.Add(4*time.Minute)),
		untrended(change("young-2", "g1", 1, true, 1, t0.Add(4*time.Minute))),
	}
	if n, err := c.Apply(ctx, more, t0, nil); err != nil || n != 2 {
		t.Fatalf("applied %d, %v", n, err)
	}
	if count, trending, hourly, daily := tallyOf(t, c, "g1"); count != 2 || trending != 0 || hourly != 0 || daily != 0 {
		t.Fatalf("count %d, trending %d, hourly %d, daily %d; want 2, 0, 0, 0", count, trending, hourly, daily)
	}
}

// A total item written before the trending total existed (count alone)
// trends as its count, and keeps doing so once changes apply to it.
func TestATotalWithoutTrendingTotalTrendsAsItsCount(t *testing.T) {
	ctx := context.Background()
	db, names, _ := testenv.DynamoDB(t)
	c := &dynamo.Counts{DB: db, Table: names.Of(schema.Counters)}
	item := map[string]types.AttributeValue{
		schema.AttrPK: &types.AttributeValueMemberS{Value: "favorite#legacy"}, schema.AttrSK: &types.AttributeValueMemberS{Value: schema.CountersTotalSK},
		schema.AttrCount: &types.AttributeValueMemberN{Value: "5"}, schema.AttrVer: &types.AttributeValueMemberN{Value: "9"},
	}
	if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(names.Of(schema.Counters)), Item: item}); err != nil {
		t.Fatal(err)
	}
	if count, trending, _, _ := tallyOf(t, c, "legacy"); count != 5 || trending != 5 {
		t.Fatalf("before any change: count %d, trending %d; want 5 and 5", count, trending)
	}
	batch := []reactions.Change{untrended(change("young", "legacy", 1, true, 1, t0)), change("fan", "legacy", 2, true, 1, t0)}
	if _, err := c.Apply(ctx, batch, t0, nil); err != nil {
		t.Fatal(err)
	}
	if count, trending, _, _ := tallyOf(t, c, "legacy"); count != 7 || trending != 6 {
		t.Fatalf("after a young favorite and a trending one: count %d, trending %d; want 7 and 6", count, trending)
	}
}
