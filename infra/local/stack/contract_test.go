package stack_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/rallyhq/rally/infra/local/apitest"
	"github.com/rallyhq/rally/infra/local/stack"
	"github.com/rallyhq/rally/infra/local/stacktest"
	"github.com/rallyhq/rally/shared/api"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
)

// invalidRequests break the OpenAPI document in the ways a client gets a
// request wrong, each on a route that would write something if it let the
// request through; field is the field the refusal must name.
var invalidRequests = []struct {
	name  string
	call  apitest.Call
	route string
	field string
}{
	{"an id of 129 characters", apitest.Call{Method: "POST", Path: "/v1/favorites/" + strings.Repeat("g", 129), As: "alice"},
		"POST /v1/favorites/{game_id}", "game_id"},
	{"an unknown enum value", apitest.Call{Method: "POST", Path: "/v1/activity", As: "alice", Header: map[string]string{"Idempotency-Key": "open-1"},
		Body: map[string]string{"event_type": "NAP", "source": "mobile_app"}},
		"POST /v1/activity", "event_type"},
	{"a missing required field", apitest.Call{Method: "PUT", Path: "/v1/leaderboards/contract-board", Service: true,
		Body: map[string]any{"policy": "best"}},
		"PUT /v1/leaderboards/{leaderboard_id}", "title"},
	{"a string for an integer", apitest.Call{Method: "POST", Path: "/v1/leaderboards/contract-board/scores", Service: true,
		Body: map[string]any{"player_id": "alice", "match_id": "m1", "score": "10"}},
		"POST /v1/leaderboards/{leaderboard_id}/scores", "score"},
	{"a number for a string", apitest.Call{Method: "PUT", Path: "/v1/players/alice/profile", Service: true,
		Body: map[string]any{"display_name": 5}},
		"PUT /v1/players/{player_id}/profile", "display_name"},
	{"a malformed header", apitest.Call{Method: "POST", Path: "/v1/posts/p1/like/toggle", As: "alice",
		Header: map[string]string{"Idempotency-Key": "not a key"}},
		"POST /v1/posts/{post_id}/like/toggle", "Idempotency-Key"},
}

