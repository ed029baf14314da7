// Package gateway is the local stand-in for API Gateway's HTTP API: it
// matches requests to the declared routes the way API Gateway does, runs
// the route's authorizer, turns the request into the payload format 2.0
// event a Lambda receives, and writes the handler's response back.
// Gateway-level errors use Rally's problem format (see Problem).
package gateway

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"

	"github.com/rallyhq/rally/infra/local/authorizer"
	"github.com/rallyhq/rally/shared/api"
	"github.com/rallyhq/rally/shared/errs"
	"github.com/rallyhq/rally/shared/openapi"
	"github.com/rallyhq/rally/shared/routes"
)

// Route is a declared route and the Lambda handler serving it.
type Route struct {
	routes.Route
	// Handler serves the route; nil answers 500, as API Gateway does when
	// its integration has no function behind it.
	Handler api.Handler
	// ServiceRoles are the principals the handler admits on a service
	// route (RALLY_SERVICE_ROLES): a request from any other caller goes
	// to the handler unvalidated, to be refused there.
	ServiceRoles api.ServiceRoles
}

// Options configures a Gateway.
type Options struct {
	Routes []Route
	// Authorizers by the routes' auth kind; a route whose kind has no
	// authorizer is refused with 500 (a misconfigured stack, not a client
	// mistake).
	Authorizers map[routes.Auth]authorizer.Authorizer
	// AccountID and APIID fill requestContext (defaults 000000000000 and
	// rallylocal).
	AccountID, APIID string
	// MaxBody is the largest request body accepted (default 10 MiB, API
	// Gateway's payload limit).
	MaxBody int64
	// ValidateRequests checks every request against its operation in the
	// OpenAPI document (shared/openapi) before the handler sees it: a
	// request the document refuses is answered 400 with the problem a
	// handler would give, and logged as a contract mismatch. API Gateway
	// does not do this; it keeps the document and the handlers honest.
	ValidateRequests bool
	// Log receives handler failures; nil discards them.
	Log *slog.Logger
	// CORS, when set, answers preflights and adds CORS headers to the
	// responses to allowed origins; nil configures no CORS (a preflight is
	// then an OPTIONS request no route serves: 404).
	CORS *CORS
}

// Gateway is an http.Handler serving the declared routes.
type Gateway struct {
	opts  Options
	table []compiled

	mu      sync.Mutex
	refused []refusal // since the last Recheck, at most maxRefused
}

// refusal is a request the OpenAPI document refused, kept to be shown to
// its handler later (Recheck).
type refusal struct {
	route  Route
	event  events.APIGatewayV2HTTPRequest
	fields []string
}

// maxRefused bounds the refusals kept between two Rechecks (make dev
// never rechecks).
const maxRefused = 1000

type compiled struct {
	route    Route
	segments []string // "" marks {param}
	params   []string // parameter name per segment, "" for literals
	greedy   bool     // last segment is {name+}
}

