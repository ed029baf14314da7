package gateway_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/golang-jwt/jwt/v5"

	"github.com/rallyhq/rally/infra/local/authorizer"
	"github.com/rallyhq/rally/infra/local/gateway"
	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/shared/api"
	"github.com/rallyhq/rally/shared/routes"
)

const (
	issuer    = "http://localhost/_local"
	audience  = "rally-local"
	accessKey = "rallylocal"
	secret    = "rallylocalsecret"
)

// fixture serves every declared route with a handler that records the
// event it was given and answers with respond.
type fixture struct {
	t       *testing.T
	url     string
	jwt     *authorizer.JWT
	mu      sync.Mutex
	events  []events.APIGatewayV2HTTPRequest
	respond func(events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error)
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	return newFixtureWith(t, gateway.Options{})
}

// newFixtureWith takes the gateway's options but its routes and
// authorizers.
func newFixtureWith(t *testing.T, opts gateway.Options) *fixture {
	t.Helper()
	j, err := authorizer.NewJWT(issuer, audience)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, jwt: j}
	f.respond = func(events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		return api.Encode(api.OK(map[string]bool{"ok": true})), nil
	}
	var rs []gateway.Route
	for _, r := range routes.All() {
		rs = append(rs, gateway.Route{Route: r, Handler: func(_ context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
			f.mu.Lock()
			f.events = append(f.events, ev)
			f.mu.Unlock()
			return f.respond(ev)
		}})
	}
	opts.Routes = rs
	opts.Authorizers = map[routes.Auth]authorizer.Authorizer{
		routes.Player:  j,
		routes.Service: authorizer.NewIAM(authorizer.User{Name: "rallylocal", AccessKeyID: accessKey, Secret: secret}),
	}
	g, err := gateway.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gateway.Logged(discardLogger(), g))
	t.Cleanup(srv.Close)
	f.url = srv.URL
	return f
}

func (f *fixture) token(sub string) string {
	tok, _, err := f.jwt.Mint(authorizer.TokenRequest{Subject: sub})
	if err != nil {
		f.t.Fatal(err)
	}
	return tok
}

func (f *fixture) invoked() []events.APIGatewayV2HTTPRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]events.APIGatewayV2HTTPRequest(nil), f.events...)
}

func (f *fixture) do(req *http.Request) (*http.Response, []byte) {
	f.t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Fatal(err)
	}
	return resp, body
}

func (f *fixture) request(method, path string, body []byte) *http.Request {
	f.t.Helper()
	req, err := http.NewRequest(method, f.url+path, bytes.NewReader(body))
	if err != nil {
		f.t.Fatal(err)
	}
	return req
}

