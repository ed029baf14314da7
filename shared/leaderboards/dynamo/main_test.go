package dynamo_test

import (
	"sync"
	"testing"
	"time"

	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/shared/leaderboards"
	"github.com/rallyhq/rally/shared/leaderboards/dynamo"
	"github.com/rallyhq/rally/shared/schema"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var t0 = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

// stores are the leaderboard stores over a fresh set of tables in
// DynamoDB Local.
type stores struct {
	defs   *dynamo.Definitions
	scores *dynamo.Scores
	clock  *fixedClock
}

func newStores(t *testing.T) stores {
	t.Helper()
	db, names, _ := testenv.DynamoDB(t)
	clk := &fixedClock{at: t0}
	return stores{
		defs:   &dynamo.Definitions{DB: db, Table: names.Of(schema.Leaderboards), Clock: clk},
		scores: &dynamo.Scores{DB: db, Table: names.Of(schema.Scores), Events: names.Of(schema.ScoreEvents), Clock: clk},
		clock:  clk,
	}
}

// apply is the update a real submission uses: the board's policy.
func apply(d leaderboards.Definition, m leaderboards.Match) leaderboards.Update {
	return func(cur *leaderboards.Score) (leaderboards.Score, bool, error) { return leaderboards.Apply(d, cur, m) }
}

func board(id string, p leaderboards.Policy, o leaderboards.Order, tb leaderboards.TieBreak) leaderboards.Definition {
	return leaderboards.Definition{ID: id, Title: id, Policy: p, Order: o, Reset: leaderboards.Never, TieBreak: tb,
		Status: leaderboards.Active, MaxN: 100, Timezone: "UTC"}
}

// fixedClock stands still until the test moves it, so stored times can be
// compared exactly.
type fixedClock struct {
	mu sync.Mutex
	at time.Time
}

func (c *fixedClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.at
}

func (c *fixedClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at = t
}
