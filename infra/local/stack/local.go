package stack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/rallyhq/rally/infra/local/authorizer"
	"github.com/rallyhq/rally/infra/local/gateway"
	"github.com/rallyhq/rally/infra/local/poller"
	"github.com/rallyhq/rally/shared/api"
	"github.com/rallyhq/rally/shared/deadletters"
	"github.com/rallyhq/rally/shared/errs"
	"github.com/rallyhq/rally/shared/exports/objects"
	"github.com/rallyhq/rally/shared/openapi"
	"github.com/rallyhq/rally/shared/routes"
)

// localAPI serves the /_local/ endpoints, which stand in for what AWS
// provides around the API: an identity provider, a clock, health and the
// DLQ console.
func (s *Stack) localAPI() http.Handler {
	type endpoint struct {
		method string
		fn     func(http.ResponseWriter, *http.Request) error
	}
	table := map[string][]endpoint{
		"/_local/health":                           {{"GET", s.health}},
		"/_local/endpoints":                        {{"GET", s.endpoints}},
		"/_local/token":                            {{"POST", s.token}},
		"/_local/assume-role":                      {{"POST", s.assumeRole}},
		"/_local/.well-known/jwks.json":            {{"GET", s.jwks}},
		"/_local/.well-known/openid-configuration": {{"GET", s.openIDConfiguration}},
		"/_local/clock":                            {{"GET", s.getClock}, {"POST", s.setClock}},
		"/_local/dlq":                              {{"GET", s.listDLQ}},
		"/_local/dlq/redrive":                      {{"POST", s.redrive}},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !loopbackHost(r.Host) {
			gateway.Problem(w, errs.New(errs.Forbidden,
				"the local endpoints answer only requests addressed to localhost, 127.0.0.1 or [::1], not %q", r.Host))
			return
		}
		eps, ok := table[r.URL.Path]
		if !ok {
			gateway.Problem(w, errs.New(errs.NotFound, "no local endpoint %s", r.URL.Path))
			return
		}
		var allowed []string
		for _, ep := range eps {
			if ep.method != r.Method {
				allowed = append(allowed, ep.method)
				continue
			}
			if err := ep.fn(w, r); err != nil {
				gateway.Problem(w, err)
			}
			return
		}
		w.Header().Set("Allow", strings.Join(allowed, ", "))
		gateway.Problem(w, errs.New(errs.NotFound, "%s does not answer %s (use %s)", r.URL.Path, r.Method, strings.Join(allowed, ", ")))
	})
}

// exportLinks serves the links to export documents the export-status
// route signs (objects.Dir), as S3 serves presigned GETs: until they
// expire by the stack's clock.
func (s *Stack) exportLinks() http.Handler {
	docs := &objects.Dir{Root: s.stateDir, Key: []byte(objects.LocalLinkKey), Clock: s.clock}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !loopbackHost(r.Host) {
			gateway.Problem(w, errs.New(errs.Forbidden,
				"the local endpoints answer only requests addressed to localhost, 127.0.0.1 or [::1], not %q", r.Host))
			return
		}
		docs.ServeHTTP(w, r)
	})
}

// endpoints tells a function's binary run beside the stack where its AWS
// endpoints and Redis are (what <state>/endpoints.json holds).
func (s *Stack) endpoints(w http.ResponseWriter, _ *http.Request) error {
	return writeJSON(w, http.StatusOK, s.Endpoints())
}

// loopbackHost reports whether a request's Host header names this machine
// by a loopback name (any port). A page on another origin can point a name
// it controls at 127.0.0.1 (DNS rebinding) and reach the stack, but its
// requests still carry that name: they get no tokens, no clock moves and no
// redrives.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	} else {
		host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	}
	switch strings.ToLower(host) {
	case "localhost", "127.0.0.1", "::1":
		return true
	}
	return false
}

func writeJSON(w http.ResponseWriter, status int, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("stack: encode response: %w", err)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, err = w.Write(append(b, '\n'))
	return err
}

// decode reads an optional strict JSON body into v.
func decode(r *http.Request, v any) error {
	body, err := io.ReadAll(io.LimitReader(r.Body, api.MaxBodyBytes+1))
	if err != nil {
		return errs.Wrap(errs.Invalid, err, "the request body could not be read")
	}
	if len(body) > api.MaxBodyBytes {
		return errs.New(errs.TooLarge, "the request body exceeds %d bytes", api.MaxBodyBytes)
	}
	if strings.TrimSpace(string(body)) == "" {
		return nil
	}
	return api.DecodeJSON(body, v)
}

// Health is the body of GET /_local/health.
type Health struct {
	Status     string          `json:"status"`
	DynamoDB   string          `json:"dynamodb"`
	Redis      string          `json:"redis"`
	Routes     int             `json:"routes"`
	Unbound    []string        `json:"unbound_functions,omitempty"`
	Processors []ProcessorInfo `json:"processors"`
	Clock      time.Time       `json:"clock"`
}