type problem struct {
	Type   string `json:"type"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Errors []struct {
		Field   string `json:"field"`
		Message string `json:"message"`
	} `json:"errors"`
}

func (p problem) fields() []string {
	var out []string
	for _, e := range p.Errors {
		out = append(out, e.Field)
	}
	return out
}

// The gateway refuses a request the document refuses before any handler
// runs: 400 application/problem+json naming the field, a contract-mismatch
// line in the log, and nothing written anywhere. A client cannot tell it
// from the handler's own refusal: with the check off, the handler answers
// the same request 400 with the same type and the same field.
func TestGatewayRefusesWhatTheDocumentRefusesAsTheHandlerWould(t *testing.T) {
	var logs syncBuffer
	s := stacktest.Start(t, stack.Options{Log: &logs})
	c := apitest.New(t, s)
	unchecked := apitest.New(t, stacktest.Start(t, stack.Options{SkipRequestValidation: true}))
	for _, tc := range invalidRequests {
		t.Run(tc.name, func(t *testing.T) {
			var gw, handler problem
			r := c.Do(tc.call).Expect(t, 400)
			if ct := r.Header.Get("Content-Type"); ct != api.ProblemContentType {
				t.Fatalf("content type %q", ct)
			}
			r.JSON(t, &gw)
			unchecked.Do(tc.call).Expect(t, 400).JSON(t, &handler)
			if gw.Type != "urn:rally:problem:invalid-request" || gw.Type != handler.Type {
				t.Errorf("the gateway says %q, the handler %q", gw.Type, handler.Type)
			}
			if !slices.Contains(gw.fields(), tc.field) || !slices.Contains(handler.fields(), tc.field) {
				t.Errorf("the gateway names %v, the handler %v; both must name %s", gw.fields(), handler.fields(), tc.field)
			}
			if !strings.Contains(gw.Detail, tc.field+": ") {
				t.Errorf("the detail %q does not say what is wrong with %s", gw.Detail, tc.field)
			}
		})
	}
	out := logs.String()
	for _, tc := range invalidRequests {
		logged := slices.ContainsFunc(strings.Split(out, "\n"), func(line string) bool {
			return strings.Contains(line, `"msg":"contract mismatch: the request breaks the OpenAPI document"`) &&
				strings.Contains(line, `"route":"`+tc.route+`"`) && strings.Contains(line, tc.field+": ")
		})
		if !logged {
			t.Errorf("%s: no contract mismatch logged for %s naming %s", tc.name, tc.route, tc.field)
		}
	}
	if strings.Contains(out, `"msg":"request failed"`) {
		t.Errorf("a handler ran on a request the gateway refused:\n%s", out)
	}
	for _, table := range schema.Tables() {
		items, err := s.DB().Scan(context.Background(), &dynamodb.ScanInput{TableName: aws.String(s.Tables().Of(table)), Limit: aws.Int32(1)})
		if err != nil {
			t.Fatal(err)
		}
		if len(items.Items) > 0 {
			t.Errorf("the refused requests wrote to %s: %v", table.Name, items.Items[0])
		}
	}
}

// A request the document refuses is shown to its handler when the test
// ends (stacktest fails the test then): a handler that serves it reveals
// a document promising less than the deployed API, where nothing
// validates requests, accepts. A handler that refuses it too agrees.
func TestARequestTheDocumentRefusesButItsHandlerServesIsAMismatch(t *testing.T) {
	lenient := func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		return events.APIGatewayV2HTTPResponse{StatusCode: 200, Headers: map[string]string{"Content-Type": "application/json"}, Body: `{}`}, nil
	}
	s := stacktest.Start(t, stack.Options{Handlers: map[string]api.Handler{routes.PutProfile.Function: lenient}})
	c := apitest.New(t, s)
	ctx := context.Background()
	if got := s.ContractMismatches(ctx); len(got) != 0 {
		t.Fatalf("mismatches before any request: %+v", got)
	}
	refused := c.Service("PUT", "/v1/players/alice/profile", map[string]any{"display_name": 5}).Expect(t, 400)
	c.Service("PUT", "/v1/games/contract-game", map[string]any{"title": 42}).Expect(t, 400)
	got := s.ContractMismatches(ctx)
	if len(got) != 1 || got[0].Route != routes.PutProfile.Key() || got[0].Status != 200 ||
		got[0].RequestID != refused.Header.Get("Apigw-Requestid") || !slices.ContainsFunc(got[0].Fields, func(f string) bool {
		return strings.HasPrefix(f, "display_name: ")
	}) {
		t.Fatalf("mismatches %+v, want the profile the lenient handler serves, naming display_name", got)
	}
	if again := s.ContractMismatches(ctx); len(again) != 0 {
		t.Errorf("the same requests were rechecked twice: %+v", again)
	}
}

// A key given twice in a body is refused on every kind of route, 400
// application/problem+json naming it, and writes nothing: the handler
// would otherwise act on one of the two values, and the caller may have
// meant the other. As in AWS (nothing validates requests there) and with
// the local gateway's validation.
func TestARepeatedKeyIsRefusedAndWritesNothing(t *testing.T) {
	repeated := []struct {
		call  apitest.Call
		field string
	}{
		{apitest.Call{Method: "PUT", Path: "/v1/games/dup-game", Service: true, Body: `{"title":"Space Race","title":"Moon Race"}`}, "title"},
		{apitest.Call{Method: "PUT", Path: "/v1/leaderboards/dup-board", Service: true,
			Body: `{"title":"Wins","policy":"best","scope":{"game":"g1","game":"g2"}}`}, "scope.game"},
		{apitest.Call{Method: "PUT", Path: "/v1/players/alice/friends", Service: true, Body: `{"friend_ids":["bob"],"friend_ids":[]}`}, "friend_ids"},
		{apitest.Call{Method: "POST", Path: "/v1/ops/activity", Service: true, Header: map[string]string{"Idempotency-Key": "dup-1"},
			Body: `{"user_id":"alice","event_type":"MATCH_WON","source":"console","user_id":"bob"}`}, "user_id"},
		{apitest.Call{Method: "POST", Path: "/v1/activity", As: "alice", Header: map[string]string{"Idempotency-Key": "dup-2"},
			Body: `{"event_type":"DAILY_OPEN","source":"mobile_app","event_type":"DAILY_OPEN"}`}, "event_type"},
		{apitest.Call{Method: "POST", Path: "/v1/ops/jobs", Service: true, Body: `{"kind":"rebuild","target":"all","kind":"reconcile"}`}, "kind"},
	}
	for name, opts := range map[string]stack.Options{"as in AWS": {SkipRequestValidation: true}, "validated": {}} {
		t.Run(name, func(t *testing.T) {
			s := stacktest.Start(t, opts)
			c := apitest.New(t, s)
			for _, tc := range repeated {
				var p problem
				r := c.Do(tc.call).Expect(t, 400)
				if ct := r.Header.Get("Content-Type"); ct != api.ProblemContentType {
					t.Fatalf("%s: content type %q", r.Request, ct)
				}
				r.JSON(t, &p)
				if !slices.Contains(p.fields(), tc.field) {
					t.Errorf("%s: the refusal names %v, want %s", r.Request, p.fields(), tc.field)
				}
			}
			for _, table := range schema.Tables() {
				items, err := s.DB().Scan(context.Background(), &dynamodb.ScanInput{TableName: aws.String(s.Tables().Of(table)), Limit: aws.Int32(1)})
				if err != nil {
					t.Fatal(err)
				}
				if len(items.Items) > 0 {
					t.Errorf("the refused requests wrote to %s: %v", table.Name, items.Items[0])
				}
			}
			// A score needs a board: its repeated score is refused and the
			// player is on no board; the key a refusal named is still free.
			c.Service("PUT", "/v1/leaderboards/dup-scores", map[string]any{"title": "Wins", "policy": "best"}).Expect(t, 201)
			var p problem
			c.Do(apitest.Call{Method: "POST", Path: "/v1/leaderboards/dup-scores/scores", Service: true,
				Body: `{"player_id":"alice","match_id":"m1","score":5,"score":500}`}).Expect(t, 400).JSON(t, &p)
			if !slices.Contains(p.fields(), "score") {
				t.Errorf("a repeated score: the refusal names %v", p.fields())
			}
			c.Player("alice", "GET", "/v1/leaderboards/dup-scores/players/alice/rank", nil).Expect(t, 404)
			first := c.Do(apitest.Call{Method: "POST", Path: "/v1/activity", As: "alice", Header: map[string]string{"Idempotency-Key": "dup-2"},
				Body: map[string]any{"event_type": "DAILY_OPEN", "source": "mobile_app"}}).Expect(t, 200)
			if first.Header.Get("Idempotent-Replayed") != "" {
				t.Errorf("the first accepted activity under a key a refusal used was answered as a replay")
			}
		})
	}
}
