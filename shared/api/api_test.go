package api

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/errs"
	"github.com/rallyhq/rally/shared/obs"
	"github.com/rallyhq/rally/shared/secrets"
)

func decodeProblem(t *testing.T, resp events.APIGatewayV2HTTPResponse) Problem {
	t.Helper()
	if ct := resp.Headers["Content-Type"]; ct != ProblemContentType {
		t.Fatalf("content type %q, want %q", ct, ProblemContentType)
	}
	var p Problem
	if err := json.Unmarshal([]byte(resp.Body), &p); err != nil {
		t.Fatalf("problem body %q: %v", resp.Body, err)
	}
	if p.Status != resp.StatusCode {
		t.Fatalf("problem status %d, response status %d", p.Status, resp.StatusCode)
	}
	return p
}

func TestDecodeRefusesWhatIsNotExactlyTheExpectedObject(t *testing.T) {
	type in struct {
		Title string `json:"title"`
		N     int    `json:"n"`
	}
	for name, tc := range map[string]struct {
		body, field string
	}{
		"empty":         {"", "body"},
		"not json":      {"{title:", "body"},
		"truncated":     {`{"title":"a"`, "body"},
		"unknown field": {`{"title":"a","x":1}`, "x"},
		"wrong type":    {`{"title":"a","n":"3"}`, "n"},
		"two objects":   {`{"title":"a"}{"title":"b"}`, "body"},
		"array":         {`[1]`, "body"},
	} {
		t.Run(name, func(t *testing.T) {
			r := &Request{Event: events.APIGatewayV2HTTPRequest{Body: tc.body}}
			var v in
			err := r.Decode(&v)
			var e *errs.Error
			if !errors.As(err, &e) || e.Kind != errs.Invalid {
				t.Fatalf("got %v, want an Invalid error", err)
			}
			if len(e.Fields) != 1 || e.Fields[0].Field != tc.field {
				t.Fatalf("fields %+v, want one on %q", e.Fields, tc.field)
			}
		})
	}
}

// A key given twice is refused, naming it, wherever it is: the decoder
// would keep one of the two values, and which one the caller meant is not
// for Rally to guess. Keys the decoder matches to one field (any case)
// count as the same key.
func TestDecodeRefusesARepeatedKey(t *testing.T) {
	type in struct {
		Title string `json:"title"`
		Scope struct {
			Game string `json:"game"`
			Mode string `json:"mode"`
		} `json:"scope"`
		Items []struct {
			ID string `json:"id"`
		} `json:"items"`
		Tags []string `json:"tags"`
		Kind string   `json:"kind"`
	}
	for name, tc := range map[string]struct {
		body, field string
	}{
		"at the top":              {`{"title":"a","title":"b"}`, "title"},
		"the same value twice":    {`{"title":"a","title":"a"}`, "title"},
		"in another case":         {`{"title":"a","TITLE":"b"}`, "TITLE"},
		"with a Kelvin sign":      {`{"kind":"a","\u212aind":"b"}`, "\u212aind"},
		"folded to the same key":  {`{"tags":[],"TAGS":[]}`, "TAGS"},
		"in a nested object":      {`{"scope":{"game":"g1","mode":"m","game":"g2"}}`, "scope.game"},
		"in an object of a list":  {`{"items":[{"id":"1"},{"id":"2","id":"3"}]}`, "items.id"},
		"after a nested object":   {`{"scope":{"game":"g"},"title":"a","scope":{}}`, "scope"},
		"after a list of objects": {`{"items":[{"id":"1"}],"items":[]}`, "items"},
	} {
		t.Run(name, func(t *testing.T) {
			var v in
			err := (&Request{Event: events.APIGatewayV2HTTPRequest{Body: tc.body}}).Decode(&v)
			var e *errs.Error
			if !errors.As(err, &e) || e.Kind != errs.Invalid {
				t.Fatalf("got %v, want an Invalid error", err)
			}
			if len(e.Fields) != 1 || e.Fields[0].Field != tc.field || !strings.Contains(e.Fields[0].Message, "more than once") {
				t.Fatalf("fields %+v, want one on %q saying it is given more than once", e.Fields, tc.field)
			}
		})
	}
	// The same key in different objects, and a value that spells a key,
	// are no repetition.
	var v in
	body := `{"title":"title","scope":{"game":"g","mode":"title"},"items":[{"id":"1"},{"id":"1"}],"tags":["a","a"]}`
	if err := (&Request{Event: events.APIGatewayV2HTTPRequest{Body: body}}).Decode(&v); err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	if v.Title != "title" || v.Scope.Mode != "title" || len(v.Items) != 2 || len(v.Tags) != 2 {
		t.Fatalf("decoded %+v", v)
	}
}

