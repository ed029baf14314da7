package client

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/rallyhq/rally/shared/errs"
)

// FieldError names one invalid input of a 400 answer.
type FieldError = errs.FieldError

// Error is an answer of Rally (or of API Gateway in front of it) that is
// not a success: its RFC 9457 problem document. Callers take it with
// errors.As:
//
//	var e *client.Error
//	if errors.As(err, &e) && e.Status == http.StatusConflict { ... }
type Error struct {
	// Type, Title, Status, Detail and Errors are the problem document's.
	// An answer without one (API Gateway's own 403 or 429) has Status
	// and a Title and Detail from it.
	Type   string       `json:"type"`
	Title  string       `json:"title"`
	Status int          `json:"status"`
	Detail string       `json:"detail"`
	Errors []FieldError `json:"errors,omitempty"`

	// RetryAfter is the wait the answer asked for (Retry-After), 0 when
	// it named none.
	RetryAfter time.Duration `json:"-"`
	// Method and Path are the request's.
	Method string `json:"-"`
	Path   string `json:"-"`
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "rally: %s %s: %d %s", e.Method, e.Path, e.Status, e.Title)
	if e.Detail != "" && e.Detail != e.Title {
		b.WriteString(": " + e.Detail)
	}
	for i, f := range e.Errors {
		if i == 0 {
			b.WriteString(" (")
		} else {
			b.WriteString("; ")
		}
		b.WriteString(f.Field + ": " + f.Message)
		if i == len(e.Errors)-1 {
			b.WriteString(")")
		}
	}
	return b.String()
}

// Field returns the message of the field error naming field, if any.
func (e *Error) Field(field string) (string, bool) {
	for _, f := range e.Errors {
		if f.Field == field {
			return f.Message, true
		}
	}
	return "", false
}

// errorOf reads a failed answer: a problem document when it is one, else
// what API Gateway says ({"message": "..."}) or the status alone.
func errorOf(method, path string, resp *http.Response, body []byte, retryAfter time.Duration) *Error {
	e := &Error{}
	if err := json.Unmarshal(body, e); err != nil || e.Status == 0 {
		var gateway struct {
			Message string `json:"message"`
		}
		_ = json.Unmarshal(body, &gateway)
		e = &Error{Detail: gateway.Message}
	}
	e.Status = resp.StatusCode
	if e.Title == "" {
		e.Title = http.StatusText(resp.StatusCode)
	}
	if e.Detail == "" {
		e.Detail = e.Title
	}
	e.RetryAfter, e.Method, e.Path = retryAfter, method, path
	return e
}
