package stack_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/rallyhq/rally/infra/local/authorizer"
	"github.com/rallyhq/rally/infra/local/stack"
	"github.com/rallyhq/rally/infra/local/stacktest"
	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/infra/local/testenv/await"
	"github.com/rallyhq/rally/shared/api"
	"github.com/rallyhq/rally/shared/deadletters"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
	"github.com/rallyhq/rally/shared/streamread"
	"github.com/rallyhq/rally/shared/streams"
)

func TestMain(m *testing.M) { testenv.Main(m) }

type client struct {
	t   *testing.T
	url string
}

// call sends a request; auth is "" (none), "sigv4", or a bearer token.
func (c client) call(method, path, auth string, body any) (int, http.Header, []byte) {
	c.t.Helper()
	var raw []byte
	if body != nil {
		var err error
		if raw, err = json.Marshal(body); err != nil {
			c.t.Fatal(err)
		}
	}
	req, err := http.NewRequest(method, c.url+path, bytes.NewReader(raw))
	if err != nil {
		c.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	switch auth {
	case "":
	case "sigv4":
		if err := stack.SignRequest(req, raw); err != nil {
			c.t.Fatal(err)
		}
	default:
		req.Header.Set("Authorization", "Bearer "+auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, out
}

func (c client) json(method, path, auth string, body any, status int, into any) {
	c.t.Helper()
	got, _, raw := c.call(method, path, auth, body)
	if got != status {
		c.t.Fatalf("%s %s: status %d, want %d: %s", method, path, got, status, raw)
	}
	if into != nil {
		if err := json.Unmarshal(raw, into); err != nil {
			c.t.Fatalf("%s %s: %v: %s", method, path, err, raw)
		}
	}
}

func (c client) token(sub string) string {
	c.t.Helper()
	var out struct {
		Token     string `json:"token"`
		ExpiresAt string `json:"expires_at"`
	}
	c.json("POST", "/_local/token", "", map[string]string{"sub": sub}, 200, &out)
	if exp, err := time.Parse(time.RFC3339, out.ExpiresAt); err != nil || time.Until(exp) < 50*time.Minute {
		c.t.Fatalf("expires_at %q", out.ExpiresAt)
	}
	return out.Token
}

func waitIdle(t *testing.T, s *stack.Stack) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
}

// The real handlers and the real counter processor, end to end: a favorite
// written through the API is counted once the stream has been delivered.
func TestAFavoriteIsCountedThroughTheStream(t *testing.T) {
	s := stacktest.Start(t, stack.Options{})
	c := client{t, s.URL()}
	alice, bob := c.token("alice"), c.token("bob")
	c.json("PUT", "/v1/games/space-race", "sigv4", map[string]string{"title": "Space Race", "thumbnail_url": "https://img.example/s.png"}, 200, nil)
	for _, tok := range []string{alice, bob} {
		var fav struct {
			Favorited, Changed bool
		}
		c.json("POST", "/v1/favorites/space-race", tok, nil, 200, &fav)
		if !fav.Favorited || !fav.Changed {
			t.Fatalf("favorite = %+v", fav)
		}
	}
	waitIdle(t, s)
	var count struct {
		Count int64 `json:"count"`
	}
	c.json("GET", "/v1/games/space-race/favorites/count", alice, nil, 200, &count)
	if count.Count != 2 {
		t.Fatalf("count = %d after WaitIdle, want 2", count.Count)
	}
}

func TestHealthReportsEverythingUp(t *testing.T) {
	s := stacktest.Start(t, stack.Options{})
	c := client{t, s.URL()}
	var h stack.Health
	c.json("GET", "/_local/health", "", nil, 200, &h)
	if h.Status != "ok" || h.DynamoDB != "ok" || h.Redis != "ok" || h.Routes != len(routes.All()) {
		t.Fatalf("health %+v", h)
	}
	if len(h.Processors) != len(routes.Processors()) {
		t.Fatalf("processors %+v, want one per declared processor", h.Processors)
	}
	for i, p := range routes.Processors() {
		if h.Processors[i].Function != p.Function || h.Processors[i].Source != p.Source.Name {
			t.Errorf("processor %d = %s reading %s, want %s reading %s", i, h.Processors[i].Function, h.Processors[i].Source, p.Function, p.Source.Name)
		}
	}
}

func TestTheClockMovesWhatHandlersSee(t *testing.T) {
	s := stacktest.Start(t, stack.Options{})
	c := client{t, s.URL()}
	var st struct {
		Now    string `json:"now"`
		Offset string `json:"offset"`
	}
	c.json("POST", "/_local/clock", "", map[string]string{"now": "2026-11-22T10:00:00Z"}, 200, &st)
	if now := s.Clock().Now(); now.Before(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)) || now.After(time.Date(2026, 11, 22, 10, 1, 0, 0, time.UTC)) {
		t.Fatalf("clock after set = %s", now)
	}
	c.json("POST", "/_local/clock", "", map[string]string{"advance": "24h"}, 200, &st)
	got, err := time.Parse(time.RFC3339Nano, st.Now)
	if err != nil || got.Before(time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)) || got.After(time.Date(2026, 11, 23, 10, 1, 0, 0, time.UTC)) {
		t.Fatalf("clock after advance = %q", st.Now)
	}
	c.json("GET", "/_local/clock", "", nil, 200, &st)
	if !strings.HasPrefix(st.Now, "2026-11-23T10:0") {
		t.Fatalf("GET clock = %+v", st)
	}
	if s.Deps().Clock.Now().Before(time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)) {
		t.Fatalf("the handlers' clock does not follow: %s", s.Deps().Clock.Now())
	}
	for _, bad := range []map[string]string{{}, {"now": "2026-11-22T10:00:00Z", "advance": "1h"}, {"now": "tomorrow"}, {"advance": "1 day"}} {
		code, hdr, body := c.call("POST", "/_local/clock", "", bad)
		if code != 400 || hdr.Get("Content-Type") != api.ProblemContentType {
			t.Errorf("POST /_local/clock %v: %d %s", bad, code, body)
		}
	}
}