// New compiles the route table. Duplicate route keys are an error.
func New(opts Options) (*Gateway, error) {
	if opts.AccountID == "" {
		opts.AccountID = authorizer.AccountID
	}
	if opts.APIID == "" {
		opts.APIID = "rallylocal"
	}
	if opts.MaxBody == 0 {
		opts.MaxBody = 10 << 20
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	g := &Gateway{opts: opts}
	seen := map[string]bool{}
	for _, r := range opts.Routes {
		if seen[r.Key()] {
			return nil, fmt.Errorf("gateway: route %s declared twice", r.Key())
		}
		seen[r.Key()] = true
		c, err := compile(r)
		if err != nil {
			return nil, err
		}
		g.table = append(g.table, c)
	}
	return g, nil
}

func compile(r Route) (compiled, error) {
	if !strings.HasPrefix(r.Path, "/") {
		return compiled{}, fmt.Errorf("gateway: route %s: path must start with /", r.Key())
	}
	c := compiled{route: r}
	parts := strings.Split(strings.TrimPrefix(r.Path, "/"), "/")
	for i, p := range parts {
		if strings.HasPrefix(p, "{") && strings.HasSuffix(p, "}") {
			name := p[1 : len(p)-1]
			if strings.HasSuffix(name, "+") {
				if i != len(parts)-1 {
					return compiled{}, fmt.Errorf("gateway: route %s: a greedy parameter must be last", r.Key())
				}
				name = strings.TrimSuffix(name, "+")
				c.greedy = true
			}
			c.segments = append(c.segments, "")
			c.params = append(c.params, name)
			continue
		}
		c.segments = append(c.segments, p)
		c.params = append(c.params, "")
	}
	return c, nil
}

// match finds the most specific route for the escaped path: literal
// segments beat {param}, which beats {param+}, compared left to right. It
// reports whether any route (of any method) matches the path.
func (g *Gateway) match(method, escapedPath string) (*compiled, map[string]string, bool) {
	raw := strings.Split(strings.TrimPrefix(escapedPath, "/"), "/")
	segs := make([]string, len(raw))
	for i, s := range raw {
		d, err := url.PathUnescape(s)
		if err != nil {
			return nil, nil, false
		}
		segs[i] = d
	}
	var best *compiled
	var bestRank []int
	pathKnown := false
	for i := range g.table {
		c := &g.table[i]
		rank, ok := c.rank(segs)
		if !ok {
			continue
		}
		pathKnown = true
		if c.route.Method != method {
			continue
		}
		if best == nil || better(rank, bestRank) {
			best, bestRank = c, rank
		}
	}
	if best == nil {
		return nil, nil, pathKnown
	}
	return best, best.bind(segs), true
}

// rank scores each segment: 2 literal, 1 parameter, 0 greedy.
func (c *compiled) rank(segs []string) ([]int, bool) {
	n := len(c.segments)
	if c.greedy {
		if len(segs) < n {
			return nil, false
		}
	} else if len(segs) != n {
		return nil, false
	}
	rank := make([]int, n)
	for i := range n {
		switch {
		case c.greedy && i == n-1:
			rank[i] = 0
			if strings.Join(segs[i:], "/") == "" {
				return nil, false
			}
		case c.params[i] != "":
			if segs[i] == "" {
				return nil, false
			}
			rank[i] = 1
		default:
			if segs[i] != c.segments[i] {
				return nil, false
			}
			rank[i] = 2
		}
	}
	return rank, true
}

func better(a, b []int) bool {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return a[i] > b[i]
		}
	}
	return len(a) > len(b)
}