func TestTheEventIsWhatAPIGatewayDelivers(t *testing.T) {
	f := newFixture(t)
	body := []byte{0xff, 0x00, 0x10}
	req := f.request("POST", "/v1/favorites/g%201?b=2&a=1&a=x%26y", body)
	req.Header.Set("Authorization", "Bearer "+f.token("alice"))
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Add("X-Custom-Thing", "one")
	req.Header.Add("X-Custom-Thing", "two")
	req.Header.Set("Cookie", "a=1; b=2")
	req.Header.Set("User-Agent", "rally-test/1")
	resp, _ := f.do(req)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	evs := f.invoked()
	if len(evs) != 1 {
		t.Fatalf("handler invoked %d times", len(evs))
	}
	ev := evs[0]
	checks := []struct {
		name      string
		got, want any
	}{
		{"version", ev.Version, "2.0"},
		{"routeKey", ev.RouteKey, "POST /v1/favorites/{game_id}"},
		{"requestContext.routeKey", ev.RequestContext.RouteKey, "POST /v1/favorites/{game_id}"},
		{"rawPath", ev.RawPath, "/v1/favorites/g 1"},
		{"rawQueryString", ev.RawQueryString, "b=2&a=1&a=x%26y"},
		{"pathParameters", ev.PathParameters["game_id"], "g 1"},
		{"query a", ev.QueryStringParameters["a"], "1,x&y"},
		{"query b", ev.QueryStringParameters["b"], "2"},
		{"multi-value header", ev.Headers["x-custom-thing"], "one,two"},
		{"content-type", ev.Headers["content-type"], "application/octet-stream"},
		{"host", ev.Headers["host"], strings.TrimPrefix(f.url, "http://")},
		{"cookies", strings.Join(ev.Cookies, "|"), "a=1|b=2"},
		{"isBase64Encoded", ev.IsBase64Encoded, true},
		{"body", ev.Body, base64.StdEncoding.EncodeToString(body)},
		{"stage", ev.RequestContext.Stage, "$default"},
		{"accountId", ev.RequestContext.AccountID, "000000000000"},
		{"http.method", ev.RequestContext.HTTP.Method, "POST"},
		{"http.path", ev.RequestContext.HTTP.Path, "/v1/favorites/g 1"},
		{"http.protocol", ev.RequestContext.HTTP.Protocol, "HTTP/1.1"},
		{"http.sourceIp", ev.RequestContext.HTTP.SourceIP, "127.0.0.1"},
		{"http.userAgent", ev.RequestContext.HTTP.UserAgent, "rally-test/1"},
		{"requestId", ev.RequestContext.RequestID, resp.Header.Get("Apigw-Requestid")},
		{"claims.sub", ev.RequestContext.Authorizer.JWT.Claims["sub"], "alice"},
		{"claims.iss", ev.RequestContext.Authorizer.JWT.Claims["iss"], issuer},
		{"claims.aud", ev.RequestContext.Authorizer.JWT.Claims["aud"], audience},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %#v, want %#v", c.name, c.got, c.want)
		}
	}
	for k := range ev.Headers {
		if k != strings.ToLower(k) {
			t.Errorf("header %q is not lower-cased", k)
		}
	}
	if _, ok := ev.Headers["cookie"]; ok {
		t.Error("the cookie header is passed in headers; payload 2.0 moves it to cookies")
	}
	if ev.RequestContext.RequestID == "" {
		t.Error("no requestId")
	}
	if d := time.Since(time.UnixMilli(ev.RequestContext.TimeEpoch)); d < 0 || d > time.Minute {
		t.Errorf("timeEpoch is %s away from now", d)
	}
	if _, err := time.Parse("02/Jan/2006:15:04:05 -0700", ev.RequestContext.Time); err != nil {
		t.Errorf("time %q: %v", ev.RequestContext.Time, err)
	}
	if exp := ev.RequestContext.Authorizer.JWT.Claims["exp"]; strings.ContainsAny(exp, "e.") || exp == "" {
		t.Errorf("numeric claim exp rendered as %q, want an integer string", exp)
	}

	// A JSON body passes as text, and every request gets its own id.
	req = f.request("PUT", "/v1/posts/p1/like", []byte(`{"x":1}`))
	req.Header.Set("Authorization", "Bearer "+f.token("bob"))
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	f.do(req)
	evs = f.invoked()
	second := evs[1]
	if second.IsBase64Encoded || second.Body != `{"x":1}` {
		t.Errorf("JSON body = %q (base64 %v), want it as text", second.Body, second.IsBase64Encoded)
	}
	if second.QueryStringParameters != nil || second.Cookies != nil {
		t.Errorf("absent query/cookies should be omitted, got %v %v", second.QueryStringParameters, second.Cookies)
	}
	if second.RequestContext.RequestID == ev.RequestContext.RequestID {
		t.Error("two requests share a requestId")
	}
}

