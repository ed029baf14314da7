// Package client is the Go client of Rally's service routes, for a
// studio's game servers and operating tools: define leaderboards, submit
// scores, set profiles, friends and game metadata, report matches played
// and won, erase users, and the operations routes (health, jobs, parked
// batches).
//
// Every request is signed with SigV4 (service execute-api) from an AWS
// credential provider, by default the default credential chain. Answers
// Rally may give again on a retry (429, 500, 502, 503, 504, and a lost
// connection) are retried with exponential backoff and jitter, waiting as
// long as Retry-After asks, within MaxAttempts and the context's deadline;
// any other 4xx comes back at once as an *Error carrying the problem
// document. Retrying never acts twice: a score is idempotent by its match
// id, a reported activity by its Idempotency-Key (one per call, the same on
// each of its retries), and the PUT and DELETE routes by their nature.
package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mathrand "math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/config"

	"github.com/rallyhq/rally/shared/routes"
)

// Options configure a Client.
type Options struct {
	// Endpoint is the API's base URL, e.g.
	// https://abc123.execute-api.eu-west-1.amazonaws.com (the stack's
	// ApiUrl output). Required.
	Endpoint string
	// Region is the API's AWS region, which signatures are scoped to;
	// empty takes the default configuration's (AWS_REGION, the profile).
	Region string
	// Credentials sign every request; nil takes the default credential
	// chain (environment, shared files, the instance's or task's role).
	Credentials aws.CredentialsProvider
	// HTTPClient makes the requests; nil is a client with a 35 s timeout
	// (API Gateway gives up on an integration after 30 s).
	HTTPClient *http.Client
	// MaxAttempts bounds the attempts of one call, the first included;
	// 0 means DefaultMaxAttempts, 1 never retries.
	MaxAttempts int
	// Sleep waits between attempts; nil waits on a timer, or until ctx is
	// done. Tests replace it to see the waits without taking them.
	Sleep func(ctx context.Context, d time.Duration) error
}

// Retry bounds.
const (
	// DefaultMaxAttempts is the attempts of one call unless
	// Options.MaxAttempts says otherwise.
	DefaultMaxAttempts = 4
	// BaseBackoff is the first wait before a retry the answer gave no
	// Retry-After for; each further retry doubles it, up to MaxBackoff.
	// The wait is drawn between half of it and all of it (jitter), so
	// servers that failed together do not retry together.
	BaseBackoff = 200 * time.Millisecond
	MaxBackoff  = 10 * time.Second
)

// Client calls Rally's service routes. It is safe for concurrent use.
type Client struct {
	base        *url.URL
	region      string
	creds       aws.CredentialsProvider
	http        *http.Client
	maxAttempts int
	sleep       func(context.Context, time.Duration) error
	signer      *v4.Signer
}

