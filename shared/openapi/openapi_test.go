package openapi

import (
	"fmt"
	"strings"
	"testing"

	"github.com/rallyhq/rally/shared/routes"
)

// The document and the route table describe the same API: every route is
// documented with its auth, and nothing undocumented is routed.
func TestDocumentCoversEveryRoute(t *testing.T) {
	d, err := Document()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, r := range routes.All() {
		item := d.Paths.Find(r.Path)
		if item == nil {
			t.Errorf("%s: path not documented", r.Key())
			continue
		}
		op := item.GetOperation(r.Method)
		if op == nil {
			t.Errorf("%s: operation not documented", r.Key())
			continue
		}
		seen[r.Key()] = true
		scheme := "player"
		if op.Security != nil && len(*op.Security) > 0 {
			for name := range (*op.Security)[0] {
				scheme = name
			}
		}
		if want := r.Auth.String(); scheme != want {
			t.Errorf("%s: documented security %q, routed as %q", r.Key(), scheme, want)
		}
	}
	for path, item := range d.Paths.Map() {
		for method := range item.Operations() {
			key := strings.ToUpper(method) + " " + path
			if !seen[key] {
				t.Errorf("%s is documented but not routed", key)
			}
		}
	}
}

func TestValidateResponseRejectsWhatTheContractForbids(t *testing.T) {
	const path = "/v1/posts/{post_id}/like"
	ok := `{"post_id":"p1","liked":true,"changed":false}`
	if err := ValidateResponse("PUT", path, 200, "application/json", []byte(ok)); err != nil {
		t.Fatalf("valid body refused: %v", err)
	}
	for name, tc := range map[string]struct {
		status int
		ct     string
		body   string
	}{
		"missing field":       {200, "application/json", `{"post_id":"p1","liked":true}`},
		"wrong type":          {200, "application/json", `{"post_id":"p1","liked":"yes","changed":false}`},
		"extra field":         {200, "application/json", `{"post_id":"p1","liked":true,"changed":false,"x":1}`},
		"undeclared status":   {418, "application/json", ok},
		"problem as json":     {400, "application/json", `{"type":"t","title":"t","status":400,"detail":"d"}`},
		"problem missing key": {400, "application/problem+json", `{"title":"t","status":400}`},
	} {
		if err := ValidateResponse("PUT", path, tc.status, tc.ct, []byte(tc.body)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// Every route documents its 429: the budgets it spends, as declared with
// the route, and the headers a client backs off by.
func TestEveryRouteDocumentsItsBudgets(t *testing.T) {
	d, err := Document()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range routes.All() {
		resp := d.Paths.Find(r.Path).GetOperation(r.Method).Responses.Status(429)
		if resp == nil || resp.Value == nil {
			t.Errorf("%s: no 429 documented", r.Key())
			continue
		}
		for _, b := range r.Budgets() {
			if want := fmt.Sprintf("%q: %d a minute", b.Name, b.PerMinute); !strings.Contains(*resp.Value.Description, want) {
				t.Errorf("%s: 429 says %q, not %s", r.Key(), *resp.Value.Description, want)
			}
		}
		for _, h := range []string{"Retry-After", "RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"} {
			if resp.Value.Headers[h] == nil {
				t.Errorf("%s: 429 lacks the %s header", r.Key(), h)
			}
		}
	}
	if !strings.Contains(string(JSON()), `"RateLimit-Reset"`) {
		t.Error("the served document lacks the RateLimit headers")
	}
}
