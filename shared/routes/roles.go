package routes

import "slices"

// Role is an IAM role that calls service routes. Each service route
// declares the least role that may call it (Route.Role): the IAM policy
// the stack writes for each role, and the allow-list each function checks
// (RALLY_SERVICE_ROLES), both come from that declaration.
type Role string

// Roles that call service routes. Processors call no route.
const (
	// GameServer is what a studio's game servers assume: the game routes
	// (board definitions, scores, match activity, games, profiles,
	// friends) and nothing an operator alone may do.
	GameServer Role = "game-server"
	// Operator is what an operating team assumes: every service route,
	// the operator-only ones included (jobs, parked batches, health,
	// bans, erasures, score removal).
	Operator Role = "operator"
)

// Roles lists every role, the game server first.
func Roles() []Role { return []Role{GameServer, Operator} }

// Admits reports whether role may call r: a service route admits the role
// it declares and the operator, who may call every service route; a player
// route admits no role, and a service route that declares none admits
// nobody.
func (r Route) Admits(role Role) bool {
	if r.Auth != Service || !slices.Contains(Roles(), r.Role) {
		return false
	}
	return role == r.Role || role == Operator
}

// Admitted lists the roles that may call r, in the order of Roles.
func (r Route) Admitted() []Role {
	var out []Role
	for _, role := range Roles() {
		if r.Admits(role) {
			out = append(out, role)
		}
	}
	return out
}

// AdmittedBy lists the roles the function named function admits: those
// its service routes among rs admit, in the order of Roles. A function's
// service routes admit the same roles (TestAFunctionsServiceRoutesAdmitTheSameRoles),
// so one allow-list per function is each route's.
func AdmittedBy(rs []Route, function string) []Role {
	var out []Role
	for _, role := range Roles() {
		if slices.ContainsFunc(rs, func(r Route) bool { return r.Function == function && r.Admits(role) }) {
			out = append(out, role)
		}
	}
	return out
}

// Principals says who acts as each role: role ARNs (any session of one) or
// user ARNs, as api.ServiceRoles matches them.
type Principals map[Role][]string

// Of lists the principals of roles, each once, in the order given.
func (p Principals) Of(roles []Role) []string {
	var out []string
	for _, role := range roles {
		for _, arn := range p[role] {
			if !slices.Contains(out, arn) {
				out = append(out, arn)
			}
		}
	}
	return out
}
