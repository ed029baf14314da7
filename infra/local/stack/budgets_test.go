package stack_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/infra/local/apitest"
	"github.com/rallyhq/rally/infra/local/stack"
	"github.com/rallyhq/rally/infra/local/stacktest"
	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/shared/config"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
)

// favorite makes player favorite game, from the default address.
func favorite(c *apitest.Client, player, game string) apitest.Response {
	return c.Do(apitest.Call{Method: "POST", Path: "/v1/favorites/" + game, As: player})
}

// retryAfter is a 429's Retry-After, which must be there.
func retryAfter(t *testing.T, r apitest.Response) time.Duration {
	t.Helper()
	secs, err := strconv.Atoi(r.Header.Get("Retry-After"))
	if err != nil || secs < 1 {
		t.Fatalf("%s: 429 with Retry-After %q", r.Request, r.Header.Get("Retry-After"))
	}
	for _, h := range []string{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"} {
		if r.Header.Get(h) == "" {
			t.Fatalf("%s: 429 without %s", r.Request, h)
		}
	}
	return time.Duration(secs) * time.Second
}

func favorited(t *testing.T, c *apitest.Client, player, game string) bool {
	t.Helper()
	var body struct {
		Statuses map[string]bool `json:"statuses"`
	}
	c.Player(player, "GET", "/v1/favorites/status?game_ids="+game, nil).Expect(t, 200).JSON(t, &body)
	return body.Statuses[game]
}

// spendUntilRefused favorites a new game each time as player until one is
// refused, and checks that the player got the budget, plus no more than it
// earned back while spending it: GCRA refills one every minute / budget.
// It returns the refusal and the game it refused.
func spendUntilRefused(t *testing.T, c *apitest.Client, player string, budget int) (apitest.Response, string) {
	t.Helper()
	start := time.Now()
	for i := 0; ; i++ {
		game := fmt.Sprintf("g%d", i)
		r := favorite(c, player, game)
		earned := int(time.Since(start) / (time.Minute / time.Duration(budget)))
		switch {
		case r.Status == 429 && i < budget:
			t.Fatalf("%s refused after %d favorites; the budget is %d", player, i, budget)
		case r.Status == 429:
			return r, game
		case r.Status != 200:
			t.Fatalf("%s: %d %s", r.Request, r.Status, r.Body)
		case i > budget+earned:
			t.Fatalf("%s got %d favorites in %v; the budget is %d, %d earned back", player, i+1, time.Since(start), budget, earned)
		}
		if r.Header.Get("RateLimit-Limit") != strconv.Itoa(budget) {
			t.Fatalf("%s: RateLimit-Limit %s, want %d", r.Request, r.Header.Get("RateLimit-Limit"), budget)
		}
		if rem, _ := strconv.Atoi(r.Header.Get("RateLimit-Remaining")); i < budget && rem > budget-1-i+earned {
			t.Fatalf("%s: RateLimit-Remaining %d after %d favorites of %d", r.Request, rem, i+1, budget)
		}
	}
}

// A player's 31st favorite within a minute is refused with Retry-After and
// writes nothing; after waiting that long the next one is accepted; other
// players are never held back.
func TestThe31stFavoriteInAMinuteWaitsItsTurn(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stack.Options{})
	c := apitest.New(t, s)
	budget := routes.FavoriteBudget.PerMinute
	over, refused := spendUntilRefused(t, c, "eager", budget)
	wait := retryAfter(t, over)
	if wait > 3*time.Second {
		t.Fatalf("Retry-After %v; one favorite comes back every %v", wait, time.Minute/time.Duration(budget))
	}
	if favorited(t, c, "eager", refused) {
		t.Fatal("a refused favorite was written")
	}
	favorite(c, "patient", "g0").Expect(t, 200)
	time.Sleep(wait) // what the client is told to do
	favorite(c, "eager", refused).Expect(t, 200)
	if !favorited(t, c, "eager", refused) {
		t.Fatal("the favorite accepted after Retry-After is not there")
	}
}