func TestBodyOverLimitIsTooLarge(t *testing.T) {
	big := `{"title":"` + strings.Repeat("a", MaxBodyBytes) + `"}`
	for _, ev := range []events.APIGatewayV2HTTPRequest{
		{Body: big},
		{Body: base64.StdEncoding.EncodeToString([]byte(big)), IsBase64Encoded: true},
	} {
		r := &Request{Event: ev}
		var v map[string]any
		if err := r.Decode(&v); !errs.Is(err, errs.TooLarge) {
			t.Fatalf("got %v, want TooLarge", err)
		}
	}
}

func TestValidID(t *testing.T) {
	for id, want := range map[string]bool{
		"g1": true, "A.b_c:d-9": true, strings.Repeat("x", 128): true,
		"": false, strings.Repeat("x", 129): false, "a b": false, "a/b": false, "é": false, "a,b": false,
	} {
		if got := ValidID(id); got != want {
			t.Errorf("ValidID(%q) = %v, want %v", id, got, want)
		}
	}
}

func TestServeMapsEveryErrorKindToItsStatus(t *testing.T) {
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	for kind, status := range map[errs.Kind]int{
		errs.Invalid: 400, errs.Unauthenticated: 401, errs.Forbidden: 403, errs.NotFound: 404,
		errs.Conflict: 409, errs.TooLarge: 413, errs.KeyReused: 422, errs.RateLimited: 429,
		errs.Unavailable: 503, errs.Internal: 500,
	} {
		var emitted bytes.Buffer
		h := Serve(log, obs.NewMetrics(&emitted, "fn"), nil, func(context.Context, *Request) (Response, error) {
			return Response{}, &errs.Error{Kind: kind, Detail: "d", Err: errors.New("secret cause"), RetryAfter: 1500 * time.Millisecond}
		})
		resp, err := h(context.Background(), events.APIGatewayV2HTTPRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != status {
			t.Errorf("kind %d: status %d, want %d", kind, resp.StatusCode, status)
		}
		// A handled 5xx is no Lambda error: the metric is what sees it.
		if counted := strings.Contains(emitted.String(), `"`+MetricServerErrors+`":1`); counted != (status >= 500) {
			t.Errorf("kind %d (%d): server error counted %v; metrics %q", kind, status, counted, emitted.String())
		}
		p := decodeProblem(t, resp)
		if strings.Contains(resp.Body, "secret cause") {
			t.Errorf("kind %d: the cause leaked to the caller: %s", kind, resp.Body)
		}
		if kind == errs.Internal && p.Detail == "d" {
			t.Errorf("internal error detail leaked")
		}
		if kind == errs.RateLimited && resp.Headers["Retry-After"] != "2" {
			t.Errorf("Retry-After = %q, want 2 (rounded up)", resp.Headers["Retry-After"])
		}
	}
}

// A read served without Redis says so in its answer; that answer is what
// is counted, so every read route is, whoever wrote it.
func TestServeCountsTheReadsAnsweredDegraded(t *testing.T) {
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	type count struct {
		N        int64 `json:"count"`
		Degraded bool  `json:"degraded,omitempty"`
	}
	for name, tc := range map[string]struct {
		resp    Response
		err     error
		counted bool
	}{
		"degraded read":         {resp: OK(count{N: 3, Degraded: true}), counted: true},
		"read served by Redis":  {resp: OK(count{N: 3})},
		"degraded only nested":  {resp: OK(map[string]any{"game": map[string]bool{"degraded": true}})},
		"a string that says it": {resp: OK(map[string]string{"title": `"degraded":true`})},
		"failed read":           {err: errs.New(errs.Unavailable, "down")},
		"write":                 {resp: Accepted(map[string]bool{"degraded": true})},
	} {
		t.Run(name, func(t *testing.T) {
			var emitted bytes.Buffer
			h := Serve(log, obs.NewMetrics(&emitted, "fn"), nil, func(context.Context, *Request) (Response, error) { return tc.resp, tc.err })
			if _, err := h(context.Background(), events.APIGatewayV2HTTPRequest{}); err != nil {
				t.Fatal(err)
			}
			if counted := strings.Contains(emitted.String(), `"`+MetricDegradedReads+`":1`); counted != tc.counted {
				t.Fatalf("degraded read counted %v, want %v; metrics %q", counted, tc.counted, emitted.String())
			}
		})
	}
}

func TestCallerComesFromTheAuthorizer(t *testing.T) {
	jwt := &Request{Event: events.APIGatewayV2HTTPRequest{RequestContext: events.APIGatewayV2HTTPRequestContext{
		Authorizer: &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
			JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: map[string]string{"sub": "alice"}},
		}}}}
	if p, err := jwt.Player(); err != nil || p != "alice" {
		t.Fatalf("player %q, %v", p, err)
	}
	iam := &Request{Event: events.APIGatewayV2HTTPRequest{RequestContext: events.APIGatewayV2HTTPRequestContext{
		Authorizer: &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
			IAM: &events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription{UserARN: "arn:aws:iam::1:user/svc"},
		}}}, ServiceRoles: ServiceRoles{"arn:aws:iam::1:user/svc"}}
	if c, err := iam.Caller(); err != nil || !c.IsService() {
		t.Fatalf("caller %+v, %v", c, err)
	}
	if _, err := iam.Player(); !errs.Is(err, errs.Forbidden) {
		t.Fatalf("a service acting as a player: %v, want Forbidden", err)
	}
	none := &Request{}
	if _, err := none.Player(); !errs.Is(err, errs.Unauthenticated) {
		t.Fatalf("no authorizer: %v, want Unauthenticated", err)
	}
}

