package stack_test

import (
	"testing"
	"time"

	"github.com/rallyhq/rally/infra/local/apitest"
	"github.com/rallyhq/rally/infra/local/stack"
	"github.com/rallyhq/rally/infra/local/stacktest"
	"github.com/rallyhq/rally/infra/local/testenv/await"
)

// However rarely its pollers poll a quiet stream, a write a handler makes
// reaches the processors at once: here a poll of a quiet shard is an hour
// away, and a favorite is counted (the counter processor) and its game's
// list of fans (Redis) shows it without anyone asking the stack to catch
// up.
func TestAWriteWakesThePollersOfItsTable(t *testing.T) {
	s := stacktest.Start(t, stack.Options{PollInterval: time.Hour, MaxPollInterval: time.Hour})
	c := apitest.New(t, s)
	c.Player("fan", "POST", "/v1/favorites/g-wake", nil).Expect(t, 200)
	await.Until(t, 30*time.Second, "the favorite is counted", func() bool {
		var out struct {
			Count int `json:"count"`
		}
		c.Player("reader", "GET", "/v1/games/g-wake/favorites/count", nil).Expect(t, 200).JSON(t, &out)
		return out.Count == 1
	})
}