// With Redis stopped, a flood from one player is still limited (each
// instance limits in process) while every other player is served.
func TestAFloodIsLimitedWhileRedisIsDown(t *testing.T) {
	t.Parallel()
	redis := testenv.Redis(t)
	s := stacktest.Start(t, stack.Options{RedisURL: redis.URL()})
	c := apitest.New(t, s)
	redis.Stop()
	budget := routes.FavoriteBudget.PerMinute
	accepted := 0
	start := time.Now()
	for i := range 2 * budget {
		switch r := favorite(c, "flooder", fmt.Sprintf("g%d", i)); r.Status {
		case 200:
			accepted++
		case 429:
			retryAfter(t, r)
		default:
			t.Fatalf("favorite %d with Redis down: %d %s", i, r.Status, r.Body)
		}
		if i%10 == 0 {
			favorite(c, fmt.Sprintf("bystander-%d", i), "g0").Expect(t, 200)
		}
	}
	earned := int(time.Since(start) / (time.Minute / time.Duration(budget)))
	if accepted < budget || accepted > budget+earned+1 {
		t.Fatalf("%d of %d favorites accepted with Redis down in %v; budget %d", accepted, 2*budget, time.Since(start), budget)
	}
}

// A burst straddling a wall-clock minute edge gets the budget once, plus
// what GCRA earns back while it lasts: there is no window that starts
// afresh at the edge, with Redis up and, in process, with Redis stopped.
func TestABurstAcrossAMinuteEdgeGetsTheBudgetOnce(t *testing.T) {
	t.Parallel()
	for _, redisDown := range []bool{false, true} {
		t.Run(map[bool]string{false: "redis up", true: "redis stopped"}[redisDown], func(t *testing.T) {
			t.Parallel()
			redis := testenv.Redis(t)
			s := stacktest.Start(t, stack.Options{RedisURL: redis.URL()})
			c := apitest.New(t, s)
			if redisDown {
				redis.Stop()
			}
			budget := routes.FavoriteBudget.PerMinute
			every := time.Minute / time.Duration(budget)
			// The burst starts shortly before the next edge far enough
			// ahead, and runs on past it long enough to spend a whole
			// budget again if the edge gave one.
			const lead, trail = 1500 * time.Millisecond, 3500 * time.Millisecond
			edge := time.Now().Add(lead + time.Second).Truncate(time.Minute).Add(time.Minute)
			time.Sleep(time.Until(edge.Add(-lead))) // waiting for the instant under test
			start := time.Now()
			before, after, refused := 0, 0, 0
			// A busy machine may serve fewer than the budget by then: the
			// burst goes on until it is refused (the budget spent), so the
			// check below never depends on how fast requests are served.
			for i := 0; time.Now().Before(edge.Add(trail)) || refused == 0 && time.Since(start) < time.Minute; i++ {
				switch r := favorite(c, "edger", fmt.Sprintf("g%d", i)); r.Status {
				case 200:
					if time.Now().Before(edge) {
						before++
					} else {
						after++
					}
				case 429:
					retryAfter(t, r)
					refused++
				default:
					t.Fatalf("%s: %d %s", r.Request, r.Status, r.Body)
				}
			}
			took := time.Since(start)
			earned := int(took / every)
			t.Logf("%d accepted (%d before the edge at %s, %d after), %d refused in %v; budget %d, %d earned back",
				before+after, before, edge.Format("15:04:05"), after, refused, took.Round(time.Millisecond), budget, earned)
			if before+after < budget || refused == 0 {
				t.Fatalf("the burst did not spend the budget: %d accepted, %d refused", before+after, refused)
			}
			if before+after > budget+earned {
				t.Fatalf("a burst across the minute edge got %d favorites in %v: more than the budget %d and the %d earned back", before+after, took, budget, earned)
			}
		})
	}
}

// One address gets at most the per-IP budget however many players it
// speaks for; another address is unaffected.
func TestOneAddressGetsTheIPBudget(t *testing.T) {
	t.Parallel()
	// A smaller per-IP budget than the declared one, so that a busy
	// machine cannot serve the reads slower than the budget refills.
	const ip = 120
	s := stacktest.Start(t, stack.Options{Configure: func(c *config.Config) { c.Budgets = map[string]int{routes.IPBudget.Name: ip} }})
	c := apitest.New(t, s)
	perPlayer := ip / 4 // four players behind one address, each well inside their own budget
	start := time.Now()
	accepted, refused := 0, 0
	for i := 0; refused < 10 && i < 10*ip; i++ {
		r := c.Do(apitest.Call{Method: "GET", Path: "/v1/games/g1/favorites/count", As: fmt.Sprintf("nat-%d", i/perPlayer), From: "127.0.0.2"})
		switch r.Status {
		case 200:
			accepted++
		case 429:
			retryAfter(t, r)
			refused++
		default:
			t.Fatalf("read %d: %d %s", i, r.Status, r.Body)
		}
	}
	earned := int(time.Since(start) / (time.Minute / time.Duration(ip)))
	if refused < 10 || accepted < ip || accepted > ip+earned+1 {
		t.Fatalf("one address: %d reads accepted, %d refused in %v; its budget is %d a minute (%d earned back)", accepted, refused, time.Since(start), ip, earned)
	}
	c.Do(apitest.Call{Method: "GET", Path: "/v1/games/g1/favorites/count", As: "nat-0", From: "127.0.0.3"}).Expect(t, 200)
}