func TestTokensFromTheLocalIssuerOpenPlayerRoutes(t *testing.T) {
	var sub atomic.Value
	s := stacktest.Start(t, stack.Options{Handlers: map[string]api.Handler{
		routes.TopGames.Function: func(_ context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
			sub.Store(ev.RequestContext.Authorizer.JWT.Claims["sub"])
			return api.Encode(api.OK(map[string]string{})), nil
		},
	}})
	c := client{t, s.URL()}
	c.json("GET", "/v1/games/top", c.token("carol"), nil, 200, nil)
	if sub.Load() != "carol" {
		t.Fatalf("handler saw sub %v", sub.Load())
	}

	var jwks authorizer.JWKS
	c.json("GET", "/_local/.well-known/jwks.json", "", nil, 200, &jwks)
	if len(jwks.Keys) != 1 || jwks.Keys[0].Kid != s.JWT().KeyID() || jwks.Keys[0].Kty != "RSA" {
		t.Fatalf("jwks %+v", jwks)
	}
	var oidc map[string]any
	c.json("GET", "/_local/.well-known/openid-configuration", "", nil, 200, &oidc)
	if oidc["issuer"] != s.URL()+"/_local" || oidc["jwks_uri"] != s.URL()+"/_local/.well-known/jwks.json" {
		t.Fatalf("openid configuration %v", oidc)
	}

	var expired struct{ Token string }
	c.json("POST", "/_local/token", "", map[string]string{"sub": "carol", "ttl": "-1h"}, 200, &expired)
	if code, _, body := c.call("GET", "/v1/games/top", expired.Token, nil); code != 401 {
		t.Fatalf("expired token: %d %s", code, body)
	}
	for _, bad := range []map[string]string{{}, {"sub": "no spaces allowed"}, {"sub": "x", "ttl": "forever"}, {"sub": "x", "extra": "1"}} {
		if code, _, body := c.call("POST", "/_local/token", "", bad); code != 400 {
			t.Errorf("POST /_local/token %v: %d %s", bad, code, body)
		}
	}
}