// ProcessorInfo is one processor's lag and DLQ depth.
type ProcessorInfo struct {
	poller.Status
	DLQBatches int `json:"dlq_batches"`
}

func (s *Stack) health(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	h := Health{Status: "ok", DynamoDB: "ok", Redis: "ok", Clock: s.clock.Now(), Unbound: s.unbound,
		Routes: len(routes.All()) - s.unboundRoutes(), Processors: []ProcessorInfo{}}
	status := http.StatusOK
	if _, err := s.db.ListTables(ctx, nil); err != nil {
		h.Status, h.DynamoDB, status = "unavailable", "unreachable: "+err.Error(), http.StatusServiceUnavailable
	}
	if err := s.deps.Redis.Ping(ctx).Err(); err != nil {
		h.Redis = "unreachable: " + err.Error()
		if h.Status == "ok" {
			// Reads fall back to DynamoDB without Redis: degraded, not down.
			h.Status = "degraded"
		}
	}
	for _, p := range s.pollers {
		parked, _ := s.archive.List(ctx, p.Function())
		h.Processors = append(h.Processors, ProcessorInfo{Status: p.Status(), DLQBatches: len(parked)})
	}
	return writeJSON(w, status, h)
}

type tokenRequest struct {
	Sub   string `json:"sub"`
	TTL   string `json:"ttl"`
	Aud   string `json:"aud"`
	Scope string `json:"scope"`
}

// maxTokenTTL keeps hand-minted tokens from living forever.
const maxTokenTTL = 30 * 24 * time.Hour

func (s *Stack) token(w http.ResponseWriter, r *http.Request) error {
	var req tokenRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	var f errs.Fields
	api.CheckID(&f, "sub", req.Sub)
	var ttl time.Duration
	if req.TTL != "" {
		d, err := time.ParseDuration(req.TTL)
		switch {
		case err != nil:
			f.Add("ttl", "must be a duration such as 1h or 15m (negative mints an expired token)")
		case d == 0 || d > maxTokenTTL || d < -maxTokenTTL:
			f.Add("ttl", "must be non-zero and at most 720h either way")
		}
		ttl = d
	}
	if err := f.Err(); err != nil {
		return err
	}
	tok, exp, err := s.jwt.Mint(authorizer.TokenRequest{Subject: req.Sub, TTL: ttl, Audience: req.Aud, Scope: req.Scope})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{
		"token": tok, "token_type": "Bearer", "expires_at": exp.UTC().Format(time.RFC3339),
		"issuer": s.jwt.Issuer(), "audience": s.jwt.Audience(),
	})
}

// assumeRole mints temporary credentials of a session of a local role, as
// STS AssumeRole does, for signing service routes as that role.
func (s *Stack) assumeRole(w http.ResponseWriter, r *http.Request) error {
	var req struct {
		RoleARN string `json:"role_arn"`
		Session string `json:"session"`
		TTL     string `json:"ttl"`
	}
	if err := decode(r, &req); err != nil {
		return err
	}
	var ttl time.Duration
	if req.TTL != "" {
		d, err := time.ParseDuration(req.TTL)
		if err != nil {
			return errs.Field("ttl", "must be a duration such as 1h")
		}
		ttl = d
	}
	if req.Session == "" {
		req.Session = "local"
	}
	creds, err := s.iam.AssumeRole(req.RoleARN, req.Session, ttl)
	if err != nil {
		return errs.Field("role_arn", err.Error())
	}
	return writeJSON(w, http.StatusOK, creds)
}

func (s *Stack) jwks(w http.ResponseWriter, _ *http.Request) error {
	return writeJSON(w, http.StatusOK, s.jwt.JWKS())
}

// openIDConfiguration is the discovery document API Gateway reads to find
// an issuer's JWKS.
func (s *Stack) openIDConfiguration(w http.ResponseWriter, _ *http.Request) error {
	return writeJSON(w, http.StatusOK, map[string]any{
		"issuer":                                s.jwt.Issuer(),
		"jwks_uri":                              s.jwt.Issuer() + "/.well-known/jwks.json",
		"token_endpoint":                        s.jwt.Issuer() + "/token",
		"id_token_signing_alg_values_supported": []string{"RS256"},
		"response_types_supported":              []string{"token"},
		"subject_types_supported":               []string{"public"},
	})
}

type clockState struct {
	Now    string `json:"now"`
	Offset string `json:"offset"`
}

func (s *Stack) clockState() clockState {
	now := s.clock.Now()
	return clockState{Now: now.Format(time.RFC3339Nano), Offset: now.Sub(time.Now()).Round(time.Second).String()}
}

func (s *Stack) getClock(w http.ResponseWriter, _ *http.Request) error {
	return writeJSON(w, http.StatusOK, s.clockState())
}

