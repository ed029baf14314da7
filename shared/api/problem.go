package api

import (
	"errors"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/rallyhq/rally/shared/errs"
)

// ProblemContentType is the media type of every error response (RFC 9457).
const ProblemContentType = "application/problem+json"

// Problem is an RFC 9457 problem document.
type Problem struct {
	Type   string            `json:"type"`
	Title  string            `json:"title"`
	Status int               `json:"status"`
	Detail string            `json:"detail"`
	Errors []errs.FieldError `json:"errors,omitempty"`
}

type problemKind struct {
	status int
	slug   string
	title  string
}

// ProblemTypePrefix begins every problem type URI.
const ProblemTypePrefix = "urn:rally:problem:"

// kinds is the one place a domain error kind becomes an HTTP status.
var kinds = map[errs.Kind]problemKind{
	errs.Invalid:         {http.StatusBadRequest, "invalid-request", "Invalid request"},
	errs.Unauthenticated: {http.StatusUnauthorized, "unauthenticated", "Unauthenticated"},
	errs.Forbidden:       {http.StatusForbidden, "forbidden", "Forbidden"},
	errs.NotFound:        {http.StatusNotFound, "not-found", "Not found"},
	errs.Conflict:        {http.StatusConflict, "conflict", "Conflict"},
	errs.TooLarge:        {http.StatusRequestEntityTooLarge, "too-large", "Request body too large"},
	errs.KeyReused:       {http.StatusUnprocessableEntity, "idempotency-key-reused", "Idempotency-Key reused"},
	errs.RateLimited:     {http.StatusTooManyRequests, "rate-limited", "Too many requests"},
	errs.Unavailable:     {http.StatusServiceUnavailable, "unavailable", "Service unavailable"},
	errs.Internal:        {http.StatusInternalServerError, "internal", "Internal error"},
}

// ProblemType is one kind of problem the API answers with.
type ProblemType struct {
	URI    string // the problem's "type"
	Status int
	Title  string
}

// ProblemTypes lists every problem type the API answers with, by status
// (the OpenAPI document and the README list them with their meaning).
func ProblemTypes() []ProblemType {
	out := make([]ProblemType, 0, len(kinds))
	for _, k := range kinds {
		out = append(out, ProblemType{URI: ProblemTypePrefix + k.slug, Status: k.status, Title: k.title})
	}
	for _, sp := range errs.Specifics() {
		out = append(out, ProblemType{URI: ProblemTypePrefix + sp.Slug, Status: kinds[sp.Kind].status, Title: sp.Title})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Status < out[j].Status })
	return out
}

// ProblemFor renders err as a problem response. Internal errors never leak
// their cause.
func ProblemFor(err error) Response {
	kind := errs.KindOf(err)
	pk := kinds[kind]
	p := Problem{Type: ProblemTypePrefix + pk.slug, Title: pk.title, Status: pk.status}
	headers := map[string]string{"Content-Type": ProblemContentType}
	var e *errs.Error
	if errors.As(err, &e) {
		if kind != errs.Internal {
			p.Detail = e.Detail
			p.Errors = e.Fields
		}
		for _, sp := range errs.Specifics() {
			if sp.Slug == e.Specific && sp.Kind == kind {
				p.Type, p.Title = ProblemTypePrefix+sp.Slug, sp.Title
			}
		}
		if e.RetryAfter > 0 {
			// Whole seconds, rounded up: never earlier than the budget allows.
			secs := max(1, int((e.RetryAfter+time.Second-1)/time.Second))
			headers["Retry-After"] = strconv.Itoa(secs)
		}
	}
	if p.Detail == "" {
		p.Detail = pk.title
	}
	return Response{Status: pk.status, Body: p, Headers: headers}
}
