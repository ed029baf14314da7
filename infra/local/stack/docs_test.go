package stack_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"image/color"
	"image/png"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rallyhq/rally/infra/local/docs"
	"github.com/rallyhq/rally/infra/local/stack"
	"github.com/rallyhq/rally/infra/local/stacktest"
	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/infra/local/testenv/await"
	"github.com/rallyhq/rally/shared/api"
	"github.com/rallyhq/rally/shared/openapi"
	"github.com/rallyhq/rally/shared/routes"
)

// requireDocsAssets stops the test when swagger-ui-dist is not installed
// (a skip outside CI, a failure in CI), and returns its directory.
func requireDocsAssets(t *testing.T) string {
	t.Helper()
	dir, err := docs.FindAssets("")
	testenv.Require(t, docs.Package+" (npm ci)", err)
	return dir
}

// attrURL finds the URLs a page makes the browser load or go to.
var attrURL = regexp.MustCompile(`(?i)\s(?:src|href|action|formaction|srcset|poster|data|manifest)\s*=\s*"([^"]*)"`)

// cssExternal finds a stylesheet's references to another host.
var cssExternal = regexp.MustCompile(`(?i)(?:url\(\s*['"]?|@import\s+['"])\s*(?:https?:)?//`)

// The API reference is one page and the files it loads, all from the
// stack itself with the types a browser needs (a script served as
// text/plain does not run under nosniff), and nothing from another host:
// the page works offline and a CDN outage cannot break it.
func TestDocsServeThePageAndItsAssetsFromThisStackOnly(t *testing.T) {
	dir := requireDocsAssets(t)
	s := stacktest.Start(t, stack.Options{})
	c := client{t, s.URL()}

	code, hdr, page := c.call("GET", "/docs", "", nil)
	if code != 200 || hdr.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("GET /docs: %d %q: %.200s", code, hdr.Get("Content-Type"), page)
	}
	csp := hdr.Get("Content-Security-Policy")
	if !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'self'") ||
		!strings.Contains(csp, "connect-src 'self'") || strings.Contains(csp, "http") {
		t.Errorf("Content-Security-Policy %q lets the page load from elsewhere than the stack", csp)
	}
	for _, want := range []string{"/_local/token", `{"sub":"alice"}`, "Get a local token", "Service routes", "--aws-sigv4"} {
		if !bytes.Contains(page, []byte(html.EscapeString(want))) && !bytes.Contains(page, []byte(want)) {
			t.Errorf("the page does not say %q", want)
		}
	}

	wantType := map[string]string{
		".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
		".png": "image/png", ".json": "application/json",
	}
	loaded := map[string]bool{}
	for _, m := range attrURL.FindAllSubmatch(page, -1) {
		ref := html.UnescapeString(string(m[1]))
		if !strings.HasPrefix(ref, "/") || strings.HasPrefix(ref, "//") {
			t.Errorf("the page references %q, not a path on the stack", ref)
			continue
		}
		p, _, _ := strings.Cut(ref, "?")
		ext := path.Ext(p)
		if wantType[ext] == "" || loaded[p] {
			continue // a link to a page (/docs?sub=bob), or already checked
		}
		loaded[p] = true
		code, hdr, body := c.call("GET", p, "", nil)
		if code != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), wantType[ext]) || len(body) == 0 {
			t.Errorf("GET %s: %d %q (%d bytes), want 200 %s", p, code, hdr.Get("Content-Type"), len(body), wantType[ext])
		}
		if ext == ".css" && cssExternal.Match(body) {
			t.Errorf("%s loads from another host: %s", p, cssExternal.Find(body))
		}
		if ext == ".js" && strings.HasPrefix(p, "/docs/rally-docs") && bytes.Contains(body, []byte("://")) {
			t.Errorf("%s names another host", p)
		}
	}
	for _, want := range []string{"/docs/assets/swagger-ui-bundle.js", "/docs/assets/swagger-ui.css", "/docs/rally-docs.js", "/docs/rally-docs.css"} {
		if !loaded[want] {
			t.Errorf("the page does not load %s", want)
		}
	}

	// What is served is the npm package at the version package.json pins.
	_, _, bundle := c.call("GET", "/docs/assets/swagger-ui-bundle.js", "", nil)
	onDisk, err := os.ReadFile(filepath.Join(dir, "swagger-ui-bundle.js"))
	if err != nil || !bytes.Equal(bundle, onDisk) {
		t.Errorf("the served bundle is not %s/swagger-ui-bundle.js (%v)", dir, err)
	}
	var pinned, installed struct {
		Version      string            `json:"version"`
		Dependencies map[string]string `json:"dependencies"`
	}
	readJSON(t, filepath.Join(dir, "..", "..", "package.json"), &pinned)
	readJSON(t, filepath.Join(dir, "package.json"), &installed)
	if pinned.Dependencies[docs.Package] == "" || pinned.Dependencies[docs.Package] != installed.Version {
		t.Errorf("package.json pins %s %q, node_modules has %q: run npm ci", docs.Package, pinned.Dependencies[docs.Package], installed.Version)
	}

	// Only the files the page loads are served, and wrong requests get a
	// problem, not a page.
	for _, tc := range []struct{ method, path string }{
		{"GET", "/docs/assets/package.json"},
		{"GET", "/docs/assets/index.html"},
		{"GET", "/docs/nothing"},
		{"POST", "/docs"},
	} {
		code, hdr, body := c.call(tc.method, tc.path, "", nil)
		if code != 404 || hdr.Get("Content-Type") != api.ProblemContentType {
			t.Errorf("%s %s: %d %q %.100s, want 404 problem", tc.method, tc.path, code, hdr.Get("Content-Type"), body)
		}
	}
}

