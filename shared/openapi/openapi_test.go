package openapi

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/rallyhq/rally/shared/api"
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

// Every operation says what it does: the reference page shows a summary
// and a description for each.
func TestEveryOperationHasASummaryAndADescription(t *testing.T) {
	d, err := Document()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range routes.All() {
		op := d.Paths.Find(r.Path).GetOperation(r.Method)
		if strings.TrimSpace(op.Summary) == "" {
			t.Errorf("%s: no summary", r.Key())
		}
		if strings.TrimSpace(op.Description) == "" {
			t.Errorf("%s: no description", r.Key())
		}
	}
}

// Every operation describes the errors its declaration implies, each as a
// problem: a player route 401 and 403 (the JWT authorizer, a player acting
// for another), a service route 403 (no or a bad signature, a caller off
// the allow-list), any parameter 400, a body 400 and 413, an
// Idempotency-Key 409 (the first request still in progress) and 422 (the
// key reused with another request), every route 429 and 503. The statuses
// the end-to-end tests observe are checked on every call they make
// (infra/local/apitest validates each response against its operation).
func TestEveryOperationDescribesTheErrorsItsDeclarationImplies(t *testing.T) {
	d, err := Document()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range routes.All() {
		item := d.Paths.Find(r.Path)
		op := item.GetOperation(r.Method)
		want := []int{429, 503}
		switch r.Auth {
		case routes.Player:
			want = append(want, 401, 403)
		case routes.Service:
			want = append(want, 403)
		}
		params := append(append([]*openapi3.ParameterRef{}, item.Parameters...), op.Parameters...)
		if len(params) > 0 {
			want = append(want, 400)
		}
		for _, p := range params {
			if p.Value.In == openapi3.ParameterInHeader && p.Value.Name == "Idempotency-Key" {
				want = append(want, 409, 422)
			}
		}
		if op.RequestBody != nil {
			want = append(want, 400, 413)
		}
		for _, status := range want {
			resp := op.Responses.Status(status)
			if resp == nil || resp.Value == nil {
				t.Errorf("%s: does not describe %d", r.Key(), status)
				continue
			}
			mt := resp.Value.Content.Get(api.ProblemContentType)
			if mt == nil || mt.Schema == nil || mt.Schema.Value != d.Components.Schemas["Problem"].Value {
				t.Errorf("%s: %d is not described as a problem", r.Key(), status)
			}
		}
	}
}

// The servers are where the API answers: the local stack's URL and a
// deployment's, with its API id and Region as variables.
func TestServersNameTheLocalStackAndADeployment(t *testing.T) {
	d, err := Document()
	if err != nil {
		t.Fatal(err)
	}
	var urls []string
	for _, s := range d.Servers {
		urls = append(urls, s.URL)
		if strings.Contains(s.URL, "{") {
			for _, v := range []string{"apiId", "region"} {
				if s.Variables[v] == nil || s.Variables[v].Default == "" {
					t.Errorf("server %s: variable %s has no default", s.URL, v)
				}
			}
		}
	}
	want := []string{"http://localhost:3000", "https://{apiId}.execute-api.{region}.amazonaws.com"}
	if strings.Join(urls, " ") != strings.Join(want, " ") {
		t.Fatalf("servers %v, want %v", urls, want)
	}
}

// Every problem type the API answers with is listed, in the document (the
// Problem schema's type and x-problem-types, with its status and what it
// means) and in the README; the document lists no other.
func TestEveryProblemTypeIsListedWithItsMeaning(t *testing.T) {
	d, err := Document()
	if err != nil {
		t.Fatal(err)
	}
	var listed map[string]struct {
		Status  int    `json:"status"`
		Meaning string `json:"meaning"`
	}
	raw, err := json.Marshal(d.Components.Extensions["x-problem-types"])
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &listed); err != nil {
		t.Fatalf("x-problem-types: %v", err)
	}
	enum := map[string]bool{}
	for _, v := range d.Components.Schemas["Problem"].Value.Properties["type"].Value.Enum {
		enum[fmt.Sprint(v)] = true
	}
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	types := api.ProblemTypes()
	for _, pt := range types {
		l, ok := listed[pt.URI]
		switch {
		case !ok:
			t.Errorf("%s: not in x-problem-types", pt.URI)
		case l.Status != pt.Status:
			t.Errorf("%s: x-problem-types says %d, the API answers %d", pt.URI, l.Status, pt.Status)
		case strings.TrimSpace(l.Meaning) == "":
			t.Errorf("%s: x-problem-types does not say what it means", pt.URI)
		}
		if !enum[pt.URI] {
			t.Errorf("%s: not among the Problem schema's types", pt.URI)
		}
		if !strings.Contains(string(readme), fmt.Sprintf("| `%s` | %d |", pt.URI, pt.Status)) {
			t.Errorf("%s: the README's problem types do not list it with %d", pt.URI, pt.Status)
		}
	}
	if len(listed) != len(types) || len(enum) != len(types) {
		t.Errorf("the document lists %d and %d problem types, the API answers with %d", len(listed), len(enum), len(types))
	}
}

// The document served at /openapi.json says on each service operation
// which roles may call it, as the route declares, and what the others get.
func TestEveryServiceOperationNamesTheRolesThatMayCallIt(t *testing.T) {
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(JSON(), &doc); err != nil {
		t.Fatal(err)
	}
	for _, r := range routes.All() {
		var op struct {
			Roles       []string `json:"x-rally-roles"`
			Description string   `json:"description"`
			Responses   map[string]struct {
				Description string `json:"description"`
			} `json:"responses"`
		}
		if err := json.Unmarshal(doc.Paths[r.Path][strings.ToLower(r.Method)], &op); err != nil {
			t.Fatalf("%s: %v", r.Key(), err)
		}
		var want []string
		for _, role := range r.Admitted() {
			want = append(want, string(role))
		}
		if !slices.Equal(op.Roles, want) {
			t.Errorf("%s: x-rally-roles %v, want %v", r.Key(), op.Roles, want)
		}
		if r.Auth != routes.Service {
			continue
		}
		if !strings.HasSuffix(op.Description, RolesLine(r)) {
			t.Errorf("%s: the description does not end naming its callers: %q", r.Key(), op.Description)
		}
		if forbidden := op.Responses["403"].Description; !strings.Contains(forbidden, strings.Join(want, ", ")) {
			t.Errorf("%s: 403 %q does not name the roles it admits", r.Key(), forbidden)
		}
		if strings.Contains(RolesLine(r), "rallyserver") != r.Admits(routes.GameServer) {
			t.Errorf("%s: %q", r.Key(), RolesLine(r))
		}
	}
}
