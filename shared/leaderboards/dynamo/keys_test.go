package dynamo

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rallyhq/rally/shared/leaderboards"
)

// Byte order of rank keys is exactly leaderboards.Before, over the whole
// score range, and every key decodes back to its entry.
func TestRankKeysSortLikeBeforeAndRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	base := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	scores := []int64{-leaderboards.MaxScore, -leaderboards.MaxScore + 1, -1, 0, 1, 9, 10, leaderboards.MaxScore - 1, leaderboards.MaxScore}
	ids := []string{"a", "ab", "b", "B", "a.b", "a:b", "a-b", "z9"}
	var entries []leaderboards.Entry
	for i := 0; i < 400; i++ {
		entries = append(entries, leaderboards.Entry{
			PlayerID:  ids[rng.IntN(len(ids))] + strings.Repeat("x", rng.IntN(2)),
			Score:     scores[rng.IntN(len(scores))],
			ReachedAt: base.Add(time.Duration(rng.IntN(3)) * time.Millisecond),
		})
	}
	entries = append(entries, leaderboards.Entry{PlayerID: "epoch", Score: 5, ReachedAt: time.UnixMilli(0).UTC()},
		leaderboards.Entry{PlayerID: "far", Score: 5, ReachedAt: time.UnixMilli(maxMillis).UTC()})
	for _, o := range []leaderboards.Order{leaderboards.Desc, leaderboards.Asc} {
		for i := range entries {
			a := entries[i]
			ka := RankKey(o, a.Score, a.ReachedAt, a.PlayerID)
			got, err := entryOfKey(o, ka)
			if err != nil || got.Score != a.Score || !got.ReachedAt.Equal(a.ReachedAt) || got.PlayerID != a.PlayerID {
				t.Fatalf("%s: %+v decoded to %+v (%v)", o, a, got, err)
			}
			for j := range entries {
				b := entries[j]
				kb := RankKey(o, b.Score, b.ReachedAt, b.PlayerID)
				if (ka < kb) != leaderboards.Before(o, a, b) && ka != kb {
					t.Fatalf("%s: key order of %+v and %+v disagrees with Before", o, a, b)
				}
				// The score part alone sorts before every key with that
				// score and after every key with a better one.
				if better := kb < scorePart(o, a.Score); better != (b.Score != a.Score && leaderboards.Before(o, b, a)) {
					t.Fatalf("%s: %+v strictly better than score %d: key says %v", o, b, a.Score, better)
				}
			}
		}
	}
}

func TestRankKeyRefusesWhatItCannotOrder(t *testing.T) {
	at := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		score int64
		at    time.Time
	}{{leaderboards.MaxScore + 1, at}, {-leaderboards.MaxScore - 1, at}, {0, time.UnixMilli(-1)}, {0, time.UnixMilli(maxMillis + 1)}} {
		if checkRankable(c.score, c.at) == nil {
			t.Errorf("score %d at %s accepted", c.score, c.at)
		}
	}
	if err := checkRankable(leaderboards.MaxScore, at); err != nil {
		t.Errorf("the largest score refused: %v", err)
	}
}

func TestShardsAreFNV1aAndSpreadPlayers(t *testing.T) {
	// FNV-1a-32("a") = 0xe40c292c, "foobar" = 0xbf9cf968: the shard is the
	// hash mod RankShards, so any reader can place a player.
	if ShardOf("a") != 0xe40c292c%RankShards || ShardOf("foobar") != 0xbf9cf968%RankShards {
		t.Fatalf("ShardOf is not FNV-1a-32 mod %d", RankShards)
	}
	counts := make([]int, RankShards)
	for i := 0; i < 8000; i++ {
		counts[ShardOf(fmt.Sprintf("p%d", i))]++
	}
	if slices.Min(counts) < 800 {
		t.Fatalf("uneven shards: %v", counts)
	}
}
