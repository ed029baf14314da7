package privacy_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rallyhq/rally/infra/local/apitest"
	"github.com/rallyhq/rally/infra/local/stack"
	"github.com/rallyhq/rally/infra/local/stacktest"
	"github.com/rallyhq/rally/infra/local/testenv/await"
	"github.com/rallyhq/rally/shared/config"
)

// Heavy-user shape of BenchmarkEraseHeavyUser.
const (
	heavyFavorites = 400
	heavyLikes     = 100
	heavyDays      = 30
	heavyBoards    = 3
)

// BenchmarkEraseHeavyUser measures, through the local stack with every
// processor running, the time from the erasure request to COMPLETED for a
// player with 400 favorites, 100 likes, 30 days of activity and a score on
// 3 daily boards every day: 500 edges, 30 points events, 30 daily totals,
// 30 activity keys, 90 scores, 90 matches, the streak and the profile's
// secret (772 items) plus 500 counter markers, and Redis entries on 90
// board periods.
//
//	CI=true go test ./shared/privacy -run '^$' -bench EraseHeavyUser -benchtime 3x
func BenchmarkEraseHeavyUser(b *testing.B) {
	s := stacktest.Start(b, stack.Options{StateDir: b.TempDir(), Configure: func(c *config.Config) {
		// One player seeds hundreds of reactions a minute here.
		c.Budgets = map[string]int{"favorite": 1e6, "like": 1e6, "ip": 1e6}
	}})
	c := apitest.New(b, s)
	start := time.Date(time.Now().Year()+1, 2, 1, 9, 0, 0, 0, time.UTC)
	s.Clock().Set(start)
	for i := range heavyBoards {
		c.Service("PUT", fmt.Sprintf("/v1/leaderboards/daily-%d", i), map[string]any{"title": "Daily", "policy": "best", "reset": "daily"}).Expect(b, 201)
	}
	ctx := context.Background()
	b.ResetTimer()
	for n := range b.N {
		b.StopTimer()
		user := fmt.Sprintf("heavy-%d", n)
		s.Clock().Set(start)
		for g := range heavyFavorites {
			c.Player(user, "POST", fmt.Sprintf("/v1/favorites/g%d", g), nil).Expect(b, 200)
		}
		for p := range heavyLikes {
			c.Player(user, "PUT", fmt.Sprintf("/v1/posts/p%d/like", p), nil).Expect(b, 200)
		}
		for d := range heavyDays {
			s.Clock().Set(start.AddDate(0, 0, d))
			c.Do(apitest.Call{Method: "POST", Path: "/v1/activity", As: user, Header: map[string]string{"Idempotency-Key": fmt.Sprintf("d%d", d)},
				Body: map[string]any{"event_type": "DAILY_OPEN", "source": "mobile_app"}}).Expect(b, 200)
			for i := range heavyBoards {
				c.Service("POST", fmt.Sprintf("/v1/leaderboards/daily-%d/scores", i),
					map[string]any{"player_id": user, "match_id": fmt.Sprintf("m%d", d), "score": 100 + d}).Expect(b, 200)
			}
		}
		if err := s.WaitIdle(ctx); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()

		c.Service("DELETE", "/v1/ops/users/"+user, nil).Expect(b, 202)
		await.Until(b, time.Minute, "erasure of "+user+" completed", func() bool {
			var st struct {
				Status string `json:"status"`
			}
			c.Service("GET", "/v1/ops/users/"+user+"/erasure", nil).Expect(b, 200).JSON(b, &st)
			return st.Status == "COMPLETED"
		})
	}
	b.StopTimer()
	items := heavyFavorites + heavyLikes + heavyDays*(3+2*heavyBoards) + 2
	b.ReportMetric(float64(items), "items/erasure")
}