// A processor that fails every record: the batch is parked, archived with
// its records (visible in the console and in health), and a redrive after
// the fix applies it from the archive even once the stream no longer holds
// it, and empties the archive.
func TestFailedBatchesAreParkedArchivedAndRedriven(t *testing.T) {
	var broken atomic.Bool
	broken.Store(true)
	var mu sync.Mutex
	var applied []string
	s := stacktest.Start(t, stack.Options{StreamRetention: routes.StreamRetention, Processors: map[string]streams.Handler{
		routes.CounterProcessor.Function: func(_ context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
			if broken.Load() {
				return events.DynamoDBEventResponse{}, errors.New("counter store unavailable")
			}
			mu.Lock()
			defer mu.Unlock()
			for _, r := range ev.Records {
				applied = append(applied, r.Change.SequenceNumber)
			}
			return events.DynamoDBEventResponse{}, nil
		},
	}})
	c := client{t, s.URL()}
	c.json("POST", "/v1/favorites/space-race", c.token("alice"), nil, 200, nil)
	waitIdle(t, s)

	var list struct {
		Count   int                 `json:"count"`
		Batches []deadletters.Batch `json:"batches"`
	}
	c.json("GET", "/_local/dlq", "", nil, 200, &list)
	if list.Count != 1 || list.Batches[0].Function != routes.CounterProcessor.Function || list.Batches[0].Source != schema.Reactions.Name ||
		list.Batches[0].Reason != "RetryAttemptsExhausted" || list.Batches[0].Size != 1 || list.Batches[0].First != list.Batches[0].Last {
		t.Fatalf("dlq %+v", list)
	}
	var h stack.Health
	c.json("GET", "/_local/health", "", nil, 200, &h)
	if h.Processors[0].DLQBatches != 1 {
		t.Fatalf("health does not show the parked batch: %+v", h.Processors)
	}

	// A day and more later the stream no longer holds the batch...
	parked := list.Batches[0]
	s.Clock().Advance(25 * time.Hour)
	_, err := streamread.ReadRange(context.Background(), s.Streams(), streamread.BatchInfo{
		StreamARN: parked.StreamARN, ShardID: parked.ShardID, StartSequenceNumber: parked.First, EndSequenceNumber: parked.Last,
	}, stack.Region)
	if !errors.Is(err, streamread.ErrExpired) {
		t.Fatalf("reading the parked range after the retention: %v, want ErrExpired", err)
	}
	// ... and the redrive replays it from the archive.
	broken.Store(false)
	var rd struct {
		Results []deadletters.Outcome `json:"results"`
	}
	c.json("POST", "/_local/dlq/redrive", "", nil, 200, &rd)
	if len(rd.Results) != 1 || !rd.Results[0].Done() || rd.Results[0].Batch != parked.ID {
		t.Fatalf("redrive %+v", rd)
	}
	mu.Lock()
	if len(applied) != 1 || applied[0] != parked.First {
		t.Errorf("applied %v after redrive, want %s", applied, parked.First)
	}
	mu.Unlock()
	c.json("GET", "/_local/dlq", "", nil, 200, &list)
	if list.Count != 0 {
		t.Fatalf("dlq after redrive: %+v", list)
	}
	if code, _, _ := c.call("POST", "/_local/dlq/redrive", "", map[string]string{"function": "nope"}); code != 400 {
		t.Errorf("redrive of an unknown function: %d", code)
	}
}

