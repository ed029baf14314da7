// Package apitest drives a local stack over HTTP the way a game client or
// game server does — with a player's JWT or a service's SigV4 signature —
// and checks every response it receives against the OpenAPI document, so
// end-to-end tests prove the contract as a side effect of every call.
package apitest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rallyhq/rally/infra/local/stack"
	"github.com/rallyhq/rally/shared/openapi"
	"github.com/rallyhq/rally/shared/routes"
)

// Client calls one stack.
type Client struct {
	t     testing.TB
	stack *stack.Stack
	http  *http.Client

	mu     sync.Mutex
	tokens map[string]string
	from   map[string]*http.Client
}

// client returns the HTTP client whose connections come from the local
// address from ("" the default client).
func (c *Client) client(from string) *http.Client {
	if from == "" {
		return c.http
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if hc, ok := c.from[from]; ok {
		return hc
	}
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	hc := &http.Client{Timeout: c.http.Timeout, Transport: &http.Transport{DialContext: dialer.DialContext, MaxIdleConnsPerHost: 64}}
	if c.from == nil {
		c.from = map[string]*http.Client{}
	}
	c.from[from] = hc
	return hc
}

// New returns a client for s.
func New(t testing.TB, s *stack.Stack) *Client {
	return &Client{t: t, stack: s, http: &http.Client{Timeout: 30 * time.Second}, tokens: map[string]string{}}
}

// Response is what the stack answered.
type Response struct {
	Status  int
	Header  http.Header
	Body    []byte
	Request string
}

// JSON decodes the body into v, failing the test on error.
func (r Response) JSON(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("%s: body %q: %v", r.Request, r.Body, err)
	}
}

// Map decodes the body as a JSON object.
func (r Response) Map(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	r.JSON(t, &m)
	return m
}

// Expect fails the test unless the status is want.
func (r Response) Expect(t testing.TB, want int) Response {
	t.Helper()
	if r.Status != want {
		t.Fatalf("%s: status %d, want %d: %s", r.Request, r.Status, want, r.Body)
	}
	return r
}

// Call is one request to make.
type Call struct {
	Method string
	Path   string // with query string
	Body   any    // encoded as JSON unless []byte or string
	Header map[string]string
	// As is the player whose token is sent ("" sends none); Service signs
	// the request with SigV4 instead, as the role the route declares: the
	// game server (rallyserver) on a game route, the operator (rallylocal)
	// on the others.
	As      string
	Service bool
	// Token overrides the bearer token sent.
	Token string
	// Sign replaces the stack's SigV4 signing (e.g. a wrong secret).
	Sign func(req *http.Request, body []byte) error
	// From is the loopback address the request comes from (e.g.
	// 127.0.0.7), as a client at another IP; "" is the default.
	From string
}

// Player calls as player sub.
func (c *Client) Player(sub, method, path string, body any) Response {
	return c.Do(Call{Method: method, Path: path, Body: body, As: sub})
}

// Service calls as a SigV4-signed service, in the role the route
// declares.
func (c *Client) Service(method, path string, body any) Response {
	return c.Do(Call{Method: method, Path: path, Body: body, Service: true})
}

// Token returns (and caches) a token for sub.
func (c *Client) Token(sub string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if tok, ok := c.tokens[sub]; ok {
		return tok
	}
	tok, err := c.stack.Token(sub)
	if err != nil {
		c.t.Fatalf("token for %s: %v", sub, err)
	}
	c.tokens[sub] = tok
	return tok
}

// Do makes a call, validates the response against the OpenAPI document
// when the route is known, and returns it. Transport failures fail the test.
func (c *Client) Do(call Call) Response {
	c.t.Helper()
	resp, err := c.try(call)
	if err != nil {
		c.t.Fatal(err)
	}
	return resp
}

// Try is Do for use from goroutines: it returns errors instead of failing.
func (c *Client) Try(call Call) (Response, error) { return c.try(call) }

func (c *Client) try(call Call) (Response, error) {
	var body []byte
	switch b := call.Body.(type) {
	case nil:
	case []byte:
		body = b
	case string:
		body = []byte(b)
	default:
		var err error
		if body, err = json.Marshal(b); err != nil {
			return Response{}, err
		}
	}
	label := call.Method + " " + call.Path
	req, err := http.NewRequest(call.Method, c.stack.URL()+call.Path, bytes.NewReader(body))
	if err != nil {
		return Response{}, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range call.Header {
		req.Header.Set(k, v)
	}
	switch {
	case call.Token != "":
		req.Header.Set("Authorization", "Bearer "+call.Token)
	case call.As != "":
		req.Header.Set("Authorization", "Bearer "+c.Token(call.As))
	}
	sign := call.Sign
	if sign == nil && call.Service {
		role := routes.Operator
		if r, ok := Match(call.Method, call.Path); ok && r.Auth == routes.Service {
			role = r.Role
		}
		sign = stack.SignRequestAsRole(role)
	}
	if sign != nil {
		if err := sign(req, body); err != nil {
			return Response{}, err
		}
	}
	hr, err := c.client(call.From).Do(req)
	if err != nil {
		return Response{}, fmt.Errorf("%s: %w", label, err)
	}
	defer hr.Body.Close()
	raw, err := io.ReadAll(hr.Body)
	if err != nil {
		return Response{}, fmt.Errorf("%s: read body: %w", label, err)
	}
	resp := Response{Status: hr.StatusCode, Header: hr.Header, Body: raw, Request: label}
	if err := Validate(call.Method, call.Path, resp); err != nil {
		return resp, err
	}
	return resp, nil
}

// Validate checks a response against the OpenAPI operation of the route
// matching method and path. Problem responses are checked on every path.
func Validate(method, path string, r Response) error {
	ct := r.Header.Get("Content-Type")
	route, ok := Match(method, path)
	if !ok {
		if r.Status >= 400 && !strings.HasPrefix(ct, "application/problem+json") {
			return fmt.Errorf("%s %s: error %d is not application/problem+json: %q", method, path, r.Status, ct)
		}
		return nil
	}
	if err := openapi.ValidateResponse(route.Method, route.Path, r.Status, ct, r.Body); err != nil {
		return fmt.Errorf("%s %s: response breaks the contract: %w (body %s)", method, path, err, r.Body)
	}
	return nil
}

// Match finds the declared route serving method and path, literal segments
// before parameters as API Gateway does.
func Match(method, path string) (routes.Route, bool) {
	p, _, _ := strings.Cut(path, "?")
	segs := strings.Split(strings.Trim(p, "/"), "/")
	var best routes.Route
	bestLiterals := -1
	for _, r := range routes.All() {
		if r.Method != method {
			continue
		}
		tpl := strings.Split(strings.Trim(r.Path, "/"), "/")
		if len(tpl) != len(segs) {
			continue
		}
		literals, ok := 0, true
		for i, s := range tpl {
			if strings.HasPrefix(s, "{") {
				continue
			}
			if s != segs[i] {
				ok = false
				break
			}
			literals++
		}
		if ok && literals > bestLiterals {
			best, bestLiterals = r, literals
		}
	}
	return best, bestLiterals >= 0
}
