package routes

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// What a web game on another origin may send and read, declared once for
// the HTTP API's CORS configuration (infra/stack) and the local gateway's.
// Player routes authenticate with a bearer token, not cookies, so browsers
// need no credentials mode; service routes are signed by servers, so the
// SigV4 headers are not offered to browsers.
var (
	// CORSAllowHeaders are the request headers a browser may send.
	CORSAllowHeaders = []string{"Authorization", "Content-Type", "Idempotency-Key"}
	// CORSExposeHeaders are the response headers a script may read beyond
	// the CORS-safelisted ones: the budgets (a 429's Retry-After and the
	// RateLimit fields every player route answers with) and the request id
	// to quote when reporting a failure.
	CORSExposeHeaders = []string{"Retry-After", "RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset", "Apigw-Requestid"}
)

// CORSMaxAge is how long a browser may reuse a preflight's answer.
const CORSMaxAge = 10 * time.Minute

// AnyOrigin allows every origin; it is refused with credentials.
const AnyOrigin = "*"

// Methods are the HTTP methods the routes use, sorted, once each.
func Methods(rs []Route) []string {
	var out []string
	for _, r := range rs {
		if !slices.Contains(out, r.Method) {
			out = append(out, r.Method)
		}
	}
	slices.Sort(out)
	return out
}

// CheckOrigin reports why origin cannot be an allowed CORS origin: it must
// be AnyOrigin or an http(s) scheme://host[:port], exactly as a browser
// sends it in the Origin header (no path, query, user or trailing slash,
// lowercase).
func CheckOrigin(origin string) error {
	if origin == AnyOrigin {
		return nil
	}
	u, err := url.Parse(origin)
	switch {
	case err != nil:
		return fmt.Errorf("origin %q is not a URL: %v", origin, err)
	case u.Scheme != "https" && u.Scheme != "http":
		return fmt.Errorf("origin %q must start with https:// or http://", origin)
	case u.Host == "" || u.Hostname() == "":
		return fmt.Errorf("origin %q has no host", origin)
	case u.User != nil || u.Path != "" || u.RawQuery != "" || u.Fragment != "" || strings.ContainsAny(origin, "?#"):
		return fmt.Errorf("origin %q must be scheme://host[:port] with no path (not even a trailing /), query or user", origin)
	case strings.ToLower(origin) != origin:
		return fmt.Errorf("origin %q must be lowercase, as browsers send it", origin)
	case u.Port() != "":
		if p, err := strconv.Atoi(u.Port()); err != nil || p < 1 || p > 65535 {
			return fmt.Errorf("origin %q has an invalid port", origin)
		}
	}
	if strings.Contains(u.Hostname(), "*") {
		return fmt.Errorf("origin %q: wildcards in a host are not supported; list each origin", origin)
	}
	return nil
}