// IAM authorization admits any principal of the account allowed to invoke
// the API; only those on the allow-list get past Rally. A role on it admits
// every session of it, wherever the role sits in IAM's paths.
func TestServiceCallersMustBeOnTheAllowList(t *testing.T) {
	allowed := ServiceRoles{
		"arn:aws:iam::111122223333:role/rally-prod-game-server",
		"arn:aws:iam::111122223333:role/ops/team/rally-operator",
		"arn:aws:iam::111122223333:user/ci",
	}
	for arn, want := range map[string]bool{
		"arn:aws:sts::111122223333:assumed-role/rally-prod-game-server/match-7":   true,
		"arn:aws:sts::111122223333:assumed-role/rally-operator/alice@example.com": true,
		"arn:aws:iam::111122223333:role/rally-prod-game-server":                   true,
		"arn:aws:iam::111122223333:user/ci":                                       true,
		"arn:aws:sts::111122223333:assumed-role/Admin/alice":                      false,
		"arn:aws:sts::444455556666:assumed-role/rally-prod-game-server/x":         false,
		"arn:aws-cn:sts::111122223333:assumed-role/rally-prod-game-server/x":      false,
		"arn:aws:sts::111122223333:assumed-role/rally-prod-game-server":           false,
		"arn:aws:iam::111122223333:user/rally-prod-game-server":                   false,
		"arn:aws:iam::111122223333:root":                                          false,
		"arn:aws:sts::111122223333:federated-user/rally-operator":                 false,
		"": false,
	} {
		r := &Request{ServiceRoles: allowed, Event: events.APIGatewayV2HTTPRequest{RequestContext: events.APIGatewayV2HTTPRequestContext{
			Authorizer: &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
				IAM: &events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription{UserARN: arn, AccessKey: "ASIAEXAMPLE", CallerID: "AROAEXAMPLE:x"},
			}}}}
		svc, err := r.Service()
		if got := err == nil; got != want {
			t.Errorf("%q: allowed %v, want %v (%v)", arn, got, want, err)
		}
		if !want && !errs.Is(err, errs.Forbidden) {
			t.Errorf("%q: refused with %v, want Forbidden", arn, err)
		}
		if want && svc != arn {
			t.Errorf("%q: service %q", arn, svc)
		}
	}
	nobody := &Request{Event: events.APIGatewayV2HTTPRequest{RequestContext: events.APIGatewayV2HTTPRequestContext{
		Authorizer: &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
			IAM: &events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription{UserARN: "arn:aws:iam::1:user/svc"},
		}}}}
	if _, err := nobody.Caller(); !errs.Is(err, errs.Forbidden) {
		t.Fatalf("with no allow-list: %v, want Forbidden", err)
	}
}

