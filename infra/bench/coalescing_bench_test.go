package main

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/shared/ddb"
)

func TestCoalescingTargetsHalfOnTheHotGameTheRestZipf(t *testing.T) {
	const n = 100_000
	got := coalescingTargets(rand.New(rand.NewPCG(1, 2)), n, 10000, 1.1)
	if len(got) != n {
		t.Fatalf("%d targets, want %d", len(got), n)
	}
	counts := map[string]int{}
	for _, g := range got {
		counts[g]++
	}
	if counts[coalescingHotGame] != n/2 {
		t.Errorf("hot game has %d favorites, want %d", counts[coalescingHotGame], n/2)
	}
	// Zipf(1.1) over 10,000: the first game takes 1/Σk^-1.1 (≈ 15%) of
	// the rest, the second 2^-1.1 of the first, the 100th far less.
	rest := float64(n / 2)
	if share := float64(counts["game-0"]) / rest; share < 0.13 || share > 0.17 {
		t.Errorf("game-0 has %.3f of the rest, want about 0.15", share)
	}
	if r := float64(counts["game-1"]) / float64(counts["game-0"]); r < 0.4 || r > 0.55 {
		t.Errorf("game-1/game-0 = %.2f, want about 2^-1.1 = 0.47", r)
	}
	if counts["game-99"] >= counts["game-9"] {
		t.Errorf("game-99 (%d) is not rarer than game-9 (%d)", counts["game-99"], counts["game-9"])
	}
	// Shuffled: the hot game is not all at the front.
	if first := got[:n/2]; slices.Index(first, coalescingHotGame) < 0 || float64(countOf(first, coalescingHotGame))/float64(n/2) > 0.55 {
		t.Errorf("targets are not shuffled: %d hot in the first half", countOf(first, coalescingHotGame))
	}
	// Deterministic for a seed.
	if again := coalescingTargets(rand.New(rand.NewPCG(1, 2)), n, 10000, 1.1); !slices.Equal(got, again) {
		t.Error("the same seed drew different targets")
	}
}

func countOf(s []string, v string) int {
	n := 0
	for _, x := range s {
		if x == v {
			n++
		}
	}
	return n
}

func TestCoalescingClassByKeyFamily(t *testing.T) {
	for _, c := range []struct{ pk, sk, want string }{
		{"favorite#g1", "total", "total"},
		{"favorite#g1", "h#2026112418", "bucket"},
		{"favorite#g1", "d#20261124", "bucket"},
		{"applied#u1", "favorite#g1", "marker"},
		{"favorite#g1", "intent#abc", "other dedupe"},
	} {
		key := map[string]types.AttributeValue{"pk": ddb.S(c.pk), "sk": ddb.S(c.sk)}
		if got := coalescingClass(key); got != c.want {
			t.Errorf("%s/%s is %q, want %q", c.pk, c.sk, got, c.want)
		}
	}
}