func readJSON(t *testing.T, file string, into any) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, into); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

// findChromium returns the Chromium on PATH (Debian's chromium package,
// or chromium-browser elsewhere).
func findChromium() (string, error) {
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", errors.New("neither chromium nor chromium-browser is on PATH (apt-get install chromium)")
}

// renderedOp is one operation as Swagger UI drew it.
type renderedOp struct {
	summary string
	locked  bool // the padlock is closed: the page's token applies
}

// renderedPage is what the DOM of /docs says once the script has run.
type renderedPage struct {
	ready    string // body's data-docs-ready: "true", or "error"
	tokenSub string // body's data-token-sub: the player the page is authorized as
	status   string // the token form's status line
	ops      map[string]renderedOp
}

var (
	bodyData    = regexp.MustCompile(`<body[^>]*>`)
	docsReady   = regexp.MustCompile(`data-docs-ready="([^"]*)"`)
	tokenSub    = regexp.MustCompile(`data-token-sub="([^"]*)"`)
	tokenStatus = regexp.MustCompile(`(?s)id="token-status"[^>]*>(.*?)</p>`)
	opMethod    = regexp.MustCompile(`<span class="opblock-summary-method">([A-Z]+)</span>`)
	opPath      = regexp.MustCompile(`data-path="([^"]*)"`)
	opSummary   = regexp.MustCompile(`<div class="opblock-summary-description">([^<]*)</div>`)
	opLock      = regexp.MustCompile(`aria-label="authorization button (locked|unlocked)"`)
)

func parseRendered(dom string) renderedPage {
	var p renderedPage
	body := bodyData.FindString(dom)
	if m := docsReady.FindStringSubmatch(body); m != nil {
		p.ready = m[1]
	}
	if m := tokenSub.FindStringSubmatch(body); m != nil {
		p.tokenSub = html.UnescapeString(m[1])
	}
	if m := tokenStatus.FindStringSubmatch(dom); m != nil {
		p.status = html.UnescapeString(m[1])
	}
	p.ops = map[string]renderedOp{}
	// Each operation is a div "opblock opblock-<method>" holding its
	// method, path, summary and padlock, in that order.
	blocks := strings.Split(dom, `<div class="opblock opblock-`)
	for _, b := range blocks[1:] {
		m, pt := opMethod.FindStringSubmatch(b), opPath.FindStringSubmatch(b)
		if m == nil || pt == nil {
			continue
		}
		op := renderedOp{}
		if s := opSummary.FindStringSubmatch(b); s != nil {
			op.summary = html.UnescapeString(s[1])
		}
		if l := opLock.FindStringSubmatch(b); l != nil {
			op.locked = l[1] == "locked"
		}
		p.ops[m[1]+" "+html.UnescapeString(pt[1])] = op
	}
	return p
}

// runChromium loads url in headless Chromium with a fresh profile and no
// host but localhost resolvable, lets the page run for up to budget of
// virtual time (which stands still while requests are in flight), writes
// a screenshot of the window to shot and returns the DOM.
func runChromium(t *testing.T, chromium, url, shot string, budget time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), budget+90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium,
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
		"--user-data-dir="+t.TempDir(),
		"--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost",
		"--window-size=1280,4000",
		"--virtual-time-budget="+strconv.FormatInt(budget.Milliseconds(), 10),
		"--screenshot="+shot, "--dump-dom", url)
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		errOut := stderr.String()
		if len(errOut) > 2000 {
			errOut = errOut[len(errOut)-2000:]
		}
		return "", fmt.Errorf("chromium: %w: %s", err, errOut)
	}
	return stdout.String(), nil
}

