package dynamo

import (
	"fmt"
	"testing"
	"time"

	"github.com/rallyhq/rally/shared/reactions"
)

// A hot target touched by many users in one batch is split across
// transactions that each stay within DynamoDB's item limit and never touch
// the target's total twice.
func TestPackKeepsTransactionsWithinLimits(t *testing.T) {
	at := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	var runs []*edgeRun
	for i := 0; i < 450; i++ {
		target := "hot"
		if i%3 == 0 {
			target = fmt.Sprintf("g%d", i)
		}
		ref := reactions.Ref{UserID: fmt.Sprintf("u%d", i), Kind: reactions.Favorite, TargetID: target}
		runs = append(runs, &edgeRun{ref: ref, changes: []reactions.Change{
			{Ref: ref, Version: 1, Active: true, Delta: 1, At: at.Add(time.Duration(i) * time.Minute)},
		}})
	}
	txs := pack(runs)
	edges, delta := 0, int64(0)
	for i, tx := range txs {
		size := 0
		targets := map[reactions.Target]bool{}
		for _, u := range tx {
			size += u.items()
			if targets[u.target] {
				t.Fatalf("transaction %d touches %s twice", i, u.target)
			}
			targets[u.target] = true
			edges += len(u.edges)
			delta += u.delta
		}
		if size > maxTransactItems {
			t.Fatalf("transaction %d has %d items", i, size)
		}
	}
	if edges != 450 || delta != 450 {
		t.Fatalf("packed %d edges with delta %d, want 450 and 450", edges, delta)
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
