package client

import (
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/getkin/kin-openapi/openapi3"

	"github.com/rallyhq/rally/shared/openapi"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/streaks"
)

// method is what the client does for one route: a call with sample
// arguments, the Go types of the body it sends and of the answer it
// decodes, and the answer's status.
type method struct {
	call   func(context.Context, *Client) error
	in     any // nil: no body
	out    any // nil: no answer body (204)
	status int
}

// methods has an entry per service route; the tests below hold the client
// to it and it to the routes and the OpenAPI document.
var methods = map[string]method{
	routes.PutLeaderboard.Key(): {
		call: func(ctx context.Context, c *Client) error {
			_, err := c.PutLeaderboard(ctx, "b1", LeaderboardDefinition{Title: "t"})
			return err
		},
		in: LeaderboardDefinition{}, out: Leaderboard{}, status: 201,
	},
	routes.RemovePlayerScore.Key(): {
		call: func(ctx context.Context, c *Client) error {
			return c.RemovePlayerScore(ctx, "b1", "p1", "2026-11")
		},
		status: 204,
	},
	routes.BanPlayer.Key(): {
		call: func(ctx context.Context, c *Client) error {
			_, err := c.BanPlayer(ctx, "p1")
			return err
		},
		out: Ban{}, status: 200,
	},
	routes.UnbanPlayer.Key(): {
		call: func(ctx context.Context, c *Client) error {
			_, err := c.UnbanPlayer(ctx, "p1")
			return err
		},
		out: Ban{}, status: 200,
	},
	routes.SubmitScore.Key(): {
		call: func(ctx context.Context, c *Client) error {
			_, err := c.SubmitScore(ctx, "b1", ScoreSubmission{PlayerID: "p1", MatchID: "m1", Score: 1})
			return err
		},
		in: ScoreSubmission{}, out: ScoreResult{}, status: 200,
	},
	routes.PutProfile.Key(): {
		call: func(ctx context.Context, c *Client) error {
			_, err := c.PutProfile(ctx, "p1", ProfileUpdate{DisplayName: "n"})
			return err
		},
		in: ProfileUpdate{}, out: Profile{}, status: 200,
	},
	routes.PutFriends.Key(): {
		call: func(ctx context.Context, c *Client) error {
			_, err := c.PutFriends(ctx, "p1", []string{"p2"})
			return err
		},
		in: friendsUpdate{}, out: Friends{}, status: 200,
	},
	routes.PutGame.Key(): {
		call: func(ctx context.Context, c *Client) error {
			_, err := c.PutGame(ctx, "g1", GameUpdate{Title: "t"})
			return err
		},
		in: GameUpdate{}, out: Game{}, status: 200,
	},
	routes.ReportActivity.Key(): {
		call: func(ctx context.Context, c *Client) error {
			_, err := c.ReportActivity(ctx, ActivityReport{UserID: "u1", EventType: MatchWon, Source: SourceWeb})
			return err
		},
		in: ActivityReport{}, out: ActivityReceipt{}, status: 200,
	},
	routes.EraseUserByService.Key(): {
		call: func(ctx context.Context, c *Client) error {
			_, err := c.EraseUser(ctx, "u1")
			return err
		},
		out: Erasure{}, status: 202,
	},
	routes.ExportUserByService.Key(): {
		call: func(ctx context.Context, c *Client) error {
			_, err := c.ExportUser(ctx, "u1")
			return err
		},
		out: Export{}, status: 202,
	},
	routes.ExportStatusByService.Key(): {
		call: func(ctx context.Context, c *Client) error {
			_, err := c.GetExport(ctx, "u1", "ex_1")
			return err
		},
		out: Export{}, status: 200,
	},
	routes.ErasureStatusByService.Key(): {
		call: func(ctx context.Context, c *Client) error {
			_, err := c.GetErasure(ctx, "u1")
			return err
		},
		out: Erasure{}, status: 200,
	},
	routes.OpsHealth.Key(): {
		call: func(ctx context.Context, c *Client) error {
			_, err := c.Health(ctx)
			return err
		},
		out: Health{}, status: 200,
	},
	routes.StartJob.Key(): {
		call: func(ctx context.Context, c *Client) error {
			_, err := c.StartJob(ctx, JobRequest{Kind: JobReconcile, Target: TargetAll})
			return err
		},
		in: JobRequest{}, out: JobStarted{}, status: 202,
	},
	routes.GetJob.Key(): {
		call: func(ctx context.Context, c *Client) error {
			_, err := c.GetJob(ctx, "j1")
			return err
		},
		out: Job{}, status: 200,
	},
	routes.ListDeadLetters.Key(): {
		call: func(ctx context.Context, c *Client) error {
			_, err := c.ListDeadLetters(ctx, "counter-processor")
			return err
		},
		out: deadLetters{}, status: 200,
	},
	routes.RedriveDeadLetters.Key(): {
		call: func(ctx context.Context, c *Client) error {
			_, err := c.RedriveDeadLetters(ctx, RedriveRequest{})
			return err
		},
		in: RedriveRequest{}, out: redriven{}, status: 200,
	},
}

