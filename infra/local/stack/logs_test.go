package stack_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rallyhq/rally/infra/local/apitest"
	"github.com/rallyhq/rally/infra/local/stack"
	"github.com/rallyhq/rally/infra/local/stacktest"
	"github.com/rallyhq/rally/infra/local/testenv/await"
	"github.com/rallyhq/rally/shared/obs"
	"github.com/rallyhq/rally/shared/routes"
)

// Erasure cannot reach logs, so logs never hold a user id: real traffic
// through every kind of path that logs (requests, failed requests whose
// errors name the player, stream processors, an erasure) leaves the ids
// nowhere in the stack's log, and the keyed hash an operator searches for
// wherever a line is about the user.
func TestLogsNameUsersOnlyByTheirKeyedHash(t *testing.T) {
	var logs syncBuffer
	s := stacktest.Start(t, stack.Options{Log: &logs})
	c := apitest.New(t, s)
	const (
		fan      = "zqx-fan-7f3e91"
		rival    = "zqx-rival-42aa0c"
		unranked = "zqx-ghost-9bd1e7"
		leaver   = "zqx-leaver-c0ffee"
	)
	c.Player(fan, "POST", "/v1/favorites/space-race", nil).Expect(t, 200)
	c.Player(leaver, "POST", "/v1/favorites/space-race", nil).Expect(t, 200)
	c.Player(fan, "PUT", "/v1/posts/p1/like", nil).Expect(t, 200)
	c.Player(fan, "GET", "/v1/users/"+fan+"/favorites", nil).Expect(t, 200)
	c.Do(apitest.Call{Method: "POST", Path: "/v1/activity", As: fan, Header: map[string]string{"Idempotency-Key": "open-1"},
		Body: map[string]string{"event_type": "DAILY_OPEN", "source": "mobile_app", "timezone": "Europe/Berlin"}}).Expect(t, 200)
	c.Player(fan, "GET", "/v1/users/"+rival+"/points/history", nil).Expect(t, 403)
	c.Service("PUT", "/v1/leaderboards/logs-board", map[string]any{"title": "Logs", "policy": "best", "order": "desc", "reset": "none"}).Expect(t, 201)
	c.Service("POST", "/v1/leaderboards/logs-board/scores", map[string]any{"player_id": rival, "match_id": "m1", "score": 10}).Expect(t, 200)
	c.Service("PUT", "/v1/players/"+rival+"/friends", map[string]any{"friend_ids": []string{fan, leaver}}).Expect(t, 200)
	// A failed request is logged with its error, which names the player.
	c.Player(fan, "GET", "/v1/leaderboards/logs-board/players/"+unranked+"/rank", nil).Expect(t, 404)
	c.Player(leaver, "DELETE", "/v1/users/"+leaver, nil).Expect(t, 202)
	await.Success(t, 60*time.Second, "the erasure completed", func() error {
		var st struct {
			Status string `json:"status"`
		}
		c.Player(leaver, "GET", "/v1/users/"+leaver+"/erasure", nil).Expect(t, 200).JSON(t, &st)
		if st.Status != "COMPLETED" {
			return errNotYet(st.Status)
		}
		return nil
	})
	if err := s.WaitIdle(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	if !strings.Contains(out, `"msg":"request failed"`) || !strings.Contains(out, `"msg":"erasure completed"`) {
		t.Fatalf("the traffic logged neither the failed request nor the erasure:\n%s", out)
	}
	for _, id := range []string{fan, rival, unranked, leaver} {
		if strings.Contains(out, id) {
			for _, line := range strings.Split(out, "\n") {
				if strings.Contains(line, id) {
					t.Errorf("the log names %s: %s", id, line)
				}
			}
		}
	}
	key := []byte(routes.LogKey.Local)
	for what, id := range map[string]string{"the failed rank read": unranked, "the erasure": leaver} {
		if !strings.Contains(out, "user:"+obs.UserHash(key, id)) {
			t.Errorf("%s is not logged under its user's hash %s:\n%s", what, obs.UserHash(key, id), out)
		}
	}
}

type errNotYet string

func (e errNotYet) Error() string { return "still " + string(e) }