// New returns a client of the API at opts.Endpoint.
func New(ctx context.Context, opts Options) (*Client, error) {
	base, err := url.Parse(strings.TrimSuffix(opts.Endpoint, "/"))
	if err != nil || (base.Scheme != "https" && base.Scheme != "http") || base.Host == "" {
		return nil, fmt.Errorf("rally client: Endpoint %q is not an http(s) URL", opts.Endpoint)
	}
	if opts.MaxAttempts < 0 {
		return nil, fmt.Errorf("rally client: MaxAttempts %d is negative", opts.MaxAttempts)
	}
	if opts.Credentials == nil || opts.Region == "" {
		cfg, err := config.LoadDefaultConfig(ctx)
		if err != nil {
			return nil, fmt.Errorf("rally client: load the default AWS configuration: %w", err)
		}
		if opts.Credentials == nil {
			opts.Credentials = cfg.Credentials
		}
		if opts.Region == "" {
			opts.Region = cfg.Region
		}
	}
	if opts.Region == "" {
		return nil, errors.New("rally client: no Region, and the default AWS configuration names none (AWS_REGION)")
	}
	c := &Client{
		base: base, region: opts.Region, creds: opts.Credentials, http: opts.HTTPClient,
		maxAttempts: opts.MaxAttempts, sleep: opts.Sleep, signer: v4.NewSigner(),
	}
	if c.http == nil {
		c.http = &http.Client{Timeout: 35 * time.Second}
	}
	if c.maxAttempts == 0 {
		c.maxAttempts = DefaultMaxAttempts
	}
	if c.sleep == nil {
		c.sleep = sleep
	}
	return c, nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// CallOption adjusts one call.
type CallOption func(*callOptions)

type callOptions struct {
	key         string
	maxAttempts int
}

// WithIdempotencyKey sends key as the call's Idempotency-Key instead of a
// random one: a call repeated with the same key (a game server's own retry
// after a crash, say) answers the first call's result without acting
// again. Only routes that honour an Idempotency-Key take it (ReportActivity);
// on others the call fails before sending anything.
func WithIdempotencyKey(key string) CallOption {
	return func(o *callOptions) { o.key = key }
}

// WithMaxAttempts bounds this call's attempts instead of
// Options.MaxAttempts (1 never retries).
func WithMaxAttempts(n int) CallOption {
	return func(o *callOptions) { o.maxAttempts = n }
}

// request is one call of a route.
type request struct {
	route routes.Route
	// args fill the route's path parameters, in order.
	args  []string
	query url.Values
	body  any
	// keyed routes honour an Idempotency-Key: each call sends one, the
	// same on every retry.
	keyed bool
	// unsafe routes act again when repeated, so they are retried only
	// after an answer that says nothing was done (429, 503).
	unsafe bool
}

// answer is a success: its status and headers beside the decoded body.
type answer struct {
	status int
	header http.Header
}

// retryable are the statuses worth another attempt: over budget, and the
// failures a later attempt may not meet.
func retryable(status int, unsafe bool) bool {
	switch status {
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
		return true
	case http.StatusInternalServerError, http.StatusBadGateway, http.StatusGatewayTimeout:
		return !unsafe
	}
	return false
}

// do makes the call, retrying what may be retried, and decodes a success
// into out.
func (c *Client) do(ctx context.Context, r request, out any, opts []CallOption) (answer, error) {
	o := callOptions{maxAttempts: c.maxAttempts}
	for _, opt := range opts {
		opt(&o)
	}
	path, err := fill(r.route.Path, r.args)
	if err != nil {
		return answer{}, err
	}
	label := r.route.Method + " " + path
	if o.key != "" && !r.keyed {
		return answer{}, fmt.Errorf("rally: %s takes no Idempotency-Key", r.route.Key())
	}
	if r.keyed && o.key == "" {
		o.key = newKey()
	}
	var body []byte
	if r.body != nil {
		if body, err = json.Marshal(r.body); err != nil {
			return answer{}, fmt.Errorf("rally: %s: encode the body: %w", label, err)
		}
	}
	target := c.base.JoinPath(path)
	target.RawQuery = r.query.Encode()
	for attempt := 1; ; attempt++ {
		a, wait, err := c.attempt(ctx, r, target.String(), path, body, o.key, out)
		if wait < 0 || attempt >= max(1, o.maxAttempts) {
			return a, err
		}
		if wait == 0 {
			wait = backoff(attempt)
		}
		// A wait the deadline cuts short would only end in the deadline's
		// error: answer with what the server said instead.
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < wait {
			return a, err
		}
		if serr := c.sleep(ctx, wait); serr != nil {
			return a, fmt.Errorf("rally: %s: gave up waiting to retry (%w) after: %w", label, serr, err)
		}
	}
}

// attempt makes one request. wait is negative when the result is final, 0
// to retry after the backoff, and the answer's Retry-After otherwise.
func (c *Client) attempt(ctx context.Context, r request, target, path string, body []byte, key string, out any) (answer, time.Duration, error) {
	label := r.route.Method + " " + path
	req, err := http.NewRequestWithContext(ctx, r.route.Method, target, bytes.NewReader(body))
	if err != nil {
		return answer{}, -1, fmt.Errorf("rally: %s: %w", label, err)
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if err := c.sign(ctx, req, body); err != nil {
		return answer{}, -1, fmt.Errorf("rally: %s: %w", label, err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return answer{}, -1, fmt.Errorf("rally: %s: %w", label, err)
		}
		// The request may or may not have reached Rally.
		wait := time.Duration(0)
		if r.unsafe {
			wait = -1
		}
		return answer{}, wait, fmt.Errorf("rally: %s: %w", label, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		wait := time.Duration(0)
		if r.unsafe || ctx.Err() != nil {
			wait = -1
		}
		return answer{}, wait, fmt.Errorf("rally: %s: read the answer: %w", label, err)
	}
	a := answer{status: resp.StatusCode, header: resp.Header}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		if out != nil {
			if err := json.Unmarshal(raw, out); err != nil {
				return a, -1, fmt.Errorf("rally: %s: decode the %d answer: %w", label, resp.StatusCode, err)
			}
		}
		return a, -1, nil
	}
	after := retryAfter(resp.Header.Get("Retry-After"), time.Now())
	e := errorOf(r.route.Method, path, resp, raw, after)
	if !retryable(resp.StatusCode, r.unsafe) {
		return a, -1, e
	}
	return a, after, e
}

// maxAnswer bounds the body read from one answer.
const maxAnswer = 8 << 20

// sign adds a SigV4 signature for execute-api over the body's hash.
func (c *Client) sign(ctx context.Context, req *http.Request, body []byte) error {
	creds, err := c.creds.Retrieve(ctx)
	if err != nil {
		return fmt.Errorf("AWS credentials: %w", err)
	}
	sum := sha256.Sum256(body)
	return c.signer.SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), "execute-api", c.region, time.Now())
}

// fill puts args into the path template's parameters, in order.
func fill(template string, args []string) (string, error) {
	segs := strings.Split(template, "/")
	n := 0
	for i, s := range segs {
		if !strings.HasPrefix(s, "{") {
			continue
		}
		if n >= len(args) || args[n] == "" {
			return "", fmt.Errorf("rally: %s needs %s", template, strings.Trim(s, "{}"))
		}
		segs[i] = url.PathEscape(args[n])
		n++
	}
	return strings.Join(segs, "/"), nil
}

// retryAfter reads a Retry-After header: seconds, or an HTTP date.
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if secs, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
		return time.Duration(max(0, secs)) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// backoff is the wait before attempt+1 when the answer named none:
// exponential, with jitter over its upper half.
func backoff(attempt int) time.Duration {
	d := MaxBackoff
	if attempt < 16 {
		d = min(MaxBackoff, BaseBackoff<<(attempt-1))
	}
	return d/2 + mathrand.N(d/2+1)
}

// newKey returns a random Idempotency-Key (32 hex digits).
func newKey() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