// constants reads the client's constants of each string type from its
// source: type name → values.
func constants(t *testing.T) map[string][]string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			gen, ok := d.(*ast.GenDecl)
			if !ok || gen.Tok != token.CONST {
				continue
			}
			for _, spec := range gen.Specs {
				vs := spec.(*ast.ValueSpec)
				typ, ok := vs.Type.(*ast.Ident)
				if !ok {
					continue
				}
				for _, v := range vs.Values {
					if lit, ok := v.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						s, _ := strconv.Unquote(lit.Value)
						out[typ.Name] = append(out[typ.Name], s)
					}
				}
			}
		}
	}
	return out
}

// Every service route has a method, which calls it (its method and path),
// sends an Idempotency-Key exactly where the route honours one, and
// nothing else has a method.
func TestEveryServiceRouteHasAMethod(t *testing.T) {
	doc, err := openapi.Document()
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got *http.Request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		got = r
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "{}")
	}))
	defer srv.Close()
	c, err := New(context.Background(), Options{
		Endpoint: srv.URL, Region: "eu-west-1", MaxAttempts: 1,
		Credentials: credentials.NewStaticCredentialsProvider("a", "b", ""),
	})
	if err != nil {
		t.Fatal(err)
	}
	service := map[string]bool{}
	for _, r := range routes.All() {
		if r.Auth != routes.Service {
			continue
		}
		service[r.Key()] = true
		m, ok := methods[r.Key()]
		if !ok {
			t.Errorf("%s: the client has no method", r.Key())
			continue
		}
		if err := m.call(context.Background(), c); err != nil {
			t.Errorf("%s: %v", r.Key(), err)
			continue
		}
		mu.Lock()
		req := got
		mu.Unlock()
		if req.Method != r.Method || !matches(r.Path, req.URL.Path) {
			t.Errorf("%s: the method called %s %s", r.Key(), req.Method, req.URL.Path)
		}
		if sent, takes := req.Header.Get("Idempotency-Key") != "", takesKey(doc, r); sent != takes {
			t.Errorf("%s: sent an Idempotency-Key: %v; the route takes one: %v", r.Key(), sent, takes)
		}
	}
	for key := range methods {
		if !service[key] {
			t.Errorf("%s: a method for no service route", key)
		}
	}
}

// The client's types are the OpenAPI document's: every field of a body it
// sends is one the route takes (required ones always sent, others left out
// when empty), every field of an answer is one it decodes, a nullable one
// into a pointer, and its constants are the document's enums.
func TestTheTypesAreTheDocuments(t *testing.T) {
	doc, err := openapi.Document()
	if err != nil {
		t.Fatal(err)
	}
	enums := constants(t)
	if len(enums) == 0 {
		t.Fatal("read no constants")
	}
	seen := map[string][]string{}
	for key, m := range methods {
		r := route(t, key)
		op := doc.Paths.Find(r.Path).GetOperation(r.Method)
		if op == nil {
			t.Fatalf("%s: not in the document", key)
		}
		if m.in != nil {
			body := op.RequestBody.Value.Content.Get("application/json").Schema.Value
			shape(t, key+" body", reflect.TypeOf(m.in), body, true, enums, seen)
		}
		resp := op.Responses.Status(m.status)
		if resp == nil {
			t.Fatalf("%s: the document has no %d", key, m.status)
		}
		if m.out == nil {
			if resp.Value.Content != nil {
				t.Errorf("%s: the client decodes no answer; the document's %d has one", key, m.status)
			}
			continue
		}
		shape(t, fmt.Sprintf("%s %d", key, m.status), reflect.TypeOf(m.out), resp.Value.Content.Get("application/json").Schema.Value, false, enums, seen)
	}
	// The document's activity enum names every event type (a player's
	// one answers 403 from the service route); the client offers those
	// the points table lets a game server report.
	var reportable []string
	for _, et := range streaks.ReportableBy(streaks.GameServers) {
		reportable = append(reportable, string(et))
	}
	if !sameSet(enums["EventType"], reportable) {
		t.Errorf("EventType: constants %v, what game servers may report %v", enums["EventType"], reportable)
	}
	for _, et := range reportable {
		if !slices.Contains(seen["EventType"], et) {
			t.Errorf("EventType %s: not in the document's enums %v", et, seen["EventType"])
		}
	}
	delete(enums, "EventType")
	for typ, consts := range enums {
		if !sameSet(seen[typ], consts) {
			t.Errorf("%s: constants %v, the document's enums %v", typ, consts, seen[typ])
		}
	}
}

