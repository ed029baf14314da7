// Package docs serves the local stack's API reference at /docs: Swagger UI,
// read from the swagger-ui-dist npm package in node_modules (never a CDN),
// rendering the stack's /openapi.json, with a form that mints a player token
// from /_local/token and authorizes the page's "Try it out" calls with it.
package docs

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/rallyhq/rally/infra/local/gateway"
	"github.com/rallyhq/rally/infra/local/nodemodules"
	"github.com/rallyhq/rally/shared/errs"
	"github.com/rallyhq/rally/shared/routes"
)

// Package is the npm package the page's UI comes from (package.json pins
// its version).
const Package = "swagger-ui-dist"

// ErrNoAssets means swagger-ui-dist was not found under node_modules.
var ErrNoAssets = errors.New("the API reference needs the " + Package + " npm package: run npm ci (make dev does)")

// assets are the files of swagger-ui-dist the page loads; nothing else in
// the package is served.
var assets = []string{"swagger-ui.css", "swagger-ui-bundle.js", "favicon-32x32.png", "favicon-16x16.png"}

// Rally's own part of the page: the markup, the script that loads the
// contract and mints tokens, and its styles.
//
//go:embed page.html rally-docs.js rally-docs.css
var own embed.FS

// contentSecurityPolicy lets the page load from its own origin only, so a
// reference to anywhere else fails in the browser as it would offline.
// Swagger UI sets inline styles and draws some icons from data: URLs.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; " +
	"img-src 'self' data:; font-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Server serves GET /docs and the files under /docs/.
type Server struct {
	dir     string // swagger-ui-dist in node_modules; "" when not found
	missing error
	page    []byte
}

// New builds the page and looks for swagger-ui-dist from the directory
// from (the working directory when empty) up to the module root. A stack
// started without it still serves the API; /docs then answers 503 and says
// how to install it.
func New(from string) (*Server, error) {
	page, err := renderPage()
	if err != nil {
		return nil, err
	}
	s := &Server{page: page}
	s.dir, s.missing = FindAssets(from)
	return s, nil
}

// Assets returns the swagger-ui-dist directory served, or why there is none.
func (s *Server) Assets() (string, error) { return s.dir, s.missing }

// FindAssets looks for node_modules/swagger-ui-dist in from (the working
// directory when empty) and each parent up to the module root (the
// directory holding go.mod), as tests run from their package directory.
func FindAssets(from string) (string, error) {
	dir, ok, err := nodemodules.Find(from, func(nm string) (string, bool) {
		candidate := filepath.Join(nm, Package)
		_, err := os.Stat(filepath.Join(candidate, "swagger-ui-bundle.js"))
		return candidate, err == nil
	})
	if err != nil {
		return "", fmt.Errorf("docs: %w", err)
	}
	if !ok {
		return "", fmt.Errorf("docs: searched from %s up to the module root: %w", from, ErrNoAssets)
	}
	return dir, nil
}

// ServeHTTP answers GET (and HEAD) of /docs, /docs/, /docs/rally-docs.js,
// /docs/rally-docs.css and /docs/assets/<file of swagger-ui-dist>.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		gateway.Problem(w, errs.New(errs.NotFound, "%s answers GET", r.URL.Path))
		return
	}
	w.Header().Set("X-Content-Type-Options", "nosniff")
	name := strings.TrimPrefix(r.URL.Path, "/docs")
	switch {
	case name == "" || name == "/":
		if s.missing != nil {
			gateway.Problem(w, errs.Wrap(errs.Unavailable, s.missing, ErrNoAssets.Error()))
			return
		}
		w.Header().Set("Content-Security-Policy", contentSecurityPolicy)
		serve(w, r, "index.html", s.page)
	case name == "/rally-docs.js" || name == "/rally-docs.css":
		b, _ := own.ReadFile(path.Base(name))
		serve(w, r, name, b)
	case strings.HasPrefix(name, "/assets/"):
		s.serveAsset(w, r, strings.TrimPrefix(name, "/assets/"))
	default:
		gateway.Problem(w, errs.New(errs.NotFound, "no page %s: the API reference is at /docs", r.URL.Path))
	}
}

func (s *Server) serveAsset(w http.ResponseWriter, r *http.Request, name string) {
	known := false
	for _, a := range assets {
		known = known || a == name
	}
	if !known {
		gateway.Problem(w, errs.New(errs.NotFound, "no asset %q: the page loads %s", name, strings.Join(assets, ", ")))
		return
	}
	if s.missing != nil {
		gateway.Problem(w, errs.Wrap(errs.Unavailable, s.missing, ErrNoAssets.Error()))
		return
	}
	b, err := os.ReadFile(filepath.Join(s.dir, name))
	if err != nil {
		gateway.Problem(w, errs.Wrap(errs.Unavailable, err, s.dir+" is incomplete: run npm ci"))
		return
	}
	serve(w, r, name, b)
}

// serve writes a file with the type its extension names. The files change
// only with npm ci or a rebuild, but revalidating keeps a reloaded page in
// step with them.
func serve(w http.ResponseWriter, r *http.Request, name string, b []byte) {
	w.Header().Set("Content-Type", contentTypes[path.Ext(name)])
	w.Header().Set("Cache-Control", "no-cache")
	http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(b))
}

// contentTypes are fixed here rather than read from the system's MIME
// table, which may name JavaScript differently.
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".png":  "image/png",
}

// serviceRoute is a service route as the page lists it, with the local
// user who may call it: rallyserver, the game server, on a game route;
// rallylocal, the operator, on the others.
type serviceRoute struct{ Method, Path, Summary, Signer string }

func renderPage() ([]byte, error) {
	tmpl, err := template.ParseFS(own, "page.html")
	if err != nil {
		return nil, fmt.Errorf("docs: parse page: %w", err)
	}
	var service []serviceRoute
	for _, r := range routes.All() {
		if r.Auth == routes.Service {
			signer := "rallylocal (operator)"
			if r.Admits(routes.GameServer) {
				signer = "rallyserver (game server) or rallylocal"
			}
			service = append(service, serviceRoute{r.Method, r.Path, r.Summary, signer})
		}
	}
	var buf bytes.Buffer
	if err := tmpl.Execute(&buf, map[string]any{"ServiceRoutes": service, "Package": Package}); err != nil {
		return nil, fmt.Errorf("docs: render page: %w", err)
	}
	return buf.Bytes(), nil
}