func TestCursorsAreTamperEvidentAndScoped(t *testing.T) {
	c := Cursors{Keys: secrets.Fixed([]byte("k"), nil)}
	ctx := context.Background()
	type pos struct{ A, B string }
	cur, err := c.Encode("list:alice", pos{"x", "y"})
	if err != nil {
		t.Fatal(err)
	}
	var got pos
	if err := c.Decode(ctx, "list:alice", cur, &got); err != nil || got != (pos{"x", "y"}) {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	body, sig, _ := strings.Cut(cur, ".")
	raw, _ := base64.RawURLEncoding.DecodeString(body)
	edited := append(raw[:headerLen:headerLen], []byte(`{"A":"z","B":"y"}`)...)
	forged := base64.RawURLEncoding.EncodeToString(edited) + "." + sig
	for name, bad := range map[string]string{
		"other scope": cur, "forged body": forged, "no signature": body, "garbage": "!!!", "empty sig": body + ".",
	} {
		scope := "list:alice"
		if name == "other scope" {
			scope = "list:bob"
		}
		if err := c.Decode(ctx, scope, bad, &got); !errs.Is(err, errs.Invalid) {
			t.Errorf("%s: %v, want Invalid", name, err)
		}
	}
}

// A rotation keeps the cursors already handed out valid: they verify under
// the previous key, while new ones are signed with the current key. A
// cursor signed under a key the keyring does not hold is refused.
func TestCursorsVerifyUnderTheCurrentAndThePreviousKey(t *testing.T) {
	ctx := context.Background()
	before := Cursors{Keys: secrets.Fixed([]byte("key-1"), nil)}
	after := Cursors{Keys: secrets.Fixed([]byte("key-2"), []byte("key-1"))}
	stranger := Cursors{Keys: secrets.Fixed([]byte("key-3"), nil)}
	old, err := before.Encode("list:alice", 7)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := after.Decode(ctx, "list:alice", old, &n); err != nil || n != 7 {
		t.Fatalf("a cursor signed before the rotation: %d, %v", n, err)
	}
	fresh, err := after.Encode("list:alice", 8)
	if err != nil {
		t.Fatal(err)
	}
	if err := (Cursors{Keys: secrets.Fixed([]byte("key-2"), nil)}).Decode(ctx, "list:alice", fresh, &n); err != nil || n != 8 {
		t.Fatalf("a cursor signed after the rotation does not verify under the current key: %v", err)
	}
	if err := before.Decode(ctx, "list:alice", fresh, &n); err == nil {
		t.Fatal("the new cursor was signed with the previous key")
	}
	unknown, err := stranger.Encode("list:alice", 9)
	if err != nil {
		t.Fatal(err)
	}
	if err := after.Decode(ctx, "list:alice", unknown, &n); !errs.Is(err, errs.Invalid) {
		t.Fatalf("a cursor signed under an unknown key: %v, want Invalid", err)
	}
}

// An instance that read the keys before a rotation still verifies cursors
// signed by one that read them after: it asks for the keys again (at most
// once a minute) when a cursor verifies under neither key it holds.
func TestAKeyringReloadsOnceWhenACursorVerifiesUnderNeitherKey(t *testing.T) {
	ctx := context.Background()
	loads := 0
	current, previous := []byte("key-1"), []byte(nil)
	clk := clock.NewSettable()
	ring, err := secrets.Load(ctx, func(context.Context) ([]byte, []byte, error) {
		loads++
		return current, previous, nil
	}, clk)
	if err != nil {
		t.Fatal(err)
	}
	stale := Cursors{Keys: ring}
	clk.Advance(2 * secrets.ReloadEvery)
	current, previous = []byte("key-2"), []byte("key-1")
	cur, _ := Cursors{Keys: secrets.Fixed(current, previous)}.Encode("s", 1)
	var n int
	if err := stale.Decode(ctx, "s", cur, &n); err != nil || n != 1 {
		t.Fatalf("a cursor signed after a rotation: %v", err)
	}
	forged, _ := Cursors{Keys: secrets.Fixed([]byte("nobody's"), nil)}.Encode("s", 2)
	for range 3 {
		if err := stale.Decode(ctx, "s", forged, &n); err == nil {
			t.Fatal("a forged cursor was accepted")
		}
	}
	if loads != 2 {
		t.Fatalf("the keys were loaded %d times, want once at start and once for the rotation", loads)
	}
}

func TestCursorsExpireAfterTheirTTL(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewSettable()
	c := Cursors{Keys: secrets.Fixed([]byte("k"), nil), Clock: clk, TTL: time.Hour}
	cur, err := c.Encode("s", 1)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	clk.Advance(59 * time.Minute)
	if err := c.Decode(ctx, "s", cur, &n); err != nil {
		t.Fatalf("a cursor within its TTL: %v", err)
	}
	clk.Advance(2 * time.Minute)
	err = c.Decode(ctx, "s", cur, &n)
	var e *errs.Error
	if !errors.As(err, &e) || e.Kind != errs.Invalid || e.Detail != "cursor expired" || len(e.Fields) != 1 || e.Fields[0].Field != "cursor" {
		t.Fatalf("an expired cursor: %#v", err)
	}
}

func TestNoBodyAcceptsOnlyNothingOrAnEmptyObject(t *testing.T) {
	for body, ok := range map[string]bool{"": true, "  ": true, "{}": true, `{"a":1}`: false, "x": false} {
		err := (&Request{Event: events.APIGatewayV2HTTPRequest{Body: body}}).NoBody()
		if (err == nil) != ok {
			t.Errorf("body %q: %v", body, err)
		}
	}
}

func TestIntQuery(t *testing.T) {
	r := &Request{Event: events.APIGatewayV2HTTPRequest{QueryStringParameters: map[string]string{"a": "5", "b": "0", "c": "x"}}}
	var f errs.Fields
	if got := r.IntQuery(&f, "a", 1, 1, 10); got != 5 {
		t.Errorf("a = %d", got)
	}
	if got := r.IntQuery(&f, "missing", 7, 1, 10); got != 7 {
		t.Errorf("default = %d", got)
	}
	r.IntQuery(&f, "b", 1, 1, 10)
	r.IntQuery(&f, "c", 1, 1, 10)
	if len(f) != 2 || f[0].Field != "b" || f[1].Field != "c" {
		t.Errorf("field errors %+v", f)
	}
}

func FuzzDecodeJSON(f *testing.F) {
	for _, s := range []string{`{"title":"a"}`, `{}`, `[]`, `{"n":1e99}`, `{"title":null}`, "\x00"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var v struct {
			Title string   `json:"title"`
			N     int      `json:"n"`
			IDs   []string `json:"ids"`
		}
		err := DecodeJSON(body, &v)
		if err != nil && !errs.Is(err, errs.Invalid) {
			t.Fatalf("decode error of kind %d: %v", errs.KindOf(err), err)
		}
	})
}

