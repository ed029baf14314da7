package openapi

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/rallyhq/rally/shared/api"
	"github.com/rallyhq/rally/shared/errs"
	"github.com/rallyhq/rally/shared/routes"
)

// Every route's sample event (events/<function>.json, what `sam local
// invoke` and `make invoke` send) is a request the document admits: the
// samples show callers valid requests, and the document does not refuse
// what the handlers are shown to serve.
func TestEverySampleEventIsARequestTheDocumentAdmits(t *testing.T) {
	sampled := map[string]bool{}
	for _, r := range routes.All() {
		// A function serving players and services has a sample for each:
		// <function>.json and <function>.service.json.
		sample := r.Function
		if sampled[r.Function] {
			sample += "." + r.Auth.String()
		}
		sampled[r.Function] = true
		t.Run(sample, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join("..", "..", "events", sample+".json"))
			if err != nil {
				t.Fatalf("every route needs a sample event in events/: %v", err)
			}
			var ev events.APIGatewayV2HTTPRequest
			if err := json.Unmarshal(raw, &ev); err != nil {
				t.Fatalf("events/%s.json: %v", sample, err)
			}
			if ev.RouteKey != r.Key() {
				t.Fatalf("events/%s.json is for %q, not %q", sample, ev.RouteKey, r.Key())
			}
			if err := ValidateRequest(context.Background(), r.Method, r.Path, ev); err != nil {
				t.Errorf("events/%s.json breaks the document: %v", sample, err)
			}
		})
	}
}

// A refused request says what is wrong where, in the handlers' words: the
// same field names (a parameter, a header, a dotted body field) and, for
// the common rules, the same messages.
func TestValidateRequestNamesTheFieldsAsTheHandlersDo(t *testing.T) {
	long := strings.Repeat("g", 129)
	board := func(body string) events.APIGatewayV2HTTPRequest {
		return events.APIGatewayV2HTTPRequest{RawPath: "/v1/leaderboards/b1", PathParameters: map[string]string{"leaderboard_id": "b1"}, Body: body}
	}
	activity := func(key, body string) events.APIGatewayV2HTTPRequest {
		ev := events.APIGatewayV2HTTPRequest{RawPath: "/v1/activity", Body: body, Headers: map[string]string{}}
		if key != "" {
			ev.Headers["idempotency-key"] = key
		}
		return ev
	}
	const putBoard, putFriends, topGames, record = "/v1/leaderboards/{leaderboard_id}", "/v1/players/{player_id}/friends", "/v1/games/top", "/v1/activity"
	for name, tc := range map[string]struct {
		method, path string
		ev           events.APIGatewayV2HTTPRequest
		want         []errs.FieldError
	}{
		"too-long path id": {"POST", "/v1/favorites/{game_id}",
			events.APIGatewayV2HTTPRequest{RawPath: "/v1/favorites/" + long, PathParameters: map[string]string{"game_id": long}},
			[]errs.FieldError{{Field: "game_id", Message: api.IDMessage}}},
		"wrong query type and unknown enum": {"GET", topGames,
			events.APIGatewayV2HTTPRequest{RawPath: "/v1/games/top", RawQueryString: "limit=ten&window=1y"},
			[]errs.FieldError{{Field: "limit", Message: "must be an integer from 1 to 100"}, {Field: "window", Message: "must be one of 24h, 7d, all"}}},
		"query out of range": {"GET", topGames,
			events.APIGatewayV2HTTPRequest{RawPath: "/v1/games/top", RawQueryString: "limit=101"},
			[]errs.FieldError{{Field: "limit", Message: "must be an integer from 1 to 100"}}},
		"missing required header": {"POST", record, activity("", `{"event_type":"DAILY_OPEN","source":"web"}`),
			[]errs.FieldError{{Field: "Idempotency-Key", Message: "is required"}}},
		"malformed header": {"POST", record, activity("a key", `{"event_type":"DAILY_OPEN","source":"web"}`),
			[]errs.FieldError{{Field: "Idempotency-Key", Message: api.IDMessage}}},
		"missing required field": {"PUT", putBoard, board(`{"policy":"best"}`),
			[]errs.FieldError{{Field: "title", Message: "is required"}}},
		"wrong body types, unknown enum value, unknown fields, nested field": {"PUT", putBoard,
			board(`{"title":7,"policy":"highest","max_n":"ten","scope":{"game":"a b"},"colour":"red","size":3}`),
			[]errs.FieldError{
				{Field: "colour", Message: "is not a known field"},
				{Field: "size", Message: "is not a known field"},
				{Field: "max_n", Message: "must be an integer from 1 to 1000"},
				{Field: "policy", Message: "must be one of best, increment, latest"},
				{Field: "scope.game", Message: api.IDMessage},
				{Field: "title", Message: "must be 1-200 characters"},
			}},
		"an item of a list": {"PUT", putFriends,
			events.APIGatewayV2HTTPRequest{RawPath: "/v1/players/p1/friends", PathParameters: map[string]string{"player_id": "p1"}, Body: `{"friend_ids":["ok","not ok"]}`},
			[]errs.FieldError{{Field: "friend_ids", Message: "item 1 " + api.IDMessage}}},
		"a body where none goes": {"POST", "/v1/favorites/{game_id}",
			events.APIGatewayV2HTTPRequest{RawPath: "/v1/favorites/g1", PathParameters: map[string]string{"game_id": "g1"}, Body: `{"title":"T"}`},
			[]errs.FieldError{{Field: "title", Message: "is not a known field"}}},
		"a blank title": {"PUT", putBoard, board(`{"title":"   "}`),
			[]errs.FieldError{{Field: "title", Message: "must be 1-200 characters"}}},
		"not an http(s) URL": {"PUT", "/v1/games/{game_id}",
			events.APIGatewayV2HTTPRequest{RawPath: "/v1/games/g1", PathParameters: map[string]string{"game_id": "g1"}, Body: `{"title":"T","thumbnail_url":"javascript:alert(1)"}`},
			[]errs.FieldError{{Field: "thumbnail_url", Message: "must be an absolute http(s) URL of at most 2048 characters"}}},
		"101 ids in a list": {"GET", "/v1/favorites/status",
			events.APIGatewayV2HTTPRequest{RawPath: "/v1/favorites/status", RawQueryString: "game_ids=" + strings.Repeat("g,", 100) + "g"},
			[]errs.FieldError{{Field: "game_ids", Message: "must be a list of at most 100 ids, each 1-128 characters of A-Z, a-z, 0-9, '.', '_', ':' or '-'"}}},
		"a bad id in a list": {"GET", "/v1/favorites/status",
			events.APIGatewayV2HTTPRequest{RawPath: "/v1/favorites/status", RawQueryString: "game_ids=g1,not%20one"},
			[]errs.FieldError{{Field: "game_ids", Message: "must be a list of at most 100 ids, each 1-128 characters of A-Z, a-z, 0-9, '.', '_', ':' or '-'"}}},
		"no body":       {"PUT", putBoard, board(""), []errs.FieldError{{Field: "body", Message: "a JSON object is required"}}},
		"not JSON":      {"PUT", putBoard, board(`{"title":`), []errs.FieldError{{Field: "body", Message: "is not valid JSON"}}},
		"not an object": {"POST", record, activity("k1", `["DAILY_OPEN"]`), []errs.FieldError{{Field: "body", Message: "must be an object"}}},
	} {
		t.Run(name, func(t *testing.T) {
			err := ValidateRequest(context.Background(), tc.method, tc.path, tc.ev)
			var e *errs.Error
			if !errors.As(err, &e) || e.Kind != errs.Invalid {
				t.Fatalf("got %v, want an invalid-request error", err)
			}
			if len(e.Fields) != len(tc.want) {
				t.Fatalf("fields %+v, want %+v", e.Fields, tc.want)
			}
			got := map[string]string{}
			for _, f := range e.Fields {
				got[f.Field] = f.Message
			}
			for _, w := range tc.want {
				if got[w.Field] != w.Message {
					t.Errorf("%s: %q, want %q", w.Field, got[w.Field], w.Message)
				}
				// The detail alone tells the caller what to fix.
				if !strings.Contains(e.Detail, w.Field+": "+w.Message) {
					t.Errorf("detail %q does not say %s: %s", e.Detail, w.Field, w.Message)
				}
			}
		})
	}
}

