package app

import (
	"context"
	"io"
	"strconv"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/rallyhq/rally/shared/config"
	"github.com/rallyhq/rally/shared/routes"
)

// Every answer of a budgeted route carries the RateLimit headers of its
// most constrained budget (seconds until it is whole again, rounded up);
// past the budget the answer is 429 with Retry-After, rounded up, and the
// handler does not run. Here Redis is unreachable, so the instance limits
// in process, as each warm Lambda does in an outage.
func TestTheGateAnswersWithTheRateLimitHeadersAnd429WithRetryAfter(t *testing.T) {
	const budget = 3 // one back every 20 s
	d, err := New(context.Background(), config.Config{
		Stage: config.LocalStage, Region: "us-east-1", Function: routes.FavoriteGame.Function,
		Budgets: map[string]int{routes.FavoriteBudget.Name: budget},
	}, Options{LogOutput: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	served := 0
	h := d.gate(routes.FavoriteGame, nil, func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		served++
		return events.APIGatewayV2HTTPResponse{StatusCode: 200}, nil
	})
	call := func(player string) events.APIGatewayV2HTTPResponse {
		t.Helper()
		var ev events.APIGatewayV2HTTPRequest
		ev.RequestContext.HTTP.SourceIP = "192.0.2.7"
		ev.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
			JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: map[string]string{"sub": player}},
		}
		out, err := h(context.Background(), ev)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	type headers struct{ status, limit, remaining, reset, retryAfter string }
	got := func(r events.APIGatewayV2HTTPResponse) headers {
		return headers{strconv.Itoa(r.StatusCode), r.Headers["RateLimit-Limit"], r.Headers["RateLimit-Remaining"], r.Headers["RateLimit-Reset"], r.Headers["Retry-After"]}
	}
	for i, want := range []headers{
		{"200", "3", "2", "20", ""},
		{"200", "3", "1", "40", ""},
		{"200", "3", "0", "60", ""},
		{"429", "3", "0", "60", "20"},
		{"429", "3", "0", "60", "20"},
	} {
		if h := got(call("ann")); h != want {
			t.Errorf("request %d: %+v, want %+v", i+1, h, want)
		}
	}
	if served != budget {
		t.Errorf("the handler ran %d times; the budget is %d", served, budget)
	}
	// Another player behind the same address has a budget of their own;
	// the per-IP one (1,200) is the less constrained.
	if h := got(call("bob")); h != (headers{"200", "3", "2", "20", ""}) {
		t.Errorf("another player: %+v", h)
	}
}