func (c *compiled) bind(segs []string) map[string]string {
	var out map[string]string
	for i, name := range c.params {
		if name == "" {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		if c.greedy && i == len(c.params)-1 {
			out[name] = strings.Join(segs[i:], "/")
		} else {
			out[name] = segs[i]
		}
	}
	return out
}

// ServeHTTP routes, authorizes, invokes and answers.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	requestID := RequestID(r.Context())
	if requestID == "" {
		requestID = NewRequestID()
	}
	w.Header().Set("Apigw-Requestid", requestID)
	if g.opts.CORS != nil && isPreflight(r) {
		// API Gateway answers preflights before any route or authorizer:
		// for every path a route serves (another is still 404 here, to
		// show a mistyped path).
		if c, _, known := g.match(r.Header.Get("Access-Control-Request-Method"), r.URL.EscapedPath()); known {
			if c != nil {
				setRoute(r.Context(), http.MethodOptions+" "+c.route.Path, "")
			}
			g.opts.CORS.preflight(w, r)
			return
		}
	}
	w = g.opts.CORS.writer(w, r)
	c, params, known := g.match(r.Method, r.URL.EscapedPath())
	if c == nil {
		detail := fmt.Sprintf("no route matches %s %s", r.Method, r.URL.Path)
		if known {
			detail = fmt.Sprintf("%s is not a method of %s", r.Method, r.URL.Path)
		}
		Problem(w, errs.New(errs.NotFound, "%s", detail))
		return
	}
	setRoute(r.Context(), c.route.Key(), c.route.Function)
	body, err := io.ReadAll(io.LimitReader(r.Body, g.opts.MaxBody+1))
	if err != nil {
		Problem(w, errs.Wrap(errs.Invalid, err, "the request body could not be read"))
		return
	}
	if int64(len(body)) > g.opts.MaxBody {
		Problem(w, errs.New(errs.TooLarge, "the request body exceeds %d bytes", g.opts.MaxBody))
		return
	}
	az, ok := g.opts.Authorizers[c.route.Auth]
	if !ok {
		Problem(w, errs.New(errs.Internal, "no %s authorizer configured", c.route.Auth))
		return
	}
	desc, err := az.Authorize(r, body)
	if err != nil {
		g.deny(w, err)
		return
	}
	if c.route.Handler == nil {
		g.opts.Log.Error("no handler bound", "function", c.route.Function, "route", c.route.Key())
		Problem(w, errs.New(errs.Internal, "function %s has no handler", c.route.Function))
		return
	}
	ev := g.event(r, c.route.Route, params, body, requestID, desc)
	if g.opts.ValidateRequests && admits(c.route, ev) {
		if err := openapi.ValidateRequest(r.Context(), c.route.Method, c.route.Path, ev); err != nil {
			g.mismatch(w, c.route, ev, err)
			return
		}
	}
	// A Lambda runs to completion even when the client hangs up.
	resp, err := invoke(context.WithoutCancel(r.Context()), c.route.Handler, ev)
	if err != nil {
		g.opts.Log.Error("function failed", "function", c.route.Function, "route", c.route.Key(),
			"request_id", requestID, "error", err.Error())
		Problem(w, errs.Wrap(errs.Internal, err, "the function failed"))
		return
	}
	if err := write(w, resp); err != nil {
		g.opts.Log.Error("bad function response", "function", c.route.Function, "request_id", requestID, "error", err.Error())
		Problem(w, errs.Wrap(errs.Internal, err, "the function returned a malformed response"))
	}
}

// admits reports whether the route's handler would take the request's
// caller: a player whose token's subject is a player id, a service on the
// allow-list. A caller it refuses (403) is refused before anything is read
// from the request, so such a request goes to the handler unchecked and
// is answered exactly as without the check.
func admits(r Route, ev events.APIGatewayV2HTTPRequest) bool {
	req := &api.Request{Event: ev, ServiceRoles: r.ServiceRoles}
	var err error
	if r.Auth == routes.Service {
		_, err = req.Service()
	} else {
		_, err = req.Player()
	}
	return err == nil
}

// mismatch refuses a request the OpenAPI document does not admit, and
// keeps it for Recheck. The log names the route and the fields, never
// their values (they may be user ids).
func (g *Gateway) mismatch(w http.ResponseWriter, route Route, ev events.APIGatewayV2HTTPRequest, err error) {
	r, requestID := route.Route, ev.RequestContext.RequestID
	var e *errs.Error
	if !errors.As(err, &e) || e.Kind == errs.Internal {
		// The document itself could not be read: the stack is broken, not
		// the request.
		g.opts.Log.Error("request validation failed", "route", r.Key(), "request_id", requestID, "error", err.Error())
		Problem(w, errs.Wrap(errs.Internal, err, "the request could not be validated"))
		return
	}
	fields := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		fields[i] = f.Field + ": " + f.Message
	}
	g.opts.Log.Warn("contract mismatch: the request breaks the OpenAPI document", "route", r.Key(),
		"function", r.Function, "request_id", requestID, "status", api.ProblemFor(err).Status, "fields", fields)
	g.mu.Lock()
	if len(g.refused) < maxRefused {
		g.refused = append(g.refused, refusal{route: route, event: ev, fields: fields})
	}
	g.mu.Unlock()
	Problem(w, err)
}