func TestTheHandlerResponseIsWrittenBack(t *testing.T) {
	f := newFixture(t)
	f.respond = func(events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		return events.APIGatewayV2HTTPResponse{
			StatusCode:        201,
			Headers:           map[string]string{"Content-Type": "text/plain", "X-One": "1"},
			MultiValueHeaders: map[string][]string{"X-Many": {"a", "b"}},
			Cookies:           []string{"c=1; Path=/", "d=2"},
			Body:              base64.StdEncoding.EncodeToString([]byte("hello")),
			IsBase64Encoded:   true,
		}, nil
	}
	req := f.request("GET", "/v1/games/top", nil)
	req.Header.Set("Authorization", "Bearer "+f.token("alice"))
	resp, body := f.do(req)
	if resp.StatusCode != 201 || string(body) != "hello" {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
	if resp.Header.Get("X-One") != "1" || strings.Join(resp.Header.Values("X-Many"), ",") != "a,b" {
		t.Errorf("headers %v", resp.Header)
	}
	if got := resp.Header.Values("Set-Cookie"); strings.Join(got, "|") != "c=1; Path=/|d=2" {
		t.Errorf("Set-Cookie = %v", got)
	}
}

func TestFailingFunctionsAnswer500WithoutLeakingTheCause(t *testing.T) {
	f := newFixture(t)
	for name, respond := range map[string]func(events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error){
		"error": func(events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
			return events.APIGatewayV2HTTPResponse{}, errors.New("secret database password")
		},
		"panic": func(events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
			panic("secret database password")
		},
	} {
		t.Run(name, func(t *testing.T) {
			f.respond = respond
			req := f.request("GET", "/v1/games/top", nil)
			req.Header.Set("Authorization", "Bearer "+f.token("alice"))
			resp, body := f.do(req)
			p := problem(t, resp, body, 500)
			if strings.Contains(string(body), "secret") {
				t.Errorf("problem leaks the cause: %+v", p)
			}
		})
	}
}

func TestRoutesMatchLikeAPIGateway(t *testing.T) {
	f := newFixture(t)
	cases := []struct {
		method, path string
		service      bool
		wantRoute    string // "" means 404
		wantParam    string
	}{
		{"GET", "/v1/games/top", false, "GET /v1/games/top", ""},
		{"PUT", "/v1/games/top", true, "PUT /v1/games/{game_id}", "top"},
		{"GET", "/v1/favorites/status", false, "GET /v1/favorites/status", ""},
		{"POST", "/v1/favorites/status", false, "POST /v1/favorites/{game_id}", "status"},
		{"DELETE", "/v1/games/top", false, "", ""},
		{"GET", "/v1/games/top/", false, "", ""},
		{"GET", "/v1/nothing", false, "", ""},
		{"GET", "/v1/users//favorites", false, "", ""},
	}
	for _, c := range cases {
		t.Run(c.method+" "+c.path, func(t *testing.T) {
			before := len(f.invoked())
			req := f.request(c.method, c.path, nil)
			if c.service {
				if err := authorizer.Sign(req, nil, accessKey, secret, time.Now()); err != nil {
					t.Fatal(err)
				}
			} else {
				req.Header.Set("Authorization", "Bearer "+f.token("alice"))
			}
			resp, body := f.do(req)
			if c.wantRoute == "" {
				problem(t, resp, body, 404)
				if len(f.invoked()) != before {
					t.Error("a handler ran for an unmatched request")
				}
				return
			}
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			evs := f.invoked()
			ev := evs[len(evs)-1]
			if ev.RouteKey != c.wantRoute {
				t.Errorf("routeKey = %s, want %s", ev.RouteKey, c.wantRoute)
			}
			for _, v := range ev.PathParameters {
				if v != c.wantParam {
					t.Errorf("path parameter = %q, want %q", v, c.wantParam)
				}
			}
		})
	}
}

func TestPlayerRoutesRequireAValidJWT(t *testing.T) {
	f := newFixture(t)
	now := time.Now()
	claims := func(mod func(jwt.MapClaims)) jwt.MapClaims {
		c := jwt.MapClaims{"iss": issuer, "sub": "alice", "aud": audience, "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
		mod(c)
		return c
	}
	sign := func(c jwt.MapClaims) string {
		tok, err := f.jwt.Sign(c)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	otherKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	signedElsewhere := func(kid string) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodRS256, claims(func(jwt.MapClaims) {}))
		tok.Header["kid"] = kid
		s, err := tok.SignedString(otherKey)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	expired, _, err := f.jwt.Mint(authorizer.TokenRequest{Subject: "alice", TTL: -time.Minute})
	if err != nil {
		t.Fatal(err)
	}

	cases := map[string]string{
		"missing":                 "",
		"not a JWT":               "Bearer abc.def",
		"expired":                 "Bearer " + expired,
		"no exp":                  "Bearer " + sign(claims(func(c jwt.MapClaims) { delete(c, "exp") })),
		"wrong audience":          "Bearer " + sign(claims(func(c jwt.MapClaims) { c["aud"] = "someone-else" })),
		"no audience or clientid": "Bearer " + sign(claims(func(c jwt.MapClaims) { delete(c, "aud") })),
		"wrong issuer":            "Bearer " + sign(claims(func(c jwt.MapClaims) { c["iss"] = "https://evil.example" })),
		"not yet valid":           "Bearer " + sign(claims(func(c jwt.MapClaims) { c["nbf"] = now.Add(time.Hour).Unix() })),
		"issued in the future":    "Bearer " + sign(claims(func(c jwt.MapClaims) { c["iat"] = now.Add(time.Hour).Unix() })),
		"wrong signature":         "Bearer " + signedElsewhere(f.jwt.KeyID()),
		"unknown kid":             "Bearer " + signedElsewhere("another-kid"),
		"SigV4 instead":           "AWS4-HMAC-SHA256 Credential=x",
	}
	for name, authz := range cases {
		t.Run(name, func(t *testing.T) {
			req := f.request("GET", "/v1/games/top", nil)
			if authz != "" {
				req.Header.Set("Authorization", authz)
			}
			resp, body := f.do(req)
			problem(t, resp, body, 401)
			if !strings.HasPrefix(resp.Header.Get("Www-Authenticate"), "Bearer") {
				t.Errorf("WWW-Authenticate = %q", resp.Header.Get("Www-Authenticate"))
			}
		})
	}
	if n := len(f.invoked()); n != 0 {
		t.Fatalf("handler ran %d times for refused requests", n)
	}

	valid := map[string]string{
		"bearer":             "Bearer " + f.token("alice"),
		"without the prefix": f.token("alice"),
		"client_id instead of aud": "Bearer " + sign(claims(func(c jwt.MapClaims) {
			delete(c, "aud")
			c["client_id"] = audience
		})),
		"audience list": "Bearer " + sign(claims(func(c jwt.MapClaims) { c["aud"] = []string{"x", audience} })),
	}
	for name, authz := range valid {
		t.Run(name, func(t *testing.T) {
			req := f.request("GET", "/v1/games/top", nil)
			req.Header.Set("Authorization", authz)
			resp, body := f.do(req)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
		})
	}
	evs := f.invoked()
	for _, ev := range evs {
		if ev.RequestContext.Authorizer.JWT.Claims["aud"] == "[x rally-local]" {
			return
		}
	}
	t.Error("an audience list is not rendered as API Gateway does ([a b])")
}

func TestServiceRoutesRequireAValidSigV4Signature(t *testing.T) {
	f := newFixture(t)
	body := []byte(`{"title":"Space Race","thumbnail_url":"https://img.example/1.png"}`)
	signed := func(key, sec string, at time.Time) *http.Request {
		req := f.request("PUT", "/v1/games/g1?x=1&a=b%20c", body)
		req.Header.Set("Content-Type", "application/json")
		if err := authorizer.Sign(req, body, key, sec, at); err != nil {
			t.Fatal(err)
		}
		return req
	}

	resp, b := f.do(signed(accessKey, secret, time.Now()))
	if resp.StatusCode != 200 {
		t.Fatalf("valid signature: %d %s", resp.StatusCode, b)
	}
	iam := f.invoked()[0].RequestContext.Authorizer.IAM
	if iam == nil || iam.AccessKey != accessKey || iam.AccountID != "000000000000" ||
		iam.UserARN != "arn:aws:iam::000000000000:user/rallylocal" || iam.CallerID == "" {
		t.Fatalf("authorizer.iam = %+v", iam)
	}

	tampered := signed(accessKey, secret, time.Now())
	tampered.Body = io.NopCloser(bytes.NewReader([]byte(`{"title":"Hacked"}`)))
	tampered.ContentLength = int64(len(`{"title":"Hacked"}`))
	otherQuery := signed(accessKey, secret, time.Now())
	otherQuery.URL.RawQuery = "x=2"
	bearer := f.request("PUT", "/v1/games/g1", body)
	bearer.Header.Set("Authorization", "Bearer "+f.token("alice"))

	refused := map[string]*http.Request{
		"wrong secret":   signed(accessKey, "not-the-secret", time.Now()),
		"unknown key":    signed("AKIASOMEONEELSE", secret, time.Now()),
		"stale date":     signed(accessKey, secret, time.Now().Add(-6*time.Minute)),
		"future date":    signed(accessKey, secret, time.Now().Add(6*time.Minute)),
		"tampered body":  tampered,
		"other query":    otherQuery,
		"bearer token":   bearer,
		"no credentials": f.request("PUT", "/v1/games/g1", body),
	}
	for name, req := range refused {
		t.Run(name, func(t *testing.T) {
			resp, b := f.do(req)
			problem(t, resp, b, 403)
		})
	}
	if n := len(f.invoked()); n != 1 {
		t.Fatalf("handler ran %d times, want once (the valid request)", n)
	}
}

// curl's own SigV4 implementation is what developers will use by hand.
// curl before 8.1 signs the query string in the order given instead of
// sorted, which AWS rejects as well, so the query here is already sorted.
func TestCurlSigV4IsAccepted(t *testing.T) {
	curl, err := exec.LookPath("curl")
	testenv.Require(t, "curl", err)
	f := newFixture(t)
	for _, c := range []struct{ method, path, body string }{
		{"PUT", "/v1/games/g1?a=2&b=1", `{"title":"Space Race"}`},
		{"PUT", "/v1/games/g3", `{"title":"Space Race"}`},
		{"PUT", "/v1/games/g2", ""},
	} {
		args := []string{"-sS", "-o", "/dev/null", "-w", "%{http_code}", "-X", c.method,
			"--aws-sigv4", "aws:amz:us-east-1:execute-api", "--user", accessKey + ":" + secret,
			"-H", "Content-Type: application/json"}
		if c.body != "" {
			args = append(args, "--data-binary", c.body)
		}
		out, err := exec.Command(curl, append(args, f.url+c.path)...).CombinedOutput()
		if err != nil {
			t.Fatalf("curl: %v: %s", err, out)
		}
		if string(out) != "200" {
			t.Fatalf("curl %s %s answered %s", c.method, c.path, out)
		}
	}
	out, _ := exec.Command(curl, "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-X", "PUT",
		"--aws-sigv4", "aws:amz:us-east-1:execute-api", "--user", accessKey+":wrong", f.url+"/v1/games/g1").CombinedOutput()
	if string(out) != "403" {
		t.Fatalf("curl with a wrong secret answered %s, want 403", out)
	}
}

func problem(t *testing.T, resp *http.Response, body []byte, status int) api.Problem {
	t.Helper()
	if resp.StatusCode != status {
		t.Fatalf("status %d, want %d: %s", resp.StatusCode, status, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != api.ProblemContentType {
		t.Fatalf("Content-Type %q, want %s", ct, api.ProblemContentType)
	}
	var p api.Problem
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("problem body %q: %v", body, err)
	}
	if p.Status != status || p.Type == "" || p.Title == "" || p.Detail == "" {
		t.Fatalf("incomplete problem %+v", p)
	}
	return p
}

// Precedence on made-up routes: the leftmost literal segment wins, a
// greedy parameter matches what nothing else does, and a route without a
// function answers 500.
func TestMostSpecificRouteWinsAndUnboundRoutesFail(t *testing.T) {
	var got string
	handler := func(name string) api.Handler {
		return func(_ context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
			got = name + " " + strings.Join(sortedParams(ev.PathParameters), ",")
			return api.Encode(api.OK(nil)), nil
		}
	}
	route := func(path, fn string, h api.Handler) gateway.Route {
		return gateway.Route{Route: routes.Route{Method: "GET", Path: path, Function: fn, Auth: routes.Player}, Handler: h}
	}
	j, err := authorizer.NewJWT(issuer, audience)
	if err != nil {
		t.Fatal(err)
	}
	g, err := gateway.New(gateway.Options{
		Routes: []gateway.Route{
			route("/a/{x}/c", "param-first", handler("param-first")),
			route("/a/b/{y}", "literal-first", handler("literal-first")),
			route("/files/{path+}", "greedy", handler("greedy")),
			route("/unbound", "unbound", nil),
		},
		Authorizers: map[routes.Auth]authorizer.Authorizer{routes.Player: j},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g)
	defer srv.Close()
	tok, _, err := j.Mint(authorizer.TokenRequest{Subject: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		"/a/b/c":        "literal-first y=c",
		"/a/z/c":        "param-first x=z",
		"/files/x/y/z":  "greedy path=x/y/z",
		"/unbound":      "500",
		"/files":        "404",
		"/a/b/c/d":      "404",
		"/a/%62/c":      "literal-first y=c",
		"/files/a%2Fb":  "greedy path=a/b",
		"/a/b%20b/c":    "param-first x=b b",
		"/a/b/c?q=%zz!": "literal-first y=c",
	} {
		got = ""
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		switch want {
		case "404", "500":
			if fmt.Sprint(resp.StatusCode) != want || got != "" {
				t.Errorf("%s: status %d, handler %q; want %s", path, resp.StatusCode, got, want)
			}
		default:
			if got != want {
				t.Errorf("%s: served by %q, want %q", path, got, want)
			}
		}
	}
	if _, err := gateway.New(gateway.Options{Routes: []gateway.Route{route("/x", "a", nil), route("/x", "b", nil)}}); err == nil {
		t.Error("a duplicate route key was accepted")
	}
}

func sortedParams(m map[string]string) []string {
	var out []string
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}
