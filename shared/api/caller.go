package api

import (
	"strings"

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

// ServiceRoles is the allow-list of the IAM principals that may call a
// service route: the principals of the roles the route admits
// (routes.Route.Role). IAM authorization lets in any principal of the
// account whose own policies allow execute-api:Invoke; only these get past
// Rally.
// An entry is a role ARN (arn:aws:iam::ACCOUNT:role/[path/]NAME), which
// every session of the role matches (a caller described as
// arn:aws:sts::ACCOUNT:assumed-role/NAME/SESSION), or any other ARN (a
// user's), matched exactly.
type ServiceRoles []string

// Allows reports whether the caller described by arn is on the list.
func (s ServiceRoles) Allows(arn string) bool {
	if arn == "" {
		return false
	}
	session, isSession := assumedRole(arn)
	for _, allowed := range s {
		if allowed == arn {
			return true
		}
		if role, ok := roleOf(allowed); ok && isSession && role == session {
			return true
		}
	}
	return false
}

// Principal is who a service caller acts as: an assumed role's sessions
// are the role (arn:aws:sts::ACCOUNT:assumed-role/NAME, without the
// session); any other ARN is itself. Budgets are kept per principal.
func Principal(arn string) string {
	if _, ok := assumedRole(arn); ok {
		return arn[:strings.LastIndex(arn, "/")]
	}
	return arn
}

// principal names a role within its partition and account.
type principal struct{ partition, account, name string }

// assumedRole reads arn:PARTITION:sts::ACCOUNT:assumed-role/NAME/SESSION.
func assumedRole(arn string) (principal, bool) {
	parts := strings.SplitN(arn, ":", 6)
	if len(parts) != 6 || parts[0] != "arn" || parts[2] != "sts" {
		return principal{}, false
	}
	res := strings.Split(parts[5], "/")
	if len(res) != 3 || res[0] != "assumed-role" || res[1] == "" || res[2] == "" {
		return principal{}, false
	}
	return principal{parts[1], parts[4], res[1]}, true
}

// roleOf reads arn:PARTITION:iam::ACCOUNT:role/[PATH/]NAME; a session's
// ARN carries the name without the path.
func roleOf(arn string) (principal, bool) {
	parts := strings.SplitN(arn, ":", 6)
	if len(parts) != 6 || parts[0] != "arn" || parts[2] != "iam" || !strings.HasPrefix(parts[5], "role/") {
		return principal{}, false
	}
	name := parts[5][strings.LastIndex(parts[5], "/")+1:]
	if name == "" {
		return principal{}, false
	}
	return principal{parts[1], parts[4], name}, true
}

// Caller returns the authenticated caller. Player routes carry JWT claims,
// service routes an IAM description, whose principal must be on the
// request's ServiceRoles (403 otherwise); anything else is
// unauthenticated.
func (r *Request) Caller() (Caller, error) {
	auth := r.Event.RequestContext.Authorizer
	if auth != nil && auth.IAM != nil {
		if !r.ServiceRoles.Allows(auth.IAM.UserARN) {
			return Caller{}, errs.New(errs.Forbidden, "this IAM principal may not call this route: "+
				"sign as a role on its allow-list (the operator's for operations, the game server's or the operator's for game routes)")
		}
		return Caller{Service: auth.IAM.UserARN}, nil
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

// Subject reads the user a route about one user (user_id in the path) is
// asked for: a service may name anyone, a player only themselves (a 403
// whose detail is refusal otherwise).
func (r *Request) Subject(refusal string) (string, error) {
	user := r.Path("user_id")
	var f errs.Fields
	CheckID(&f, "user_id", user)
	if err := f.Err(); err != nil {
		return "", err
	}
	c, err := r.Caller()
	if err != nil {
		return "", err
	}
	if c.IsService() {
		return user, nil
	}
	player, err := r.Player()
	if err != nil {
		return "", err
	}
	if player != user {
		return "", errs.New(errs.Forbidden, "%s", refusal)
	}
	return user, nil
}