// Mismatch is a request the OpenAPI document refused that its handler
// serves: the deployed API, where API Gateway validates nothing, would
// have served it, so the document promises less than the handler accepts.
type Mismatch struct {
	Route     string   // the route's key
	RequestID string   // the refused request's
	Fields    []string // what the document refused, as its 400 named them
	Status    int      // what the handler answered
}

// Recheck hands every request the document refused since the last Recheck
// to its route's handler, as API Gateway would have, and returns those the
// handler served (2xx). A handler answering anything else agrees with the
// document or cannot tell (a budget spent since, a caller refused), and
// is not a mismatch. The handlers' answers go nowhere: call it when the
// requests' effects no longer matter (a test's end).
func (g *Gateway) Recheck(ctx context.Context) []Mismatch {
	g.mu.Lock()
	refused := g.refused
	g.refused = nil
	g.mu.Unlock()
	var out []Mismatch
	for _, r := range refused {
		if r.route.Handler == nil {
			continue
		}
		resp, err := invoke(context.WithoutCancel(ctx), r.route.Handler, r.event)
		if err == nil && resp.StatusCode/100 == 2 {
			out = append(out, Mismatch{Route: r.route.Key(), RequestID: r.event.RequestContext.RequestID, Fields: r.fields, Status: resp.StatusCode})
		}
	}
	return out
}

func (g *Gateway) deny(w http.ResponseWriter, err error) {
	var d *authorizer.Denied
	if !errors.As(err, &d) {
		Problem(w, errs.Wrap(errs.Internal, err, "authorizer failed"))
		return
	}
	if d.Challenge != "" {
		w.Header().Set("Www-Authenticate", d.Challenge)
	}
	kind := errs.Forbidden
	if errors.Is(err, authorizer.ErrUnauthorized) {
		kind = errs.Unauthenticated
	}
	Problem(w, errs.New(kind, "%s", d.Reason))
}

// invoke calls the handler like the Lambda runtime would: a panic is a
// function error, not a crashed gateway.
func invoke(ctx context.Context, h api.Handler, ev events.APIGatewayV2HTTPRequest) (resp events.APIGatewayV2HTTPResponse, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return h(ctx, ev)
}

// event builds the payload format 2.0 event for r as API Gateway would.
func (g *Gateway) event(r *http.Request, route routes.Route, params map[string]string, body []byte,
	requestID string, desc *authorizer.Description) events.APIGatewayV2HTTPRequest {
	now := time.Now().UTC()
	sourceIP, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		sourceIP = r.RemoteAddr
	}
	headers := map[string]string{}
	for name, values := range r.Header {
		headers[strings.ToLower(name)] = strings.Join(values, ",")
	}
	var cookies []string
	if c, ok := headers["cookie"]; ok {
		delete(headers, "cookie")
		for _, part := range strings.Split(c, ";") {
			if part = strings.TrimSpace(part); part != "" {
				cookies = append(cookies, part)
			}
		}
	}
	headers["host"] = r.Host
	if len(body) > 0 {
		headers["content-length"] = strconv.Itoa(len(body))
	}
	headers["x-forwarded-for"] = sourceIP
	headers["x-forwarded-proto"] = "http"
	if _, port, err := net.SplitHostPort(r.Host); err == nil {
		headers["x-forwarded-port"] = port
	}
	headers["x-amzn-trace-id"] = traceID(now)

	ev := events.APIGatewayV2HTTPRequest{
		Version:               "2.0",
		RouteKey:              route.Key(),
		RawPath:               r.URL.Path,
		RawQueryString:        r.URL.RawQuery,
		Cookies:               cookies,
		Headers:               headers,
		QueryStringParameters: queryParameters(r.URL.RawQuery),
		PathParameters:        params,
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			RouteKey:     route.Key(),
			AccountID:    g.opts.AccountID,
			Stage:        "$default",
			RequestID:    requestID,
			Authorizer:   desc,
			APIID:        g.opts.APIID,
			DomainName:   r.Host,
			DomainPrefix: strings.Split(r.Host, ".")[0],
			Time:         now.Format("02/Jan/2006:15:04:05 -0700"),
			TimeEpoch:    now.UnixMilli(),
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{
				Method:    r.Method,
				Path:      r.URL.Path,
				Protocol:  r.Proto,
				SourceIP:  sourceIP,
				UserAgent: r.UserAgent(),
			},
		},
	}
	if host, _, err := net.SplitHostPort(r.Host); err == nil {
		ev.RequestContext.DomainPrefix = strings.Split(host, ".")[0]
	}
	if len(body) > 0 {
		if isText(r.Header.Get("Content-Type")) && utf8.Valid(body) {
			ev.Body = string(body)
		} else {
			ev.Body = base64.StdEncoding.EncodeToString(body)
			ev.IsBase64Encoded = true
		}
	}
	return ev
}

