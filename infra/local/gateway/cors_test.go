package gateway_test

import (
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/rallyhq/rally/infra/local/gateway"
	"github.com/rallyhq/rally/shared/api"
	"github.com/rallyhq/rally/shared/errs"
	"github.com/rallyhq/rally/shared/routes"
)

const game = "http://localhost:5173"

// param matches a route path's {parameter} segments.
var param = regexp.MustCompile(`\{[^}]+\}`)

func corsFixture(t *testing.T, origins ...string) *fixture {
	t.Helper()
	cors, err := gateway.RallyCORS(origins)
	if err != nil {
		t.Fatal(err)
	}
	return newFixtureWith(t, gateway.Options{CORS: cors})
}

func (f *fixture) preflight(path, origin, method string) (*http.Response, []byte) {
	f.t.Helper()
	req := f.request("OPTIONS", path, nil)
	req.Header.Set("Origin", origin)
	req.Header.Set("Access-Control-Request-Method", method)
	req.Header.Set("Access-Control-Request-Headers", "authorization,idempotency-key")
	return f.do(req)
}

// accessControl lists the response's Access-Control-* headers.
func accessControl(h http.Header) []string {
	var out []string
	for name := range h {
		if strings.HasPrefix(strings.ToLower(name), "access-control-") {
			out = append(out, name)
		}
	}
	return out
}

// A browser's preflight for any route path is answered by the gateway,
// before any authorizer (a preflight carries no token), with what the
// deployed API allows.
func TestPreflightsFromAnAllowedOriginAreAnsweredForEveryRoute(t *testing.T) {
	f := corsFixture(t, gateway.DefaultCORSOrigins...)
	for _, r := range routes.All() {
		path := param.ReplaceAllString(r.Path, "x1")
		resp, body := f.preflight(path, game, r.Method)
		h := resp.Header
		if resp.StatusCode != http.StatusNoContent || len(body) != 0 {
			t.Errorf("preflight %s: %d %s, want 204 and no body", r.Key(), resp.StatusCode, body)
			continue
		}
		if h.Get("Access-Control-Allow-Origin") != game {
			t.Errorf("preflight %s: Allow-Origin %q, want the origin %q", r.Key(), h.Get("Access-Control-Allow-Origin"), game)
		}
		if !strings.Contains(","+h.Get("Access-Control-Allow-Methods")+",", ","+r.Method+",") {
			t.Errorf("preflight %s: Allow-Methods %q lacks %s", r.Key(), h.Get("Access-Control-Allow-Methods"), r.Method)
		}
		for _, want := range []string{"authorization", "content-type", "idempotency-key"} {
			if !strings.Contains(h.Get("Access-Control-Allow-Headers"), want) {
				t.Errorf("preflight %s: Allow-Headers %q lacks %s", r.Key(), h.Get("Access-Control-Allow-Headers"), want)
			}
		}
		if h.Get("Access-Control-Max-Age") != "600" || h.Get("Vary") != "Origin" {
			t.Errorf("preflight %s: Max-Age %q, Vary %q", r.Key(), h.Get("Access-Control-Max-Age"), h.Get("Vary"))
		}
	}
	if n := len(f.invoked()); n != 0 {
		t.Errorf("preflights invoked handlers %d times", n)
	}
	// Any port of this machine is a local web game; other ports of other
	// hosts are not.
	for origin, allowed := range map[string]bool{
		"http://localhost": true, "http://localhost:8080": true, "http://127.0.0.1:3001": true, "http://[::1]:5173": true,
		"https://localhost:5173": false, "http://localhost.evil.example": false, "http://localhost:80x": false,
	} {
		resp, _ := f.preflight("/v1/games/top", origin, "GET")
		if got := resp.Header.Get("Access-Control-Allow-Origin"); (got == origin) != allowed {
			t.Errorf("origin %s: Allow-Origin %q; allowed should be %v", origin, got, allowed)
		}
	}
}