// shape compares a Go type with a schema, recursively.
func shape(t *testing.T, where string, typ reflect.Type, s *openapi3.Schema, sent bool, enums, seen map[string][]string) {
	t.Helper()
	nullable := s.Type.IncludesNull()
	for _, alt := range s.OneOf {
		if alt.Value.Type.Is("null") {
			nullable = true
		} else {
			s = alt.Value
		}
	}
	if nullable && !sent && typ.Kind() != reflect.Pointer && typ.Kind() != reflect.Slice {
		t.Errorf("%s: null decodes into %s as its zero value", where, typ)
	}
	if typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	switch {
	case typ == reflect.TypeFor[time.Time]():
		if !s.Type.Includes("string") || (s.Format != "date-time" && s.Format != "date") {
			t.Errorf("%s: a time, the document's %v %q", where, s.Type.Slice(), s.Format)
		}
	case typ.Kind() == reflect.Struct:
		if !s.Type.Includes("object") {
			t.Errorf("%s: an object, the document's %v", where, s.Type.Slice())
			return
		}
		var names []string
		for i := range typ.NumField() {
			f := typ.Field(i)
			tag := f.Tag.Get("json")
			name, opts, _ := strings.Cut(tag, ",")
			if name == "-" || !f.IsExported() {
				continue
			}
			names = append(names, name)
			prop, ok := s.Properties[name]
			if !ok {
				t.Errorf("%s: the document has no %q", where, name)
				continue
			}
			if sent {
				optional := strings.Contains(opts, "omitempty") || strings.Contains(opts, "omitzero")
				if required := slices.Contains(s.Required, name); required == optional {
					t.Errorf("%s: %q is required: %v, but left out when empty: %v", where, name, required, optional)
				}
			}
			shape(t, where+"."+name, f.Type, prop.Value, sent, enums, seen)
		}
		for name := range s.Properties {
			if !slices.Contains(names, name) {
				t.Errorf("%s: %q is not in %s", where, name, typ)
			}
		}
	case typ.Kind() == reflect.Slice:
		if !s.Type.Includes("array") {
			t.Errorf("%s: an array, the document's %v", where, s.Type.Slice())
			return
		}
		shape(t, where+"[]", typ.Elem(), s.Items.Value, sent, enums, seen)
	case typ.Kind() == reflect.String:
		if !s.Type.Includes("string") {
			t.Errorf("%s: a string, the document's %v", where, s.Type.Slice())
		}
		_, typed := enums[typ.Name()]
		if len(s.Enum) > 0 && !typed {
			t.Errorf("%s: the document enumerates %v; the client's %s has no constants", where, s.Enum, typ)
		}
		for _, v := range s.Enum {
			if !slices.Contains(seen[typ.Name()], fmt.Sprint(v)) {
				seen[typ.Name()] = append(seen[typ.Name()], fmt.Sprint(v))
			}
		}
	case typ.Kind() == reflect.Bool:
		if !s.Type.Includes("boolean") {
			t.Errorf("%s: a boolean, the document's %v", where, s.Type.Slice())
		}
	case typ.Kind() >= reflect.Int && typ.Kind() <= reflect.Int64:
		if !s.Type.Includes("integer") {
			t.Errorf("%s: an integer, the document's %v", where, s.Type.Slice())
		}
	case typ.Kind() == reflect.Float64:
		if !s.Type.Includes("number") {
			t.Errorf("%s: a number, the document's %v", where, s.Type.Slice())
		}
	default:
		t.Errorf("%s: %s is not a JSON type", where, typ)
	}
}

func route(t *testing.T, key string) routes.Route {
	t.Helper()
	for _, r := range routes.All() {
		if r.Key() == key {
			return r
		}
	}
	t.Fatalf("no route %s", key)
	return routes.Route{}
}

// takesKey reports whether the document gives the route an
// Idempotency-Key header.
func takesKey(doc *openapi3.T, r routes.Route) bool {
	for _, p := range doc.Paths.Find(r.Path).GetOperation(r.Method).Parameters {
		if p.Value.In == "header" && strings.EqualFold(p.Value.Name, "Idempotency-Key") {
			return true
		}
	}
	return false
}

// matches reports whether path fills the template's parameters.
func matches(template, path string) bool {
	tpl, segs := strings.Split(template, "/"), strings.Split(path, "/")
	if len(tpl) != len(segs) {
		return false
	}
	for i, s := range tpl {
		if !strings.HasPrefix(s, "{") && s != segs[i] {
			return false
		}
	}
	return true
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// Each method's comment says when it is the operator's alone: exactly
// when the route it calls does not admit the game server.
func TestTheMethodsSayWhichAreTheOperatorsAlone(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "methods.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Recv == nil || !fn.Name.IsExported() {
			continue
		}
		var called []routes.Route
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if id, ok := sel.X.(*ast.Ident); ok && id.Name == "routes" {
					for _, r := range routes.All() {
						// A declaration is named after its function, a
						// service twin of a player route with ByService.
						name := routes.Camel(r.Function)
						if r.Auth == routes.Service && (sel.Sel.Name == name || sel.Sel.Name == name+"ByService") {
							called = append(called, r)
						}
					}
				}
			}
			return true
		})
		if len(called) != 1 {
			t.Errorf("%s calls %d service routes, want 1", fn.Name.Name, len(called))
			continue
		}
		says := strings.Contains(fn.Doc.Text(), "The operator's alone.")
		if want := !called[0].Admits(routes.GameServer); says != want {
			t.Errorf("%s (%s): its comment says the operator's alone = %v, want %v", fn.Name.Name, called[0].Key(), says, want)
		}
	}
}