func TestAPausedProcessorShowsLagUntilResumed(t *testing.T) {
	s := stacktest.Start(t, stack.Options{})
	c := client{t, s.URL()}
	fn := routes.CounterProcessor.Function
	if err := s.Pause(fn); err != nil {
		t.Fatal(err)
	}
	tok := c.token("alice")
	for _, g := range []string{"g1", "g2", "g3"} {
		c.json("POST", "/v1/favorites/"+g, tok, nil, 200, nil)
	}
	await.Success(t, 20*time.Second, "a lag of 3 records on the paused processor", func() error {
		var h stack.Health
		c.json("GET", "/_local/health", "", nil, 200, &h)
		if h.Processors[0].LagRecords == 3 && h.Processors[0].Paused {
			return nil
		}
		return fmt.Errorf("processors %+v", h.Processors)
	})
	if err := s.Resume(fn); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, s)
	var h stack.Health
	c.json("GET", "/_local/health", "", nil, 200, &h)
	if p := h.Processors[0]; p.LagRecords != 0 || p.Delivered != 3 || p.LastBatchAt == nil {
		t.Fatalf("after resume: %+v", p)
	}
	if err := s.Pause("no-such-function"); !errors.Is(err, stack.ErrUnknownFunction) {
		t.Errorf("Pause(unknown) = %v", err)
	}
}

func TestServiceRoutesAcceptSignRequest(t *testing.T) {
	s := stacktest.Start(t, stack.Options{})
	c := client{t, s.URL()}
	c.json("PUT", "/v1/games/g1", "sigv4", map[string]string{"title": "G1", "thumbnail_url": "https://img.example/g1.png"}, 200, nil)
	if code, _, _ := c.call("PUT", "/v1/games/g1", c.token("alice"), map[string]string{"title": "G1"}); code != 403 {
		t.Fatalf("a player token on a service route answered %d, want 403", code)
	}
}

func TestOpenAPIAndRequestLog(t *testing.T) {
	var logs syncBuffer
	s := stacktest.Start(t, stack.Options{Log: &logs})
	c := client{t, s.URL()}
	code, hdr, body := c.call("GET", "/openapi.json", "", nil)
	var doc map[string]any
	if code != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "application/json") || json.Unmarshal(body, &doc) != nil || doc["openapi"] == nil {
		t.Fatalf("/openapi.json: %d %s %.100s", code, hdr.Get("Content-Type"), body)
	}
	// The stack serves on a port of its own, not the document's 3000:
	// its first server is where it serves, and a deployment stays second.
	var served struct {
		Servers []struct {
			URL string `json:"url"`
		} `json:"servers"`
	}
	_ = json.Unmarshal(body, &served)
	if len(served.Servers) != 2 || served.Servers[0].URL != s.URL() || !strings.Contains(served.Servers[1].URL, "{apiId}") {
		t.Fatalf("/openapi.json servers %+v, want %s and the deployment", served.Servers, s.URL())
	}
	code, hdr, _ = c.call("GET", "/_local/nothing", "", nil)
	if code != 404 || hdr.Get("Content-Type") != api.ProblemContentType {
		t.Fatalf("unknown local endpoint: %d %s", code, hdr.Get("Content-Type"))
	}
	_, hdr, _ = c.call("GET", "/v1/games/top", c.token("alice"), nil)
	id := hdr.Get("Apigw-Requestid")
	if id == "" {
		t.Fatal("no apigw-requestid header")
	}
	// After Close no request is in flight, so every log line is written.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(strings.NewReader(logs.String()))
	for sc.Scan() {
		var line map[string]any
		if json.Unmarshal(sc.Bytes(), &line) != nil || line["msg"] != "request" || line["request_id"] != id {
			continue
		}
		if line["method"] != "GET" || line["path"] != nil || line["status"] != float64(200) ||
			line["route"] != routes.TopGames.Key() || line["duration_ms"] == nil {
			t.Fatalf("request log line %v", line)
		}
		return
	}
	t.Fatalf("no request log line for %s in:\n%s", id, logs.String())
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The local endpoints mint tokens and move the clock, so they answer only
// requests addressed to a loopback name: a page whose own host name
// resolves to 127.0.0.1 (DNS rebinding) reaches the port, but its Host
// header gives it away and it gets 403, with nothing done.
func TestLocalEndpointsAnswerOnlyLoopbackHosts(t *testing.T) {
	s := stacktest.Start(t, stack.Options{})
	port := strings.TrimPrefix(s.URL(), "http://localhost:")
	send := func(host, method, path, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, "http://127.0.0.1:"+port+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(raw)
	}
	before := s.Clock().Now()
	for _, host := range []string{"evil.example:" + port, "evil.example", "127.0.0.1.evil.example:" + port, "localhost.evil.example", "10.0.0.1:" + port} {
		if status, body := send(host, "POST", "/_local/clock", `{"advance":"240h"}`); status != 403 || !strings.Contains(body, "localhost") {
			t.Errorf("Host %s: moving the clock answered %d %s, want 403", host, status, body)
		}
		if status, _ := send(host, "POST", "/_local/token", `{"sub":"mallory"}`); status != 403 {
			t.Errorf("Host %s: minting a token answered %d, want 403", host, status)
		}
	}
	if moved := s.Clock().Now().Sub(before); moved > time.Hour {
		t.Fatalf("a refused request moved the clock by %s", moved)
	}
	for _, host := range []string{"localhost:" + port, "LOCALHOST:" + port, "127.0.0.1:" + port, "[::1]:" + port, "localhost", "[::1]"} {
		if status, body := send(host, "GET", "/_local/clock", ""); status != 200 {
			t.Errorf("Host %s: %d %s, want 200", host, status, body)
		}
	}
}

