package mirror_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/shared/leaderboards"
	"github.com/rallyhq/rally/shared/leaderboards/mirror"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// A deleted score (erasure) takes the player off the board without a
// tombstone: nothing in Redis holds their id afterwards, whether the board
// ranks high or low scores first, and everyone else keeps their place.
func TestARemovedScoreLeavesNoTraceOfThePlayer(t *testing.T) {
	for _, d := range []leaderboards.Definition{
		{ID: "season", Order: leaderboards.Desc, TieBreak: leaderboards.Earliest},
		{ID: "speedrun", Order: leaderboards.Asc, TieBreak: leaderboards.Shared},
	} {
		t.Run(d.ID, func(t *testing.T) {
			ctx := context.Background()
			rdb := redis.NewClient(&redis.Options{Addr: testenv.Redis(t).Addr()})
			t.Cleanup(func() { _ = rdb.Close() })
			m := mirror.New(rdb, nil)
			const who, period = "erase.me:7", "2026-05"
			at := time.Date(2026, 5, 2, 12, 0, 0, 0, time.UTC)
			score := func(player string, v, points int64) leaderboards.Score {
				return leaderboards.Score{Board: d.ID, Period: period, PlayerID: player, Score: points,
					ReachedAt: at.Add(time.Duration(points) * time.Second), Version: v}
			}

			// The submit path's own write, then the stream's, with others.
			if _, _, err := m.Upsert(ctx, d, score(who, 1, 40)); err != nil {
				t.Fatal(err)
			}
			var others []leaderboards.Score
			for i := range 300 {
				others = append(others, score(fmt.Sprintf("p%03d", i), 1, int64(i%50)))
			}
			if err := m.Apply(ctx, d, period, append(others, score(who, 2, 45))); err != nil {
				t.Fatal(err)
			}
			if len(testenv.RedisTraces(t, rdb, who)) == 0 {
				t.Fatal("the player left no trace to erase")
			}

			gone := score(who, 3, 45)
			gone.Removed = true
			if err := m.Apply(ctx, d, period, []leaderboards.Score{gone}); err != nil {
				t.Fatal(err)
			}
			if found := testenv.RedisTraces(t, rdb, who); len(found) > 0 {
				t.Fatalf("after erasure Redis still holds the id:\n%s", strings.Join(found, "\n"))
			}
			total, err := m.Rank.Total(ctx, mirror.Board(d, period))
			if err != nil || total != 300 {
				t.Fatalf("board size after erasure: %d, %v; want the 300 others", total, err)
			}
			top, _, err := m.Rank.Top(ctx, mirror.Board(d, period), 1)
			want := "p049"
			if d.Order == leaderboards.Asc {
				want = "p000"
			}
			if err != nil || len(top) != 1 || top[0].ID != want {
				t.Fatalf("top after erasure: %+v, %v; want %s", top, err, want)
			}

			// Erasing again (a redelivered record) changes nothing.
			if err := m.Apply(ctx, d, period, []leaderboards.Score{gone}); err != nil {
				t.Fatal(err)
			}
			if found := testenv.RedisTraces(t, rdb, who); len(found) > 0 {
				t.Fatalf("after a repeated erasure Redis holds the id:\n%s", strings.Join(found, "\n"))
			}
		})
	}
}