// A real response to an allowed origin, success or refusal (the gateway's
// 401, a handler's 429), carries Allow-Origin and lets the script read the
// budget headers; CORS headers a handler sets are replaced, as API Gateway
// ignores them.
func TestResponsesToAnAllowedOriginCarryCORSHeaders(t *testing.T) {
	f := corsFixture(t, game)
	var status int
	f.respond = func(events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		resp := api.Encode(api.OK(map[string]bool{"ok": true}))
		if status == 429 {
			e := errs.New(errs.RateLimited, "slow down")
			e.RetryAfter = 2 * time.Second
			resp = api.Encode(api.ProblemFor(e))
		}
		resp.Headers["Access-Control-Allow-Origin"] = "*"
		resp.Headers["RateLimit-Remaining"] = "0"
		return resp, nil
	}
	call := func(token string) *http.Response {
		req := f.request("POST", "/v1/favorites/g1", nil)
		req.Header.Set("Origin", game)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, _ := f.do(req)
		return resp
	}
	for name, resp := range map[string]*http.Response{
		"200":            call(f.token("alice")),
		"401 (no token)": call(""),
		"429": func() *http.Response {
			status = 429
			return call(f.token("alice"))
		}(),
	} {
		h := resp.Header
		if !strings.HasPrefix(name, strconv.Itoa(resp.StatusCode)) {
			t.Errorf("%s: status %d", name, resp.StatusCode)
		}
		if h.Get("Access-Control-Allow-Origin") != game {
			t.Errorf("%s (status %d): Allow-Origin %q, want %q", name, resp.StatusCode, h.Get("Access-Control-Allow-Origin"), game)
		}
		for _, want := range []string{"Retry-After", "RateLimit-Remaining", "Apigw-Requestid"} {
			if !strings.Contains(h.Get("Access-Control-Expose-Headers"), want) {
				t.Errorf("%s: Expose-Headers %q lacks %s", name, h.Get("Access-Control-Expose-Headers"), want)
			}
		}
	}
}

// A page on another origin gets no Access-Control-* header at all, to its
// preflight (which the browser then fails) or to a request; without CORS
// configured a preflight is an OPTIONS no route serves.
func TestAnotherOriginGetsNoCORSHeaders(t *testing.T) {
	f := corsFixture(t, game)
	f.respond = func(events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		resp := api.Encode(api.OK(map[string]bool{"ok": true}))
		resp.Headers["Access-Control-Allow-Origin"] = "*" // the handler's own are ignored
		return resp, nil
	}
	resp, _ := f.preflight("/v1/favorites/g1", "https://evil.example", "POST")
	if resp.StatusCode != http.StatusNoContent || len(accessControl(resp.Header)) != 0 {
		t.Errorf("preflight from another origin: %d with %v", resp.StatusCode, accessControl(resp.Header))
	}
	req := f.request("POST", "/v1/favorites/g1", nil)
	req.Header.Set("Origin", "https://evil.example")
	req.Header.Set("Authorization", "Bearer "+f.token("alice"))
	resp, _ = f.do(req)
	if resp.StatusCode != 200 || len(accessControl(resp.Header)) != 0 {
		t.Errorf("request from another origin: %d with %v", resp.StatusCode, accessControl(resp.Header))
	}
	if resp, _ := f.preflight("/v1/no-such-thing", game, "GET"); resp.StatusCode != 404 {
		t.Errorf("preflight of a path no route serves: %d, want 404", resp.StatusCode)
	}

	plain := newFixture(t)
	resp, body := plain.preflight("/v1/favorites/g1", game, "POST")
	if resp.StatusCode != 404 || len(accessControl(resp.Header)) != 0 {
		t.Errorf("preflight without CORS configured: %d %s with %v, want 404 and no CORS", resp.StatusCode, body, accessControl(resp.Header))
	}
}

// Origins a browser never sends are refused when the gateway is configured.
func TestRallyCORSRefusesOriginsBrowsersNeverSend(t *testing.T) {
	for _, bad := range []string{"localhost:5173", "http://localhost:5173/", "http://localhost:5173/game", "http://LOCALHOST:5173"} {
		if _, err := gateway.RallyCORS([]string{bad}); err == nil {
			t.Errorf("RallyCORS(%q) accepted", bad)
		}
	}
	for _, good := range []string{"*", "http://localhost:*", "https://play.example.com"} {
		if _, err := gateway.RallyCORS([]string{good}); err != nil {
			t.Errorf("RallyCORS(%q): %v", good, err)
		}
	}
}
