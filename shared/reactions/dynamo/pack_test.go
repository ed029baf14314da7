package dynamo

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rallyhq/rally/shared/reactions"
)

func favoriteRun(user, target string, at time.Time) *edgeRun {
	ref := reactions.Ref{UserID: user, Kind: reactions.Favorite, TargetID: target}
	return &edgeRun{ref: ref, versions: []int64{1}, next: reactions.Change{Ref: ref, Version: 1, Active: true, Delta: 1, At: at, Trend: true, Since: at}}
}

// checkLimits fails unless every transaction stays within DynamoDB's item
// limit (its units and the intent) and the intent's size, and touches a
// target once.
func checkLimits(t *testing.T, txs [][]*unit) {
	t.Helper()
	for i, tx := range txs {
		size, bytes := 1, 0
		targets := map[reactions.Target]bool{}
		for _, u := range tx {
			size += u.items()
			bytes += u.bytes
			if targets[u.target] {
				t.Fatalf("transaction %d touches %s twice", i, u.target)
			}
			targets[u.target] = true
		}
		if size > maxTransactItems || bytes > maxIntentBytes {
			t.Fatalf("transaction %d has %d items and %d bytes of intent", i, size, bytes)
		}
	}
}

// A hot target touched by hundreds of users in one batch is one unit, in
// one transaction: its total and buckets are written once.
func TestAHotTargetIsOneUnitInOneTransaction(t *testing.T) {
	at := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	var runs []*edgeRun
	for i := 0; i < 450; i++ {
		target := "hot"
		if i%3 == 0 {
			target = fmt.Sprintf("g%d", i)
		}
		runs = append(runs, favoriteRun(fmt.Sprintf("u%d", i), target, at.Add(time.Duration(i)*time.Minute)))
	}
	txs := pack(coalesce(runs, map[reactions.Target]total{{Kind: reactions.Favorite, ID: "hot"}: {ver: 7}}, at))
	checkLimits(t, txs)
	edges, delta, hot := 0, int64(0), 0
	for _, tx := range txs {
		for _, u := range tx {
			edges += len(u.edges)
			delta += u.delta
			if u.target.ID == "hot" {
				hot++
				if len(u.edges) != 300 || u.expect != 7 {
					t.Fatalf("the hot unit has %d edges and expects ver %d; want 300 and 7", len(u.edges), u.expect)
				}
			}
		}
	}
	if hot != 1 || edges != 450 || delta != 450 {
		t.Fatalf("%d hot units, %d edges packed with delta %d; want 1, 450 and 450", hot, edges, delta)
	}
}

// A target's unit is split only when one transaction cannot hold it: its
// changes span more buckets than a transaction's items, or its edges more
// than an intent holds. Its parts commit in order, each expecting the ver
// the one before leaves.
func TestAUnitSplitsOnlyWhenOneTransactionCannotHoldIt(t *testing.T) {
	at := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	cases := map[string][]*edgeRun{}
	for i := 0; i < 150; i++ {
		// A redelivered backlog: one change an hour for 150 hours.
		cases["buckets"] = append(cases["buckets"], favoriteRun(fmt.Sprintf("u%d", i), "slow", at.Add(time.Duration(i)*time.Hour)))
	}
	long := strings.Repeat("x", 200)
	for i := 0; i < 2000; i++ {
		cases["edges"] = append(cases["edges"], favoriteRun(fmt.Sprintf("%s%d", long, i), "huge", at))
	}
	for name, runs := range cases {
		target := runs[0].ref.Target()
		txs := pack(coalesce(runs, map[reactions.Target]total{target: {ver: 3}}, at))
		checkLimits(t, txs)
		if len(txs) != 2 {
			t.Fatalf("%s: %d transactions, want 2", name, len(txs))
		}
		edges, delta := 0, int64(0)
		for i, tx := range txs {
			if len(tx) != 1 || tx[0].expect != int64(3+i) {
				t.Fatalf("%s: transaction %d has %d units expecting ver %d; want 1 expecting %d", name, i, len(tx), tx[0].expect, 3+i)
			}
			edges += len(tx[0].edges)
			delta += tx[0].delta
		}
		if edges != len(runs) || delta != int64(len(runs)) {
			t.Fatalf("%s: packed %d edges with delta %d, want %d", name, edges, delta, len(runs))
		}
	}
}

func TestBucketNamesRoundTrip(t *testing.T) {
	at := time.Date(2026, 3, 9, 23, 59, 0, 0, time.UTC)
	for _, span := range []reactions.Span{reactions.Hourly, reactions.Daily} {
		b := reactions.BucketOf(span, at)
		got, ok := parseBucketSK(bucketSK(b))
		if !ok || got != b {
			t.Fatalf("%s: %+v round-tripped to %+v", span, b, got)
		}
	}
}
