package stack_test

import (
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/rallyhq/rally/infra/local/apitest"
	"github.com/rallyhq/rally/infra/local/stack"
	"github.com/rallyhq/rally/infra/local/stacktest"
	"github.com/rallyhq/rally/shared/routes"
)

var pathParam = regexp.MustCompile(`\{[^}/]+\}`)

// requestTo is a request to r with every path parameter filled in and,
// where the route takes one, a body it accepts.
func requestTo(r routes.Route) apitest.Call {
	values := map[string]string{"{leaderboard_id}": "roles-board", "{player_id}": "alice", "{user_id}": "alice"}
	path := pathParam.ReplaceAllStringFunc(r.Path, func(p string) string {
		if v, ok := values[p]; ok {
			return v
		}
		return "p1"
	})
	call := apitest.Call{Method: r.Method, Path: path}
	if r.Key() == routes.ReportActivity.Key() {
		call.Header = map[string]string{"Idempotency-Key": "roles-1"}
	}
	body, ok := map[string]map[string]any{
		routes.PutGame.Key():            {"title": "Space Race"},
		routes.PutLeaderboard.Key():     {"title": "Roles", "policy": "best"},
		routes.SubmitScore.Key():        {"player_id": "bob", "match_id": "m-roles", "score": 7},
		routes.PutFriends.Key():         {"friend_ids": []string{"bob"}},
		routes.PutProfile.Key():         {"display_name": "Alice"},
		routes.ReportActivity.Key():     {"user_id": "alice", "event_type": "MATCH_WON", "source": "console"},
		routes.StartJob.Key():           {"kind": "reconcile", "target": "all"},
		routes.RedriveDeadLetters.Key(): {},
	}[r.Key()]
	if ok {
		call.Body = body
	}
	return call
}

// A game server may call the game routes and nothing else: it defines a
// board and submits scores, a request it signs on any route the operator
// alone may call answers 403 application/problem+json and changes
// nothing, and the operator may call every service route. Signed as rallyserver (the local game server) and
// as a session of the local game-server role, as a deployment's game
// servers sign.
func TestTheGameServerMayCallOnlyTheGameRoutes(t *testing.T) {
	s := stacktest.Start(t, stack.Options{})
	c := apitest.New(t, s)
	// A board where bob and alice have scores, so a removal, a ban or an
	// erasure would show.
	c.Do(apitest.Call{Method: "PUT", Path: "/v1/leaderboards/roles-board", Body: map[string]any{"title": "Roles", "policy": "best"},
		Sign: stack.SignRequestAsGameServer}).Expect(t, 201)
	for _, p := range []string{"alice", "bob"} {
		c.Do(apitest.Call{Method: "POST", Path: "/v1/leaderboards/roles-board/scores", Sign: stack.SignRequestAsGameServer,
			Body: map[string]any{"player_id": p, "match_id": "m-" + p, "score": 5}}).Expect(t, 200)
	}
	session, err := s.AssumeRole(stack.GameServerRole, "match-7")
	if err != nil {
		t.Fatal(err)
	}
	signers := map[string]func(*http.Request, []byte) error{
		"rallyserver":                stack.SignRequestAsGameServer,
		"a game-server role session": stack.SignRequestAs(session),
	}
	for _, r := range routes.All() {
		if r.Auth != routes.Service {
			continue
		}
		for who, sign := range signers {
			call := requestTo(r)
			call.Sign = sign
			resp := c.Do(call)
			switch {
			case r.Admits(routes.GameServer) && (resp.Status == 403 || resp.Status/100 == 5):
				// Admitted: the answer is the route's own (2xx with the
				// bodies above, a 4xx of its input otherwise).
				t.Errorf("%s signed by %s, a game route: %d %s", r.Key(), who, resp.Status, resp.Body)
			case r.Admits(routes.GameServer) && call.Body != nil && resp.Status/100 != 2:
				t.Errorf("%s signed by %s, a game route with a valid body: %d %s, want 2xx", r.Key(), who, resp.Status, resp.Body)
			case !r.Admits(routes.GameServer) && (resp.Status != 403 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json")):
				t.Errorf("%s signed by %s, an operator's route: %d %q %s, want 403 problem+json",
					r.Key(), who, resp.Status, resp.Header.Get("Content-Type"), resp.Body)
			}
		}
	}
	// Nothing the game server tried stuck: alice is on the board, unbanned
	// and not being erased, and no job runs.
	var rank struct {
		Score int64 `json:"score"`
	}
	c.Player("alice", "GET", "/v1/leaderboards/roles-board/players/alice/rank", nil).Expect(t, 200).JSON(t, &rank)
	if rank.Score != 5 {
		t.Errorf("alice's score after the game server's attempts: %d, want 5", rank.Score)
	}
	c.Service("GET", "/v1/ops/users/alice/erasure", nil).Expect(t, 404)
	var health struct {
		JobsRunning int `json:"jobs_running"`
	}
	c.Service("GET", "/v1/ops/health", nil).Expect(t, 200).JSON(t, &health)
	if health.JobsRunning != 0 {
		t.Errorf("%d jobs running, started by the game server", health.JobsRunning)
	}
	// The operator may call every service route.
	for _, r := range routes.All() {
		if r.Auth != routes.Service {
			continue
		}
		call := requestTo(r)
		call.Sign = stack.SignRequest
		if resp := c.Do(call); resp.Status == 403 || resp.Status/100 == 5 {
			t.Errorf("%s signed by rallylocal, the operator: %d %s", r.Key(), resp.Status, resp.Body)
		}
	}
}