// queryParameters decodes the query string, joining repeated names with
// commas as payload format 2.0 does; nil when there is none.
func queryParameters(raw string) map[string]string {
	if raw == "" {
		return nil
	}
	values := map[string][]string{}
	var order []string
	for _, pair := range strings.Split(raw, "&") {
		if pair == "" {
			continue
		}
		k, v, _ := strings.Cut(pair, "=")
		dk, err1 := url.QueryUnescape(k)
		dv, err2 := url.QueryUnescape(v)
		if err1 != nil || err2 != nil {
			continue
		}
		if _, ok := values[dk]; !ok {
			order = append(order, dk)
		}
		values[dk] = append(values[dk], dv)
	}
	if len(values) == 0 {
		return nil
	}
	out := make(map[string]string, len(values))
	for _, k := range order {
		out[k] = strings.Join(values[k], ",")
	}
	return out
}

// isText reports whether API Gateway passes a body of this type as text
// rather than base64.
func isText(contentType string) bool {
	if contentType == "" {
		return false
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	switch {
	case strings.HasPrefix(mt, "text/"),
		mt == "application/json", strings.HasSuffix(mt, "+json"),
		mt == "application/xml", strings.HasSuffix(mt, "+xml"),
		mt == "application/javascript", mt == "application/x-www-form-urlencoded",
		mt == "application/graphql", mt == "application/yaml":
		return true
	}
	return false
}

// write renders a Lambda response: status, headers, multi-value headers,
// cookies as Set-Cookie, and the body (decoded when base64).
func write(w http.ResponseWriter, resp events.APIGatewayV2HTTPResponse) error {
	body := []byte(resp.Body)
	if resp.IsBase64Encoded {
		b, err := base64.StdEncoding.DecodeString(resp.Body)
		if err != nil {
			return fmt.Errorf("gateway: response body is not valid base64: %w", err)
		}
		body = b
	}
	h := w.Header()
	names := make([]string, 0, len(resp.Headers))
	for k := range resp.Headers {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		h.Set(k, resp.Headers[k])
	}
	for k, vs := range resp.MultiValueHeaders {
		h.Del(k)
		for _, v := range vs {
			h.Add(k, v)
		}
	}
	for _, c := range resp.Cookies {
		h.Add("Set-Cookie", c)
	}
	if h.Get("Content-Type") == "" && len(body) > 0 {
		// API Gateway does not sniff; neither should net/http.
		h.Set("Content-Type", "application/json")
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	status := resp.StatusCode
	if status == 0 {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	_, err := w.Write(body)
	return err
}

// Problem writes err as Rally's problem document, the one error format
// clients see whether the gateway or a handler refused the request.
func Problem(w http.ResponseWriter, err error) {
	_ = write(w, api.Encode(api.ProblemFor(err)))
}

// NewRequestID returns an id shaped like API Gateway's (base64 of random
// bytes), unique per request.
func NewRequestID() string {
	b := make([]byte, 10)
	_, _ = rand.Read(b)
	return base64.StdEncoding.EncodeToString(b)
}

func traceID(now time.Time) string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return fmt.Sprintf("Root=1-%08x-%x", now.Unix(), b)
}
