package dynamo_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/rallyhq/rally/shared/streaks"
	"github.com/rallyhq/rally/shared/streaks/dynamo"
	"github.com/rallyhq/rally/shared/streaks/internal/streakmodel"
)

// The index's byte order is the boards' order (the longer streak, then
// the one reached earlier, then the user id), so a query in key order
// reads a partition best first.
func TestLiveSortKeyOrderIsBoardOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	base := time.Date(year, 1, 1, 0, 0, 0, 0, time.UTC)
	users := []string{"a", "ab", "a-b", "B", "b", "z9", "Zed", "p001", "p001-x"}
	entry := func() streaks.Entry {
		return streaks.Entry{
			UserID:    users[rng.IntN(len(users))],
			Streak:    []int64{1, 2, 9, 10, 99, 100, 365, 999_999_999}[rng.IntN(8)],
			ReachedAt: base.Add(time.Duration(rng.IntN(4)) * time.Millisecond * 999),
		}
	}
	for range 20000 {
		a, b := entry(), entry()
		ka := dynamo.LiveSortKey(a.Streak, a.ReachedAt, a.UserID)
		kb := dynamo.LiveSortKey(b.Streak, b.ReachedAt, b.UserID)
		ahead := streakmodel.Ahead(a.Streak, a.ReachedAt, a.UserID, b.Streak, b.ReachedAt, b.UserID)
		if (ka < kb) != ahead {
			t.Fatalf("%+v (%s) vs %+v (%s): key order %v, board order %v", a, ka, b, kb, ka < kb, ahead)
		}
	}
}

// A player's streak always lands in the same shard, and the shards spread
// players over all of them.
func TestShardsSpreadPlayers(t *testing.T) {
	counts := make([]int, dynamo.LiveShards)
	for i := range 8000 {
		user := fmt.Sprintf("player-%d", i)
		s := dynamo.ShardOf(user)
		if s != dynamo.ShardOf(user) || s < 0 || s >= dynamo.LiveShards {
			t.Fatalf("shard of %s: %d", user, s)
		}
		counts[s]++
	}
	for s, c := range counts {
		if c < 800 || c > 1200 {
			t.Fatalf("shard %d holds %d of 8000 players: %v", s, c, counts)
		}
	}
}