// Two keys of one object are refused when, and only when, the decoder
// would take them for one field (bytes.EqualFold), naming the second.
func FuzzDecodeJSONRefusesRepeatedKeys(f *testing.F) {
	for _, k := range [][2]string{{"title", "title"}, {"title", "Title"}, {"k", "\u212a"}, {"a", "b"}, {"ß", "SS"}, {"", ""}} {
		f.Add(k[0], k[1])
	}
	f.Fuzz(func(t *testing.T, first, second string) {
		quote := func(s string) string {
			b, _ := json.Marshal(s)
			return string(b)
		}
		// What the keys are once decoded (invalid UTF-8 becomes U+FFFD).
		unquote := func(s string) string {
			var out string
			_ = json.Unmarshal([]byte(quote(s)), &out)
			return out
		}
		a, b := unquote(first), unquote(second)
		var v map[string]any
		err := DecodeJSON([]byte(`{`+quote(first)+`:1,`+quote(second)+`:2}`), &v)
		same := bytes.EqualFold([]byte(a), []byte(b))
		var e *errs.Error
		switch {
		case same && (!errors.As(err, &e) || len(e.Fields) != 1 || e.Fields[0].Field != b):
			t.Fatalf("keys %q and %q: %v, want a refusal naming %q", a, b, err, b)
		case !same && (err != nil || len(v) != 2):
			t.Fatalf("keys %q and %q: %v, decoded %v; want both", a, b, err, v)
		}
	})
}