// The API reference as a developer sees it: headless Chromium opens
// /docs?sub=alice with every host but localhost unresolvable (no CDN, no
// network). Swagger UI draws every declared route from /openapi.json with
// the contract's summary, the page mints alice's token and authorizes the player
// routes with it (their padlocks close; the service routes', which need
// SigV4, stay open), and the screenshot shows the operations painted.
func TestDocsDrawEveryRouteInABrowser(t *testing.T) {
	chromium, err := findChromium()
	testenv.Require(t, "chromium", err)
	requireDocsAssets(t)
	s := stacktest.Start(t, stack.Options{})

	shot := filepath.Join(t.TempDir(), "docs.png")
	var page renderedPage
	// The page says when it is done (data-docs-ready, data-token-sub); a
	// busy machine may need more virtual time before it gets there.
	budget := 5 * time.Second
	await.Success(t, 4*time.Minute, "/docs drawn in Chromium and authorized as alice", func() error {
		dom, err := runChromium(t, chromium, s.URL()+"/docs?sub=alice", shot, budget)
		if err != nil {
			return err
		}
		page = parseRendered(dom)
		switch {
		case page.ready == "error":
			t.Fatalf("the page could not load the reference: %.500s", dom)
		case page.ready != "true":
			err = fmt.Errorf("not drawn within %s of virtual time (%d operations so far)", budget, len(page.ops))
		case page.tokenSub != "alice":
			err = fmt.Errorf("drawn, but not authorized as alice within %s of virtual time (status %q)", budget, page.status)
		}
		budget = min(2*budget, time.Minute)
		return err
	})

	if !strings.HasPrefix(page.status, "Authorized as alice") {
		t.Errorf("the token form says %q, want it to say alice is authorized", page.status)
	}
	doc, err := openapi.Document()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range routes.All() {
		op, ok := page.ops[r.Key()]
		if !ok {
			t.Errorf("%s (%s) is not on the page", r.Key(), r.Summary)
			continue
		}
		// The page draws the contract's summary of each operation.
		if want := doc.Paths.Find(r.Path).GetOperation(r.Method).Summary; op.summary != want || want == "" {
			t.Errorf("%s is drawn with summary %q, want the contract's %q", r.Key(), op.summary, want)
		}
		if want := r.Auth == routes.Player; op.locked != want {
			t.Errorf("%s (%s route): padlock closed = %v, want %v", r.Key(), r.Auth, op.locked, want)
		}
	}
	if len(page.ops) != len(routes.All()) {
		t.Errorf("the page draws %d operations, shared/routes declares %d", len(page.ops), len(routes.All()))
	}
	// RALLY_DOCS_SCREENSHOT=<file> keeps the screenshot to look at.
	if keep := os.Getenv("RALLY_DOCS_SCREENSHOT"); keep != "" {
		if b, err := os.ReadFile(shot); err != nil || os.WriteFile(keep, b, 0o644) != nil {
			t.Errorf("keep the screenshot in %s: %v", keep, err)
		}
	}
	checkScreenshot(t, shot)
}

// methodColours are the fills of Swagger UI's method badges.
var methodColours = map[string]color.RGBA{
	"GET": {0x61, 0xaf, 0xfe, 0xff}, "POST": {0x49, 0xcc, 0x90, 0xff},
	"PUT": {0xfc, 0xa1, 0x30, 0xff}, "DELETE": {0xf9, 0x3e, 0x3e, 0xff},
}

// checkScreenshot checks that shot is a PNG of the whole window with the
// page painted on it: many colours, not one, and the badge of every
// method the API uses.
func checkScreenshot(t *testing.T, shot string) {
	t.Helper()
	f, err := os.Open(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("the screenshot is not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() != 1280 || b.Dy() != 4000 {
		t.Errorf("screenshot is %dx%d, want the 1280x4000 window", b.Dx(), b.Dy())
	}
	colours := map[color.RGBA]int{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			colours[color.RGBAModel.Convert(img.At(x, y)).(color.RGBA)]++
		}
	}
	if len(colours) < 100 {
		t.Errorf("the screenshot has %d colours: the page was not painted", len(colours))
	}
	used := map[string]bool{}
	for _, r := range routes.All() {
		used[r.Method] = true
	}
	for method := range used {
		want, known := methodColours[method]
		// A badge is about 80x30 pixels of its fill.
		if known && colours[want] < 500 {
			t.Errorf("the screenshot shows no %s badge (%d pixels of %v)", method, colours[want], want)
		}
	}
}