// IAM lets in any principal of the account allowed to invoke the API;
// Rally's service routes answer only the roles on the deployment's
// allow-list, each route those it admits. Locally a role session comes
// from /_local/assume-role and is described to the function as AWS
// describes it (an assumed-role ARN).
func TestServiceRoutesAnswerOnlyAllowListedRoles(t *testing.T) {
	s := stacktest.Start(t, stack.Options{})
	c := client{t, s.URL()}
	call := func(creds authorizer.RoleCredentials, route ...string) (int, string) {
		t.Helper()
		method, path, body := "GET", "/v1/ops/health", ""
		if len(route) == 3 {
			method, path, body = route[0], route[1], route[2]
		}
		req, err := http.NewRequest(method, s.URL()+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if err := stack.SignRequestAs(creds)(req, []byte(body)); err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(raw)
	}
	assume := func(role string) authorizer.RoleCredentials {
		var creds authorizer.RoleCredentials
		c.json("POST", "/_local/assume-role", "", map[string]string{"role_arn": role, "session": "test-run"}, 200, &creds)
		if want := "assumed-role/" + role[strings.LastIndex(role, "/")+1:] + "/test-run"; !strings.HasSuffix(creds.AssumedRoleARN, want) {
			t.Fatalf("session of %s described as %s", role, creds.AssumedRoleARN)
		}
		return creds
	}
	if status, body := call(assume(stack.OperatorRole)); status != 200 {
		t.Errorf("a session of the operator role, on the allow-list: %d %s", status, body)
	}
	game := assume(stack.GameServerRole)
	if status, body := call(game, "PUT", "/v1/games/g1", `{"title":"Space Race"}`); status != 200 {
		t.Errorf("a session of the game-server role on a game route: %d %s", status, body)
	}
	if status, body := call(game); status != 403 || !strings.Contains(body, "allow-list") {
		t.Errorf("a session of the game-server role on an operator's route: %d %s, want 403", status, body)
	}
	intruder := assume("arn:aws:iam::" + authorizer.AccountID + ":role/Admin")
	if status, body := call(intruder); status != 403 || !strings.Contains(body, "allow-list") {
		t.Errorf("a session of a role off the allow-list: %d %s, want 403", status, body)
	}
	// The session token is part of the credentials.
	forged := intruder
	forged.AccessKeyID, forged.SessionToken = assume(stack.OperatorRole).AccessKeyID, "not-the-token"
	if status, _ := call(forged); status != 403 {
		t.Errorf("a session's key with another token: %d, want 403", status)
	}
	c.json("POST", "/_local/assume-role", "", map[string]string{"role_arn": "arn:aws:iam::123456789012:role/rally-local-operator"}, 400, nil)

	narrow := stacktest.Start(t, stack.Options{Principals: routes.Principals{routes.Operator: {stack.OperatorRole}}})
	req, err := http.NewRequest("GET", narrow.URL()+"/v1/ops/health", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := stack.SignRequest(req, nil); err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Errorf("the local user, left off the allow-list: %d, want 403", resp.StatusCode)
	}
}