// A calling role spends its own budget on service routes; players are
// unaffected.
func TestAServiceRoleGetsItsBudget(t *testing.T) {
	t.Parallel()
	const budget = 20
	s := stacktest.Start(t, stack.Options{Configure: func(c *config.Config) {
		c.Budgets = map[string]int{routes.ServiceBudget.Name: budget}
	}})
	c := apitest.New(t, s)
	// GCRA gives one call back every minute / budget, so on a busy machine
	// a few more than the budget may pass while it is spent.
	start := time.Now()
	var over apitest.Response
	refused := ""
	for i := 0; refused == ""; i++ {
		game := fmt.Sprintf("g%d", i)
		r := c.Do(apitest.Call{Method: "PUT", Path: "/v1/games/" + game, Body: map[string]any{"title": "Game"}, Service: true})
		earned := int(time.Since(start) / (time.Minute / budget))
		switch {
		case r.Status == 429 && i < budget:
			t.Fatalf("refused after %d service calls; the budget is %d", i, budget)
		case r.Status == 429:
			over, refused = r, game
		case r.Status != 200:
			t.Fatalf("%s: %d %s", r.Request, r.Status, r.Body)
		case i > budget+earned:
			t.Fatalf("%d service calls accepted in %v; the budget is %d, %d earned back", i+1, time.Since(start), budget, earned)
		}
	}
	retryAfter(t, over)
	c.Player("someone", "GET", "/v1/games/g1/favorites/count", nil).Expect(t, 200)
	if item := getItem(t, s, schema.Games, schema.AttrGameID, refused); len(item) != 0 {
		t.Fatalf("a refused service call was written: %v", item)
	}
	// The game server spent its budget; the operator has its own.
	c.Do(apitest.Call{Method: "PUT", Path: "/v1/games/" + refused, Body: map[string]any{"title": "Game"}, Sign: stack.SignRequest}).Expect(t, 200)
}

func getItem(t *testing.T, s *stack.Stack, table schema.Table, attr, id string) map[string]types.AttributeValue {
	t.Helper()
	out, err := s.DB().GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String(s.Tables().Of(table)), Key: map[string]types.AttributeValue{attr: &types.AttributeValueMemberS{Value: id}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item
}

// An account Rally first saw less than a day ago gets half the budget;
// a day later, the whole. Bad input records no first-seen time.
func TestAYoungAccountGetsHalfTheBudget(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stack.Options{Configure: func(c *config.Config) { c.YoungAccountAge = 24 * time.Hour }})
	c := apitest.New(t, s)
	c.Player("stranger", "POST", "/v1/favorites/bad!id", nil).Expect(t, 400)
	if item := getItem(t, s, schema.Accounts, schema.AttrPlayerID, "stranger"); len(item) != 0 {
		t.Fatalf("bad input recorded the account: %v", item)
	}
	refusal, _ := spendUntilRefused(t, c, "newcomer", routes.FavoriteBudget.PerMinute/2)
	retryAfter(t, refusal)

	c.Player("veteran", "GET", "/v1/games/g0/favorites/count", nil).Expect(t, 200) // Rally sees them
	if item := getItem(t, s, schema.Accounts, schema.AttrPlayerID, "veteran"); len(item) == 0 {
		t.Fatal("the first request did not record the account")
	}
	s.Clock().Set(s.Clock().Now().Add(25 * time.Hour))
	refusal, _ = spendUntilRefused(t, c, "veteran", routes.FavoriteBudget.PerMinute)
	retryAfter(t, refusal)
}

// A budget an operator turned off (0) stays off for a young account too:
// halving it must not make it one request a minute.
func TestABudgetTurnedOffStaysOffForAYoungAccount(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stack.Options{Configure: func(c *config.Config) {
		c.YoungAccountAge = 24 * time.Hour
		c.Budgets[routes.FavoriteBudget.Name] = 0
	}})
	c := apitest.New(t, s)
	for i := range routes.FavoriteBudget.PerMinute + 5 {
		r := favorite(c, "newcomer", fmt.Sprintf("g%d", i))
		if r.Status != 200 {
			t.Fatalf("favorite %d of a young account with the favorite budget off: %d %s", i+1, r.Status, r.Body)
		}
		if r.Header.Get("RateLimit-Limit") == "1" {
			t.Fatalf("favorite %d: RateLimit-Limit 1 with the budget off", i+1)
		}
	}
}
