// Package authorizer emulates API Gateway's two authorizers for the local
// stack: the HTTP API JWT authorizer (with a local identity provider that
// mints RS256 tokens and publishes its JWKS) and IAM authorization (SigV4
// for execute-api). Each checks what its AWS counterpart checks and yields
// the requestContext.authorizer the Lambda would receive.
package authorizer

import (
	"errors"
	"net/http"

	"github.com/aws/aws-lambda-go/events"
)

// Description is what a successful authorization adds to the event.
type Description = events.APIGatewayV2HTTPRequestContextAuthorizerDescription

// Authorizer decides whether a request may reach its route.
type Authorizer interface {
	Authorize(r *http.Request, body []byte) (*Description, error)
}

// ErrUnauthorized is a missing or invalid token (API Gateway answers 401).
var ErrUnauthorized = errors.New("unauthorized")

// ErrForbidden is a missing or invalid signature (API Gateway answers 403).
var ErrForbidden = errors.New("forbidden")

// Denied says why a request was refused. It wraps ErrUnauthorized or
// ErrForbidden.
type Denied struct {
	Kind   error
	Reason string
	// Challenge is the WWW-Authenticate value API Gateway would send, if any.
	Challenge string
}

func (d *Denied) Error() string { return d.Kind.Error() + ": " + d.Reason }
func (d *Denied) Unwrap() error { return d.Kind }
