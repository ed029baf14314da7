package api

import (
	"github.com/rallyhq/rally/shared/errs"
)

// Caller is who made a request, as established by API Gateway's authorizer.
type Caller struct {
	// Player is the JWT subject; empty for service callers.
	Player string
	// Service is the IAM caller (user or role ARN); empty for players.
	Service string
}

// IsService reports whether an IAM-signed service made the call.
func (c Caller) IsService() bool { return c.Service != "" }

// Caller returns the authenticated caller. Player routes carry JWT claims,
// service routes an IAM description; anything else is unauthenticated.
func (r *Request) Caller() (Caller, error) {
	auth := r.Event.RequestContext.Authorizer
	if auth != nil && auth.IAM != nil {
		id := auth.IAM.UserARN
		if id == "" {
			id = auth.IAM.CallerID
		}
		if id == "" {
			id = auth.IAM.AccessKey
		}
		if id != "" {
			return Caller{Service: id}, nil
		}
	}
	if auth != nil && auth.JWT != nil {
		if sub := auth.JWT.Claims["sub"]; sub != "" {
			return Caller{Player: sub}, nil
		}
	}
	return Caller{}, errs.New(errs.Unauthenticated, "a valid bearer token is required")
}

// Player returns the calling player's id, which must be a valid Rally id.
func (r *Request) Player() (string, error) {
	c, err := r.Caller()
	if err != nil {
		return "", err
	}
	if c.Player == "" {
		return "", errs.New(errs.Forbidden, "this route is for players")
	}
	if !ValidID(c.Player) {
		return "", errs.New(errs.Forbidden, "the token's subject is not a valid player id")
	}
	return c.Player, nil
}

// Service returns the calling service (its IAM identity): service routes
// refuse a player's token even where the gateway let one through.
func (r *Request) Service() (string, error) {
	c, err := r.Caller()
	if err != nil {
		return "", err
	}
	if !c.IsService() {
		return "", errs.New(errs.Forbidden, "this route is for services")
	}
	return c.Service, nil
}
