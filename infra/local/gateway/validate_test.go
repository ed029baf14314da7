package gateway_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/rallyhq/rally/infra/local/gateway"
	"github.com/rallyhq/rally/shared/api"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// With ValidateRequests, a request the OpenAPI document refuses never
// reaches its function: the gateway answers the problem a handler would
// (400, invalid-request, the field) and logs the mismatch by route and
// field, never the value. What the document admits goes through, and
// credentials are still the authorizers' to refuse first.
func TestRequestsTheDocumentRefusesNeverReachTheFunction(t *testing.T) {
	var logs lockedBuffer
	f := newFixtureWith(t, gateway.Options{ValidateRequests: true, Log: slog.New(slog.NewJSONHandler(&logs, nil))})
	bearer := "Bearer " + f.token("alice")

	long := strings.Repeat("g", 129)
	req := f.request("POST", "/v1/favorites/"+long, nil)
	req.Header.Set("Authorization", bearer)
	resp, body := f.do(req)
	p := problem(t, resp, body, 400)
	if p.Type != "urn:rally:problem:invalid-request" || len(p.Errors) != 1 || p.Errors[0].Field != "game_id" || p.Errors[0].Message != api.IDMessage {
		t.Fatalf("problem %+v", p)
	}
	if n := len(f.invoked()); n != 0 {
		t.Fatalf("the function ran %d times on a refused request", n)
	}
	out := logs.String()
	if !strings.Contains(out, `"msg":"contract mismatch: the request breaks the OpenAPI document"`) ||
		!strings.Contains(out, `"route":"POST /v1/favorites/{game_id}"`) || !strings.Contains(out, "game_id: ") {
		t.Fatalf("the mismatch is not logged by route and field:\n%s", out)
	}
	if strings.Contains(out, long) {
		t.Fatalf("the log holds the refused value:\n%s", out)
	}

	// Without a token the authorizer answers first, as it does today.
	resp, body = f.do(f.request("POST", "/v1/favorites/"+long, nil))
	problem(t, resp, body, 401)

	req = f.request("GET", "/v1/games/top?limit=10&window=7d", nil)
	req.Header.Set("Authorization", bearer)
	if resp, body := f.do(req); resp.StatusCode != 200 {
		t.Fatalf("a valid request refused: %d %s", resp.StatusCode, body)
	}
	if n := len(f.invoked()); n != 1 {
		t.Fatalf("the function ran %d times, want once", n)
	}
}
