package gateway

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"time"
)

type requestInfo struct {
	id       string
	route    string
	function string
}

type infoKey struct{}

// RequestID returns the id Logged assigned to the request, or "".
func RequestID(ctx context.Context) string {
	if ri, ok := ctx.Value(infoKey{}).(*requestInfo); ok {
		return ri.id
	}
	return ""
}

func setRoute(ctx context.Context, route, function string) {
	if ri, ok := ctx.Value(infoKey{}).(*requestInfo); ok {
		ri.route, ri.function = route, function
	}
}

// Logged gives every request an id (the apigw-requestid response header and
// the event's requestContext.requestId) and logs one JSON line per request
// when it completes: method, route, status, duration and request id. As in
// the stack's API access logs, an API request is logged by its route key,
// never its path, which holds user ids (/v1/users/alice/streak); the
// stack's own paths (/_local/..., /openapi.json) are logged as they are.
func Logged(log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ri := &requestInfo{id: NewRequestID()}
		w.Header().Set("Apigw-Requestid", ri.id)
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(rec, r.WithContext(context.WithValue(r.Context(), infoKey{}, ri)))
		attrs := []any{
			"method", r.Method, "status", rec.status,
			"duration_ms", float64(time.Since(start).Microseconds()) / 1000, "request_id", ri.id,
		}
		if !strings.HasPrefix(r.URL.Path, "/v1/") {
			attrs = append(attrs, "path", r.URL.Path)
		}
		if ri.route != "" {
			attrs = append(attrs, "route", ri.route, "function", ri.function)
		}
		log.InfoContext(r.Context(), "request", attrs...)
	})
}

type statusRecorder struct {
	http.ResponseWriter
	status  int
	written bool
}

func (s *statusRecorder) WriteHeader(code int) {
	if !s.written {
		s.status, s.written = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	s.written = true
	return s.ResponseWriter.Write(b)
}
