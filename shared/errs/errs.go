// Package errs owns Rally's domain error kinds. Feature packages return these;
// the HTTP layer (shared/api) maps each kind to a status in exactly one place.
package errs

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Kind classifies a failure by what the caller can do about it.
type Kind int

const (
	// Internal is an unexpected failure of Rally itself.
	Internal Kind = iota
	// Invalid means the request is malformed; Fields says where.
	Invalid
	// Unauthenticated means no or a bad credential.
	Unauthenticated
	// Forbidden means the caller may not do this.
	Forbidden
	// NotFound means the resource does not exist.
	NotFound
	// Conflict means the request conflicts with the current state.
	Conflict
	// KeyReused means an Idempotency-Key was reused with a different request.
	KeyReused
	// TooLarge means the request body exceeds the limit.
	TooLarge
	// RateLimited means the caller must slow down; RetryAfter says for how long.
	RateLimited
	// Unavailable means the source of truth cannot be reached.
	Unavailable
)

// FieldError names one invalid input.
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// Error is a classified failure with a message safe to show to the caller.
type Error struct {
	Kind       Kind
	Detail     string
	Fields     []FieldError
	RetryAfter time.Duration
	// Specific, when set, is the slug of a problem type more specific
	// than the kind's (one of Specifics).
	Specific string
	Err      error // the cause, for logs; never shown to callers
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Detail + ": " + e.Err.Error()
	}
	return e.Detail
}

func (e *Error) Unwrap() error { return e.Err }

// KindOf returns the kind of the first *Error in err's chain, or Internal.
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return Internal
}

// New returns an error of the given kind with a formatted detail.
func New(kind Kind, format string, args ...any) *Error {
	return &Error{Kind: kind, Detail: fmt.Sprintf(format, args...)}
}

// Wrap classifies a cause; the detail is what callers see.
func Wrap(kind Kind, err error, detail string) *Error {
	return &Error{Kind: kind, Detail: detail, Err: err}
}

// Specific is a problem a caller tells apart from the others of its kind
// by its type (urn:rally:problem:<Slug>); the API answers it with its
// kind's status. Each is declared here, once.
type Specific struct {
	Kind  Kind
	Slug  string
	Title string
}

// Specific problems.
var (
	// Erased: the user was erased after the request's subject data was
	// asked for (an export of an erased user).
	Erased = Specific{Kind: Conflict, Slug: "erased", Title: "User erased"}
	// ErasurePending: the user's erasure is under way.
	ErasurePending = Specific{Kind: Conflict, Slug: "erasure-pending", Title: "Erasure pending"}
	// TooOld: a match that happened before the replay horizon, when its
	// id may be forgotten and a replay would count again.
	TooOld = Specific{Kind: Conflict, Slug: "too-old", Title: "Too old"}
)

// Specifics lists every specific problem.
func Specifics() []Specific { return []Specific{Erased, ErasurePending, TooOld} }

// New returns an error of s with a formatted detail.
func (s Specific) New(format string, args ...any) *Error {
	return &Error{Kind: s.Kind, Specific: s.Slug, Detail: fmt.Sprintf(format, args...)}
}

// Field returns an Invalid error for one field.
func Field(field, message string) *Error {
	return Fields{{Field: field, Message: message}}.Err().(*Error)
}

// Fields collects field errors; Err returns nil when there are none.
type Fields []FieldError

// Add records a field error.
func (f *Fields) Add(field, message string) {
	*f = append(*f, FieldError{Field: field, Message: message})
}

// Err returns an Invalid error holding every recorded field error, or nil.
// Its detail says what is wrong where ("limit: must be an integer from 1
// to 100; window: must be one of 24h, 7d, all"), so a caller reading only
// the detail knows what to fix.
func (f Fields) Err() error {
	if len(f) == 0 {
		return nil
	}
	parts := make([]string, len(f))
	for i, fe := range f {
		parts[i] = fe.Field + ": " + fe.Message
	}
	return &Error{Kind: Invalid, Detail: strings.Join(parts, "; "), Fields: f}
}

// Is reports whether err is an *Error of the given kind.
func Is(err error, kind Kind) bool {
	var e *Error
	return errors.As(err, &e) && e.Kind == kind
}
