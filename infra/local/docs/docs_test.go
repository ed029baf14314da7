package docs_test

import (
	"encoding/json"
	"errors"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rallyhq/rally/infra/local/docs"
	"github.com/rallyhq/rally/shared/api"
	"github.com/rallyhq/rally/shared/routes"
)

func get(t *testing.T, h http.Handler, path string) (*http.Response, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	body, _ := io.ReadAll(rec.Result().Body)
	return rec.Result(), string(body)
}

// A checkout without npm ci still runs the stack; /docs then says what to
// run instead of drawing an empty page, and the assets are not found.
func TestWithoutTheNpmPackageDocsSayToRunNpmCI(t *testing.T) {
	mod := t.TempDir()
	if err := os.WriteFile(filepath.Join(mod, "go.mod"), []byte("module example.com/m\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pkg := filepath.Join(mod, "infra", "local")
	if err := os.MkdirAll(pkg, 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := docs.New(pkg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Assets(); !errors.Is(err, docs.ErrNoAssets) {
		t.Fatalf("Assets() error = %v, want ErrNoAssets", err)
	}
	for _, path := range []string{"/docs", "/docs/assets/swagger-ui-bundle.js"} {
		resp, body := get(t, s, path)
		var p api.Problem
		if resp.StatusCode != 503 || resp.Header.Get("Content-Type") != api.ProblemContentType ||
			json.Unmarshal([]byte(body), &p) != nil || !strings.Contains(p.Detail, "npm ci") {
			t.Errorf("GET %s without %s: %d %q %s, want 503 saying to run npm ci", path, docs.Package, resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
	}
}

// The search for node_modules stops at the module root: a package
// directory finds the repository's copy, never one above the module.
func TestFindAssetsSearchesUpToTheModuleRoot(t *testing.T) {
	root := t.TempDir()
	mod := filepath.Join(root, "repo")
	for _, dir := range []string{
		filepath.Join(root, "node_modules", docs.Package), // outside the module
		filepath.Join(mod, "infra", "local", "stack"),
	} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bundle := filepath.Join(root, "node_modules", docs.Package, "swagger-ui-bundle.js")
	if err := os.WriteFile(bundle, []byte("//"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mod, "go.mod"), []byte("module example.com/m\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	from := filepath.Join(mod, "infra", "local", "stack")
	if dir, err := docs.FindAssets(from); !errors.Is(err, docs.ErrNoAssets) {
		t.Fatalf("FindAssets found %q (%v) outside the module", dir, err)
	}
	inside := filepath.Join(mod, "node_modules", docs.Package)
	if err := os.MkdirAll(inside, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(inside, "swagger-ui-bundle.js"), []byte("//"), 0o644); err != nil {
		t.Fatal(err)
	}
	if dir, err := docs.FindAssets(from); err != nil || dir != inside {
		t.Fatalf("FindAssets = %q, %v; want %q", dir, err, inside)
	}
}

// The page names every service route, since those are the ones its "Try
// it out" cannot call, and says how to call them instead.
func TestThePageListsTheServiceRoutesABrowserCannotSign(t *testing.T) {
	s, err := docs.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// The page is built whether or not the assets are installed; read it
	// as the template rendered it.
	page := docs.Page(s)
	for _, r := range routes.All() {
		listed := strings.Contains(page, "<code>"+html.EscapeString(r.Method+" "+r.Path)+"</code>")
		if want := r.Auth == routes.Service; listed != want {
			t.Errorf("%s (%s route): listed among the service routes = %v", r.Key(), r.Auth, listed)
		}
		// Who may sign it: the game server only on a game route.
		signer := "rallylocal (operator)"
		if r.Admits(routes.GameServer) {
			signer = "rallyserver (game server) or rallylocal"
		}
		line := "<code>" + html.EscapeString(r.Method+" "+r.Path) + "</code> " + html.EscapeString(r.Summary) + " — " + signer
		if r.Auth == routes.Service && !strings.Contains(page, line) {
			t.Errorf("%s: the page does not say who may sign it (%q)", r.Key(), line)
		}
	}
	if !strings.Contains(page, "--aws-sigv4") {
		t.Error("the page does not show how to sign a service route")
	}
}
