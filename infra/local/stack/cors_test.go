package stack_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/rallyhq/rally/infra/local/apitest"
	"github.com/rallyhq/rally/infra/local/stack"
	"github.com/rallyhq/rally/infra/local/stacktest"
	"github.com/rallyhq/rally/shared/config"
	"github.com/rallyhq/rally/shared/routes"
)

// A web game served by a dev server on this machine calls the local stack
// as a browser would: its preflight is answered, and its favorite, and the
// 429 when the budget is spent, are readable by the page, budget headers
// included. A page on another origin gets no CORS header.
func TestAWebGameOnLocalhostCallsTheStack(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stack.Options{Configure: func(c *config.Config) { c.Budgets[routes.FavoriteBudget.Name] = 1 }})
	c := apitest.New(t, s)
	const page = "http://localhost:5173"

	preflight := func(origin string) *http.Response {
		req, err := http.NewRequest("OPTIONS", s.URL()+"/v1/favorites/space-race", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", "POST")
		req.Header.Set("Access-Control-Request-Headers", "authorization")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	resp := preflight(page)
	if resp.StatusCode != 204 || resp.Header.Get("Access-Control-Allow-Origin") != page ||
		!strings.Contains(resp.Header.Get("Access-Control-Allow-Methods"), "POST") ||
		!strings.Contains(resp.Header.Get("Access-Control-Allow-Headers"), "authorization") {
		t.Fatalf("preflight from %s: %d %v", page, resp.StatusCode, resp.Header)
	}

	favorite := func(origin string) apitest.Response {
		return c.Do(apitest.Call{Method: "POST", Path: "/v1/favorites/space-race", As: "alice", Header: map[string]string{"Origin": origin}})
	}
	for _, r := range []apitest.Response{favorite(page).Expect(t, 200), favorite(page).Expect(t, 429)} {
		if r.Header.Get("Access-Control-Allow-Origin") != page {
			t.Errorf("%d to %s: Allow-Origin %q", r.Status, page, r.Header.Get("Access-Control-Allow-Origin"))
		}
		exposed := r.Header.Get("Access-Control-Expose-Headers")
		for _, h := range []string{"RateLimit-Remaining", "Retry-After"} {
			if !strings.Contains(exposed, h) || (r.Status == 429 && r.Header.Get(h) == "") {
				t.Errorf("%d: the page cannot read %s (exposed %q, value %q)", r.Status, h, exposed, r.Header.Get(h))
			}
		}
	}

	const other = "https://evil.example"
	for name, h := range map[string]http.Header{"preflight": preflight(other).Header, "request": favorite(other).Header} {
		for k := range h {
			if strings.HasPrefix(strings.ToLower(k), "access-control-") {
				t.Errorf("%s from %s: %s: %s", name, other, k, h.Get(k))
			}
		}
	}
}

// An origin no browser sends (-cors-origins=localhost:5173) stops the
// stack before it starts anything, saying what an origin looks like.
func TestAnOriginNoBrowserSendsStopsTheStack(t *testing.T) {
	s, err := stack.Start(context.Background(), stack.Options{CORSOrigins: []string{"localhost:5173"}, StateDir: t.TempDir()})
	if err == nil {
		_ = s.Close()
		t.Fatal("the stack started with origin localhost:5173")
	}
	if !strings.Contains(err.Error(), `"localhost:5173"`) || !strings.Contains(err.Error(), "scheme://host") {
		t.Fatalf("error %q does not say what an origin looks like", err)
	}
}