// A body is JSON whatever its Content-Type says (curl -d sends a form
// type), as the handlers read it; the authorizers, not the document, check
// credentials.
func TestValidateRequestReadsBodiesAsJSONAndLeavesAuthToTheAuthorizers(t *testing.T) {
	ev := events.APIGatewayV2HTTPRequest{
		RawPath: "/v1/games/g1", PathParameters: map[string]string{"game_id": "g1"},
		Headers: map[string]string{"content-type": "application/x-www-form-urlencoded"},
		Body:    `{"title":"Space Race"}`,
	}
	if err := ValidateRequest(context.Background(), "PUT", "/v1/games/{game_id}", ev); err != nil {
		t.Fatalf("a JSON body sent as a form refused: %v", err)
	}
	// A route that takes no input admits no body and an empty object.
	for _, body := range []string{"", "{}", " { } "} {
		ev := events.APIGatewayV2HTTPRequest{RawPath: "/v1/favorites/g1", PathParameters: map[string]string{"game_id": "g1"}, Body: body}
		if err := ValidateRequest(context.Background(), "POST", "/v1/favorites/{game_id}", ev); err != nil {
			t.Errorf("body %q refused: %v", body, err)
		}
	}
}

// A body over the handlers' 16 KiB is too large before it is invalid, as
// the handlers answer it (413).
func TestValidateRequestRefusesAnOversizedBodyAsTooLarge(t *testing.T) {
	ev := events.APIGatewayV2HTTPRequest{
		RawPath: "/v1/games/g1", PathParameters: map[string]string{"game_id": "g1"},
		Body: `{"title":"` + strings.Repeat("x", api.MaxBodyBytes) + `"}`,
	}
	err := ValidateRequest(context.Background(), "PUT", "/v1/games/{game_id}", ev)
	if !errs.Is(err, errs.TooLarge) {
		t.Fatalf("got %v, want too large", err)
	}
}