func (s *Stack) setClock(w http.ResponseWriter, r *http.Request) error {
	var req struct {
		Now     string `json:"now"`
		Advance string `json:"advance"`
	}
	if err := decode(r, &req); err != nil {
		return err
	}
	switch {
	case s.binaries != nil:
		return errs.New(errs.Conflict, "the clock cannot be moved while the stack runs the functions' binaries (-binaries): "+
			"they are separate processes on the real clock; restart without -binaries to move time")
	case (req.Now == "") == (req.Advance == ""):
		return errs.Field("body", `give exactly one of "now" (RFC 3339) or "advance" (a duration such as 24h)`)
	case req.Now != "":
		t, err := time.Parse(time.RFC3339, req.Now)
		if err != nil {
			return errs.Field("now", "must be an RFC 3339 time such as 2026-11-22T10:00:00Z")
		}
		s.clock.Set(t)
	default:
		d, err := time.ParseDuration(req.Advance)
		if err != nil {
			return errs.Field("advance", "must be a duration such as 24h or -90m")
		}
		s.clock.Advance(d)
	}
	return writeJSON(w, http.StatusOK, s.clockState())
}

func (s *Stack) listDLQ(w http.ResponseWriter, r *http.Request) error {
	out := []deadletters.Batch{}
	for _, p := range s.eachFunction() {
		parked, err := s.archive.List(r.Context(), p.Function())
		if err != nil {
			return err
		}
		out = append(out, parked...)
	}
	return writeJSON(w, http.StatusOK, map[string]any{"count": len(out), "batches": out})
}

func (s *Stack) redrive(w http.ResponseWriter, r *http.Request) error {
	var req struct {
		Function string `json:"function"`
		Batch    string `json:"batch_id"`
	}
	if err := decode(r, &req); err != nil {
		return err
	}
	if req.Function != "" {
		if _, err := s.poller(req.Function); err != nil {
			return errs.Field("function", "is not a running stream processor")
		}
	}
	results := []deadletters.Outcome{}
	for _, p := range s.eachFunction() {
		if req.Function != "" && p.Function() != req.Function {
			continue
		}
		done, err := s.archive.Redrive(r.Context(), s.invoker(), p.Function(), req.Batch)
		if err != nil && !(errors.Is(err, deadletters.ErrNotFound) && req.Function == "") {
			return err
		}
		results = append(results, done...)
	}
	return writeJSON(w, http.StatusOK, map[string]any{"results": results})
}

// eachFunction returns one poller per processor function: a function that
// reads several streams has one poller per stream but one dead-letter
// queue, as in AWS.
func (s *Stack) eachFunction() []*poller.Poller {
	var out []*poller.Poller
	seen := map[string]bool{}
	for _, p := range s.pollers {
		if !seen[p.Function()] {
			seen[p.Function()] = true
			out = append(out, p)
		}
	}
	return out
}

// serveOpenAPI serves the API contract from shared/openapi, naming this
// stack's URL as the local server.
func (s *Stack) serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		gateway.Problem(w, errs.New(errs.NotFound, "/openapi.json answers GET"))
		return
	}
	// Document reports an invalid contract as an error; JSON would panic.
	if _, err := openapi.Document(); err != nil {
		s.log.Error("openapi document unavailable", "error", err.Error())
		gateway.Problem(w, errs.Wrap(errs.Internal, err, "the OpenAPI document is invalid"))
		return
	}
	doc, err := servedAt(openapi.JSON(), s.url)
	if err != nil {
		s.log.Error("openapi document unavailable", "error", err.Error())
		gateway.Problem(w, errs.Wrap(errs.Internal, err, "the OpenAPI document is invalid"))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(doc)
}

// servedAt is the contract doc with its local server (http://localhost
// on some port: 3000, make dev's default) at url, where this stack
// serves; a client generated from what the stack serves calls it, whatever
// -port said. The deployment's server stays as it is.
func servedAt(doc []byte, url string) ([]byte, error) {
	var contract map[string]any
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber() // numbers stay as written
	if err := dec.Decode(&contract); err != nil {
		return nil, fmt.Errorf("openapi: %w", err)
	}
	servers, _ := contract["servers"].([]any)
	for _, server := range servers {
		if server, ok := server.(map[string]any); ok {
			if u, _ := server["url"].(string); strings.HasPrefix(u, "http://localhost:") {
				server["url"] = url
				return json.Marshal(contract)
			}
		}
	}
	return nil, errors.New("openapi: the document names no local server (http://localhost:<port>)")
}

// invoker runs a processor's handler in process, where Lambda's Invoke
// runs it in AWS.
func (s *Stack) invoker() deadletters.Invoker { return localInvoker{s} }

type localInvoker struct{ s *Stack }

func (l localInvoker) Invoke(ctx context.Context, function string, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
	p, err := l.s.poller(function)
	if err != nil {
		return events.DynamoDBEventResponse{}, err
	}
	return p.Invoke(ctx, ev.Records)
}
