package client_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/rallyhq/rally/shared/client"
)

// server answers each request with the next of answers (the last one
// again when they run out) and records what it received.
type server struct {
	*httptest.Server
	mu       sync.Mutex
	received []*http.Request
	bodies   []string
}

type reply struct {
	status int
	header map[string]string
	body   string
	// hangUp closes the connection without an answer.
	hangUp bool
}

func serve(t *testing.T, answers ...reply) *server {
	t.Helper()
	s := &server{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		n := len(s.received)
		s.received = append(s.received, r)
		s.bodies = append(s.bodies, string(body))
		s.mu.Unlock()
		a := answers[min(n, len(answers)-1)]
		if a.hangUp {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		for k, v := range a.header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(a.status)
		io.WriteString(w, a.body)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *server) requests() []*http.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*http.Request(nil), s.received...)
}

// sleeps records the waits the client asked for, without waiting.
type sleeps struct {
	mu    sync.Mutex
	waits []time.Duration
}

func (s *sleeps) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waits = append(s.waits, d)
	return ctx.Err()
}

func (s *sleeps) taken() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.waits...)
}

func newClient(t *testing.T, endpoint string, z *sleeps) *client.Client {
	t.Helper()
	c, err := client.New(context.Background(), client.Options{
		Endpoint: endpoint, Region: "eu-west-1",
		Credentials: credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "secret", ""),
		Sleep:       z.sleep,
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

const (
	scoreJSON   = `{"player_id":"p1","score":7,"previous_score":null,"applied":true,"period":"all","rank":1}`
	receiptJSON = `{"event_id":"e1","points_awarded":10,"total_points":10,"current_streak":1,"longest_streak":1,"streak_extended":true,"activity_date":"2026-11-24"}`
	problem400  = `{"type":"urn:rally:problem:invalid-request","title":"Invalid request","status":400,"detail":"the request is invalid","errors":[{"field":"match_id","message":"is required"}]}`
	problem429  = `{"type":"urn:rally:problem:rate-limited","title":"Too many requests","status":429,"detail":"over budget"}`
	problemType = "application/problem+json"
	jsonType    = "application/json"
	submission  = "POST /v1/leaderboards/wins/scores"
)

func submit(c *client.Client, ctx context.Context) (*client.ScoreResult, error) {
	return c.SubmitScore(ctx, "wins", client.ScoreSubmission{PlayerID: "p1", MatchID: "m1", Score: 7})
}

// Over budget, Rally says when to come back: the client waits exactly
// that long (seen through the sleep hook, not the wall clock) and the
// second attempt's answer is the call's.
func TestA429IsRetriedAfterItsRetryAfter(t *testing.T) {
	s := serve(t,
		reply{status: 429, header: map[string]string{"Content-Type": problemType, "Retry-After": "1"}, body: problem429},
		reply{status: 200, header: map[string]string{"Content-Type": jsonType}, body: scoreJSON})
	var z sleeps
	res, err := submit(newClient(t, s.URL, &z), context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !res.Applied || res.Score != 7 || res.Rank == nil || *res.Rank != 1 {
		t.Fatalf("result %+v, want the 200's", res)
	}
	if got := z.taken(); len(got) != 1 || got[0] != time.Second {
		t.Fatalf("waited %v, want [1s] as Retry-After said", got)
	}
	if n := len(s.requests()); n != 2 {
		t.Fatalf("%d requests, want 2", n)
	}
}

// Each status worth retrying is retried with a growing, jittered backoff
// when no Retry-After names the wait; the call gives up after MaxAttempts
// with the last answer as an *Error.
func TestRetriesBackOffAndStopAtMaxAttempts(t *testing.T) {
	for _, status := range []int{500, 502, 503, 504} {
		s := serve(t, reply{status: status, header: map[string]string{"Content-Type": jsonType}, body: `{"message":"Internal Server Error"}`})
		var z sleeps
		_, err := submit(newClient(t, s.URL, &z), context.Background())
		var e *client.Error
		if !errors.As(err, &e) || e.Status != status {
			t.Fatalf("%d: error %v, want an *Error with its status", status, err)
		}
		if n := len(s.requests()); n != client.DefaultMaxAttempts {
			t.Fatalf("%d: %d requests, want %d", status, n, client.DefaultMaxAttempts)
		}
		waits := z.taken()
		if len(waits) != client.DefaultMaxAttempts-1 {
			t.Fatalf("%d: waits %v", status, waits)
		}
		for i, w := range waits {
			ceiling := client.BaseBackoff << i
			if w < ceiling/2 || w > ceiling {
				t.Fatalf("%d: wait %d was %v, want within [%v, %v]", status, i+1, w, ceiling/2, ceiling)
			}
		}
	}
}

// A connection lost before an answer is retried; a submission is safe to
// repeat (its match id).
func TestALostConnectionIsRetried(t *testing.T) {
	s := serve(t, reply{hangUp: true}, reply{status: 200, header: map[string]string{"Content-Type": jsonType}, body: scoreJSON})
	var z sleeps
	if _, err := submit(newClient(t, s.URL, &z), context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(s.requests()); n != 2 {
		t.Fatalf("%d requests, want 2", n)
	}
}

// Bad input is the caller's to fix: one request, and the problem's field
// errors come back in an *Error.
func TestA400IsNotRetriedAndNamesTheFields(t *testing.T) {
	s := serve(t, reply{status: 400, header: map[string]string{"Content-Type": problemType}, body: problem400})
	var z sleeps
	_, err := submit(newClient(t, s.URL, &z), context.Background())
	var e *client.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v is not an *Error", err)
	}
	if e.Status != 400 || e.Type != "urn:rally:problem:invalid-request" || e.Title != "Invalid request" || e.Detail != "the request is invalid" {
		t.Fatalf("problem %+v", e)
	}
	if msg, ok := e.Field("match_id"); !ok || msg != "is required" {
		t.Fatalf("field errors %+v, want match_id", e.Errors)
	}
	if !strings.Contains(err.Error(), "match_id: is required") || !strings.Contains(err.Error(), submission) {
		t.Fatalf("message %q names neither the request nor the field", err)
	}
	if n := len(s.requests()); n != 1 {
		t.Fatalf("%d requests, want 1", n)
	}
	if len(z.taken()) != 0 {
		t.Fatal("waited before giving up on a 400")
	}
}

// Every other 4xx is final too; an answer that is no problem document
// (API Gateway's own) still gives its status.
func TestOther4xxAreFinal(t *testing.T) {
	for _, status := range []int{401, 403, 404, 409, 413, 422} {
		s := serve(t, reply{status: status, header: map[string]string{"Content-Type": jsonType}, body: `{"message":"Forbidden"}`})
		var z sleeps
		_, err := submit(newClient(t, s.URL, &z), context.Background())
		var e *client.Error
		if !errors.As(err, &e) || e.Status != status || e.Detail != "Forbidden" || e.Title != http.StatusText(status) {
			t.Fatalf("%d: %+v", status, err)
		}
		if n := len(s.requests()); n != 1 {
			t.Fatalf("%d: %d requests, want 1", status, n)
		}
	}
}

// One call's Idempotency-Key is the same on each of its retries, so
// Rally records the activity once; the next call has a key of its own; a
// caller's key is sent as given.
func TestEveryRetryOfACallSendsItsIdempotencyKey(t *testing.T) {
	s := serve(t,
		reply{status: 503, header: map[string]string{"Content-Type": problemType}, body: `{"type":"x","title":"Service unavailable","status":503,"detail":"down"}`},
		reply{hangUp: true},
		reply{status: 200, header: map[string]string{"Content-Type": jsonType, "Idempotent-Replayed": "true"}, body: receiptJSON})
	var z sleeps
	c := newClient(t, s.URL, &z)
	report := client.ActivityReport{UserID: "u1", EventType: client.MatchWon, Source: client.SourceConsole}
	rec, err := c.ReportActivity(context.Background(), report)
	if err != nil {
		t.Fatal(err)
	}
	if !rec.Replayed || rec.PointsAwarded != 10 {
		t.Fatalf("receipt %+v", rec)
	}
	reqs := s.requests()
	if len(reqs) != 3 {
		t.Fatalf("%d requests, want 3", len(reqs))
	}
	key := reqs[0].Header.Get("Idempotency-Key")
	if len(key) < 16 {
		t.Fatalf("key %q", key)
	}
	for i, r := range reqs {
		if got := r.Header.Get("Idempotency-Key"); got != key {
			t.Fatalf("attempt %d sent key %q, the first %q", i+1, got, key)
		}
	}
	if _, err := c.ReportActivity(context.Background(), report); err != nil {
		t.Fatal(err)
	}
	if next := s.requests()[3].Header.Get("Idempotency-Key"); next == key || next == "" {
		t.Fatalf("the next call sent key %q, the first call's was %q", next, key)
	}
	if _, err := c.ReportActivity(context.Background(), report, client.WithIdempotencyKey("match-42:u1")); err != nil {
		t.Fatal(err)
	}
	if got := s.requests()[4].Header.Get("Idempotency-Key"); got != "match-42:u1" {
		t.Fatalf("sent key %q, want the caller's", got)
	}
}

// A key on a route that honours none would be silently ignored: refused
// before anything is sent.
func TestAnIdempotencyKeyOnARouteWithoutOneIsRefused(t *testing.T) {
	s := serve(t, reply{status: 200, header: map[string]string{"Content-Type": jsonType}, body: scoreJSON})
	var z sleeps
	_, err := newClient(t, s.URL, &z).SubmitScore(context.Background(), "wins",
		client.ScoreSubmission{PlayerID: "p1", MatchID: "m1", Score: 7}, client.WithIdempotencyKey("k"))
	if err == nil || !strings.Contains(err.Error(), "Idempotency-Key") {
		t.Fatalf("error %v", err)
	}
	if len(s.requests()) != 0 {
		t.Fatal("sent a request")
	}
}

// A wait the deadline would cut short is not taken: the call answers
// with Rally's 429 at once.
func TestADeadlineBeforeRetryAfterEndsTheCall(t *testing.T) {
	s := serve(t, reply{status: 429, header: map[string]string{"Content-Type": problemType, "Retry-After": "30"}, body: problem429})
	var z sleeps
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := submit(newClient(t, s.URL, &z), ctx)
	var e *client.Error
	if !errors.As(err, &e) || e.Status != 429 || e.RetryAfter != 30*time.Second {
		t.Fatalf("error %v, want the 429 with its Retry-After", err)
	}
	if len(s.requests()) != 1 || len(z.taken()) != 0 {
		t.Fatalf("%d requests, waits %v", len(s.requests()), z.taken())
	}
}

// A job started twice would run twice: after a 500 or a lost connection
// (it may have started) the call is not repeated, after a 429 or a 503 (it
// did not) it is.
func TestStartingAJobIsRetriedOnlyWhenNoneStarted(t *testing.T) {
	started := reply{status: 202, header: map[string]string{"Content-Type": jsonType}, body: `{"job_id":"j1","state":"RUNNING"}`}
	for _, tc := range []struct {
		first    reply
		requests int
	}{
		{reply{status: 500, header: map[string]string{"Content-Type": problemType}, body: `{"type":"x","title":"Internal error","status":500,"detail":"x"}`}, 1},
		{reply{hangUp: true}, 1},
		{reply{status: 429, header: map[string]string{"Content-Type": problemType, "Retry-After": "2"}, body: problem429}, 2},
		{reply{status: 503, header: map[string]string{"Content-Type": problemType}, body: `{"type":"x","title":"Service unavailable","status":503,"detail":"x"}`}, 2},
	} {
		s := serve(t, tc.first, started)
		var z sleeps
		job, err := newClient(t, s.URL, &z).StartJob(context.Background(), client.JobRequest{Kind: client.JobRebuild, Target: client.TargetAll})
		if n := len(s.requests()); n != tc.requests {
			t.Fatalf("after %d: %d requests, want %d", tc.first.status, n, tc.requests)
		}
		if tc.requests == 2 && (err != nil || job.JobID != "j1") {
			t.Fatalf("after %d: %+v %v", tc.first.status, job, err)
		}
		if tc.requests == 1 && err == nil {
			t.Fatalf("after %d: no error", tc.first.status)
		}
	}
}

// Requests are SigV4-signed for execute-api in the client's region, over
// the body's hash, with the session token of temporary credentials.
func TestRequestsAreSignedForExecuteAPI(t *testing.T) {
	s := serve(t, reply{status: 200, header: map[string]string{"Content-Type": jsonType}, body: scoreJSON})
	c, err := client.New(context.Background(), client.Options{
		Endpoint: s.URL + "/prod", Region: "eu-west-1",
		Credentials: credentials.NewStaticCredentialsProvider("ASIAEXAMPLE", "secret", "session-token"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := submit(c, context.Background()); err != nil {
		t.Fatal(err)
	}
	r := s.requests()[0]
	auth := r.Header.Get("Authorization")
	if !strings.HasPrefix(auth, "AWS4-HMAC-SHA256 Credential=ASIAEXAMPLE/") || !strings.Contains(auth, "/eu-west-1/execute-api/aws4_request") {
		t.Fatalf("Authorization %q", auth)
	}
	if r.Header.Get("X-Amz-Security-Token") != "session-token" || r.Header.Get("X-Amz-Date") == "" {
		t.Fatalf("headers %v", r.Header)
	}
	if r.URL.Path != "/prod/v1/leaderboards/wins/scores" {
		t.Fatalf("path %q, want the stage's prefix kept", r.URL.Path)
	}
	if got := s.bodies[0]; got != `{"player_id":"p1","match_id":"m1","score":7}` {
		t.Fatalf("body %s", got)
	}
}

func TestNewRefusesWhatCannotWork(t *testing.T) {
	creds := credentials.NewStaticCredentialsProvider("a", "b", "")
	for _, opts := range []client.Options{
		{Endpoint: "", Region: "eu-west-1", Credentials: creds},
		{Endpoint: "ftp://example.com", Region: "eu-west-1", Credentials: creds},
		{Endpoint: "https://example.com", Region: "eu-west-1", Credentials: creds, MaxAttempts: -1},
	} {
		if _, err := client.New(context.Background(), opts); err == nil {
			t.Fatalf("New(%+v) worked", opts)
		}
	}
}

// Retry-After may name a date instead of seconds; the wait is until then.
func TestRetryAfterMayBeADate(t *testing.T) {
	at := time.Now().Add(5 * time.Second).UTC().Format(http.TimeFormat)
	s := serve(t,
		reply{status: 503, header: map[string]string{"Content-Type": problemType, "Retry-After": at}, body: `{"type":"x","title":"Service unavailable","status":503,"detail":"x"}`},
		reply{status: 200, header: map[string]string{"Content-Type": jsonType}, body: scoreJSON})
	var z sleeps
	if _, err := submit(newClient(t, s.URL, &z), context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := z.taken(); len(got) != 1 || got[0] < 3*time.Second || got[0] > 5*time.Second {
		t.Fatalf("waited %v, want about 5s, until the date", got)
	}
}

// A caller that gives up while the client waits to retry gets both why
// it stopped and what Rally last said.
func TestACancelledWaitEndsTheCall(t *testing.T) {
	s := serve(t, reply{status: 429, header: map[string]string{"Content-Type": problemType, "Retry-After": "1"}, body: problem429})
	ctx, cancel := context.WithCancel(context.Background())
	c, err := client.New(ctx, client.Options{
		Endpoint: s.URL, Region: "eu-west-1",
		Credentials: credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "secret", ""),
		Sleep: func(ctx context.Context, d time.Duration) error {
			cancel()
			<-ctx.Done()
			return ctx.Err()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = submit(c, ctx)
	var e *client.Error
	if !errors.Is(err, context.Canceled) || !errors.As(err, &e) || e.Status != 429 {
		t.Fatalf("error %v, want the cancellation and the 429", err)
	}
	if n := len(s.requests()); n != 1 {
		t.Fatalf("%d requests, want 1", n)
	}
}
