package reactions_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	rxbind "github.com/rallyhq/rally/shared/reactions/bind"

	"github.com/aws/aws-lambda-go/events"
	"github.com/redis/go-redis/v9"

	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/shared/app"
	"github.com/rallyhq/rally/shared/config"
	"github.com/rallyhq/rally/shared/openapi"
	"github.com/rallyhq/rally/shared/routes"
)

func playerEvent(r routes.Route, sub, path string, params, query map[string]string) events.APIGatewayV2HTTPRequest {
	return events.APIGatewayV2HTTPRequest{
		RouteKey: r.Key(), RawPath: path, PathParameters: params, QueryStringParameters: query,
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			RequestID: "rt", HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: r.Method, Path: path, SourceIP: "10.0.0.1"},
			Authorizer: &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
				JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: map[string]string{"sub": sub}},
			},
		},
	}
}

// On a cache hit, the status of 100 games is one round trip to Redis and a
// count is one.
func TestHotReadsAreOneRoundTrip(t *testing.T) {
	ctx := context.Background()
	_, names, endpoint := testenv.DynamoDB(t)
	srv := testenv.Redis(t)
	trips := &testenv.RoundTrips{}
	// Budgets off: their own round trips are not the reads' (the gate's).
	d, err := app.New(ctx, config.Config{
		Stage: "test", Region: "us-east-1", DynamoDBEndpoint: endpoint, Tables: names, RedisURL: srv.URL(),
		CursorKey: "k", LogKey: "k", CacheCheckEvery: time.Hour, LogLevel: "error",
		Budgets: map[string]int{routes.FavoriteBudget.Name: 1000}, // one player favorites 50 games
	}, app.Options{LogOutput: io.Discard, RedisHooks: []redis.Hook{trips}})
	if err != nil {
		t.Fatal(err)
	}
	bound, err := d.Bind(rxbind.Reactions)
	if err != nil {
		t.Fatal(err)
	}
	call := func(r routes.Route, ev events.APIGatewayV2HTTPRequest) (string, int64) {
		t.Helper()
		before := trips.Count()
		handler, _ := bound.HTTP(r)
		resp, err := handler(ctx, ev)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s %v", r.Key(), resp.StatusCode, resp.Body, err)
		}
		if err := openapi.ValidateResponse(r.Method, r.Path, resp.StatusCode, resp.Headers["Content-Type"], []byte(resp.Body)); err != nil {
			t.Fatal(err)
		}
		return resp.Body, trips.Count() - before
	}
	// The processor's tick builds the (empty) cache and marks it current.
	if _, err := d.Stream(rxbind.Reactions, routes.CounterProcessor)(ctx, events.DynamoDBEvent{}); err != nil {
		t.Fatal(err)
	}
	games := make([]string, 100)
	for i := range games {
		games[i] = fmt.Sprintf("rt-%03d", i)
		if i%2 == 0 {
			call(routes.FavoriteGame, playerEvent(routes.FavoriteGame, "tripper", "/v1/favorites/"+games[i], map[string]string{"game_id": games[i]}, nil))
		}
	}
	status := playerEvent(routes.FavoriteStatus, "tripper", "/v1/favorites/status", nil, map[string]string{"game_ids": strings.Join(games, ",")})
	first, _ := call(routes.FavoriteStatus, status) // fills the games never touched
	second, n := call(routes.FavoriteStatus, status)
	if n != 1 {
		t.Errorf("status of 100 games on a cache hit took %d round trips, want 1", n)
	}
	if first != second || strings.Count(second, "true") != 50 || strings.Contains(second, "degraded") {
		t.Errorf("statuses: %s", second)
	}

	count := playerEvent(routes.CountFavorites, "reader", "/v1/games/rt-000/favorites/count", map[string]string{"game_id": "rt-000"}, nil)
	call(routes.CountFavorites, count) // reads through on a miss
	body, n := call(routes.CountFavorites, count)
	if n != 1 {
		t.Errorf("a cached count took %d round trips, want 1", n)
	}
	if strings.Contains(body, "degraded") {
		t.Errorf("count: %s", body)
	}
}
