package gateway

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/rallyhq/rally/shared/routes"
)

// CORS is the gateway's CORS configuration, as an HTTP API's: the gateway
// answers preflights itself and adds the allow and expose headers to every
// response to an allowed origin, the gateway's own errors included, in
// place of any a handler returns.
type CORS struct {
	// Origins are the allowed origins: exact ones (http://localhost:5173),
	// routes.AnyOrigin, or scheme://host:* for every port of a host (and
	// none).
	Origins []string
	// Methods, AllowHeaders and ExposeHeaders answer preflights and let
	// scripts read responses.
	Methods, AllowHeaders, ExposeHeaders []string
	// MaxAge is how long a browser may reuse a preflight's answer.
	MaxAge time.Duration
}

// DefaultCORSOrigins are the local stack's allowed origins by default: a
// web game served from any port of this machine.
var DefaultCORSOrigins = []string{"http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*"}

// RallyCORS is Rally's CORS configuration for these origins: what the
// deployed API declares (the routes' methods, routes.CORSAllowHeaders and
// routes.CORSExposeHeaders). It refuses an origin no browser sends.
func RallyCORS(origins []string) (*CORS, error) {
	for _, o := range origins {
		if err := routes.CheckOrigin(strings.TrimSuffix(o, ":*")); err != nil {
			return nil, fmt.Errorf("gateway: cors: %w (or scheme://host:* for any port)", err)
		}
	}
	return &CORS{
		Origins:       origins,
		Methods:       routes.Methods(routes.All()),
		AllowHeaders:  routes.CORSAllowHeaders,
		ExposeHeaders: routes.CORSExposeHeaders,
		MaxAge:        routes.CORSMaxAge,
	}, nil
}

// allowOrigin is the Access-Control-Allow-Origin answer to origin, "" when
// it is not allowed.
func (c *CORS) allowOrigin(origin string) string {
	if c == nil || origin == "" {
		return ""
	}
	anyOrigin := false
	for _, o := range c.Origins {
		switch {
		case o == origin:
			return origin
		case o == routes.AnyOrigin:
			anyOrigin = true
		case strings.HasSuffix(o, ":*"):
			base := strings.TrimSuffix(o, ":*")
			if origin == base {
				return origin
			}
			if port, ok := strings.CutPrefix(origin, base+":"); ok {
				if n, err := strconv.Atoi(port); err == nil && n > 0 && n < 65536 {
					return origin
				}
			}
		}
	}
	if anyOrigin {
		return routes.AnyOrigin
	}
	return ""
}

// Wrap serves next with c's CORS: preflights answered on every path and
// the headers added to each response (the local stack's own endpoints, so
// a web game can mint a token from /_local/token).
func (c *CORS) Wrap(next http.Handler) http.Handler {
	if c == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isPreflight(r) {
			c.preflight(w, r)
			return
		}
		next.ServeHTTP(c.writer(w, r), r)
	})
}

// isPreflight reports whether r is a CORS preflight: OPTIONS with Origin
// and Access-Control-Request-Method, which API Gateway answers itself.
func isPreflight(r *http.Request) bool {
	return r.Method == http.MethodOptions && r.Header.Get("Origin") != "" &&
		r.Header.Get("Access-Control-Request-Method") != ""
}

// preflight answers a preflight with 204: with the allow headers for an
// allowed origin, with none for another (the browser then refuses to send
// the request).
func (c *CORS) preflight(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Add("Vary", "Origin")
	if allow := c.allowOrigin(r.Header.Get("Origin")); allow != "" {
		h.Set("Access-Control-Allow-Origin", allow)
		h.Set("Access-Control-Allow-Methods", strings.Join(c.Methods, ","))
		h.Set("Access-Control-Allow-Headers", strings.ToLower(strings.Join(c.AllowHeaders, ",")))
		h.Set("Access-Control-Max-Age", strconv.Itoa(int(c.MaxAge.Seconds())))
	}
	w.WriteHeader(http.StatusNoContent)
}

// corsWriter sets the CORS headers of a response as it is written,
// replacing any the handler set.
type corsWriter struct {
	http.ResponseWriter
	allow   string // Access-Control-Allow-Origin, "" for none
	expose  string
	written bool
}

func (c *CORS) writer(w http.ResponseWriter, r *http.Request) http.ResponseWriter {
	if c == nil {
		return w
	}
	return &corsWriter{ResponseWriter: w, allow: c.allowOrigin(r.Header.Get("Origin")), expose: strings.Join(c.ExposeHeaders, ",")}
}

func (w *corsWriter) WriteHeader(status int) {
	if !w.written {
		w.written = true
		h := w.Header()
		for name := range h {
			if strings.HasPrefix(strings.ToLower(name), "access-control-") {
				delete(h, name)
			}
		}
		h.Add("Vary", "Origin")
		if w.allow != "" {
			h.Set("Access-Control-Allow-Origin", w.allow)
			h.Set("Access-Control-Expose-Headers", w.expose)
		}
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *corsWriter) Write(b []byte) (int, error) {
	if !w.written {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}