func FuzzCursorDecode(f *testing.F) {
	c := Cursors{Keys: secrets.Fixed([]byte("fuzz"), nil)}
	good, _ := c.Encode("s", map[string]string{"a": "b"})
	for _, s := range []string{good, "", ".", "a.b", good + "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, cur string) {
		var v map[string]string
		err := c.Decode(context.Background(), "s", cur, &v)
		if err == nil && cur != good {
			// Only a cursor this process signed may decode.
			re, _ := c.Encode("s", v)
			if re != cur {
				t.Fatalf("accepted a cursor it did not make: %q", cur)
			}
		}
		if err != nil && !errs.Is(err, errs.Invalid) {
			t.Fatalf("error of kind %d", errs.KindOf(err))
		}
	})
}

// A role's sessions share one budget subject; any other caller is itself.
func TestPrincipalIsTheRoleOfASession(t *testing.T) {
	for arn, want := range map[string]string{
		"arn:aws:sts::111122223333:assumed-role/rally-prod-game-server/match-7": "arn:aws:sts::111122223333:assumed-role/rally-prod-game-server",
		"arn:aws:iam::111122223333:user/ci":                                     "arn:aws:iam::111122223333:user/ci",
		"arn:aws:sts::111122223333:assumed-role/no-session":                     "arn:aws:sts::111122223333:assumed-role/no-session",
	} {
		if got := Principal(arn); got != want {
			t.Errorf("Principal(%s) = %s, want %s", arn, got, want)
		}
	}
}

// A refusal's detail says what was wrong where, not a generic sentence: a
// caller reading only the detail knows which field to fix and how.
func TestInvalidInputDetailNamesTheFieldAndWhatWasExpected(t *testing.T) {
	for name, tc := range map[string]struct {
		ev     events.APIGatewayV2HTTPRequest
		detail string
	}{
		"query out of range": {events.APIGatewayV2HTTPRequest{QueryStringParameters: map[string]string{"limit": "500"}},
			"limit: must be an integer from 1 to 100"},
		"bad JSON":   {events.APIGatewayV2HTTPRequest{Body: `{"title":`}, "body: is not valid JSON"},
		"wrong type": {events.APIGatewayV2HTTPRequest{Body: `{"title":7}`}, "title: must be a string"},
		"unknown field": {events.APIGatewayV2HTTPRequest{Body: `{"title":"T","colour":"red"}`},
			"colour: is not a known field"},
	} {
		t.Run(name, func(t *testing.T) {
			h := Serve(slog.New(slog.NewJSONHandler(io.Discard, nil)), nil, nil, func(_ context.Context, r *Request) (Response, error) {
				var f errs.Fields
				r.IntQuery(&f, "limit", 50, 1, 100)
				if err := f.Err(); err != nil {
					return Response{}, err
				}
				var in struct {
					Title string `json:"title"`
				}
				if r.Event.Body != "" {
					if err := r.Decode(&in); err != nil {
						return Response{}, err
					}
				}
				return OK(nil), nil
			})
			resp, err := h(context.Background(), tc.ev)
			if err != nil {
				t.Fatal(err)
			}
			p := decodeProblem(t, resp)
			if p.Type != ProblemTypePrefix+"invalid-request" || p.Detail != tc.detail {
				t.Fatalf("problem %q %q, want detail %q", p.Type, p.Detail, tc.detail)
			}
		})
	}
	var f errs.Fields
	f.Add("game_id", IDMessage)
	f.Add("window", "must be one of 24h, 7d, all")
	if got, want := ProblemFor(f.Err()).Body.(Problem).Detail, "game_id: "+IDMessage+"; window: must be one of 24h, 7d, all"; got != want {
		t.Fatalf("detail %q, want %q", got, want)
	}
}
