package policy

import (
	"strings"
	"unicode/utf8"
)

// Policy is the statements of one role, evaluated as IAM evaluates an
// identity-based policy: a call is allowed when some Allow statement
// matches it and no Deny statement does.
type Policy []Statement

// Decision is the outcome of evaluating a call.
type Decision int

// Decisions: no statement allows the call (IAM's implicit deny), a Deny
// statement matches it, or an Allow statement does and no Deny.
const (
	ImplicitDeny Decision = iota
	ExplicitDeny
	Allow
)

func (d Decision) String() string {
	switch d {
	case Allow:
		return "allow"
	case ExplicitDeny:
		return "explicit deny"
	}
	return "implicit deny"
}

// Decide evaluates action (service:Operation) on resource (an ARN, or "*"
// for actions that name none) with the call's condition keys (nil when it
// has none): a statement applies when its action, resource and every
// condition match.
func (p Policy) Decide(action, resource string, keys Keys) Decision {
	d := ImplicitDeny
	for _, s := range p {
		if !s.matches(action, resource) || !s.holds(keys) {
			continue
		}
		switch {
		case strings.EqualFold(s.Effect, "Deny"):
			return ExplicitDeny
		case strings.EqualFold(s.Effect, "Allow"):
			d = Allow
		}
	}
	return d
}

// Allows reports whether the policy allows action on resource with keys:
// an Allow statement applies and no Deny statement does.
func (p Policy) Allows(action, resource string, keys Keys) bool {
	return p.Decide(action, resource, keys) == Allow
}

func (s Statement) holds(keys Keys) bool {
	for _, c := range s.Conditions {
		if !c.holds(keys) {
			return false
		}
	}
	return true
}

func (s Statement) matches(action, resource string) bool {
	return anyMatch(s.Actions, strings.ToLower(action), strings.ToLower) && anyMatch(s.Resources, resource, nil)
}

func anyMatch(patterns []string, value string, fold func(string) string) bool {
	for _, p := range patterns {
		if fold != nil {
			p = fold(p)
		}
		if Match(p, value) {
			return true
		}
	}
	return false
}

// Match reports whether value matches pattern, where * stands for any run
// of characters (slashes and colons included) and ? for exactly one, as in
// IAM's Action and Resource elements. The comparison is case-sensitive.
func Match(pattern, value string) bool {
	// Iterative glob with one backtrack point: the last * seen.
	var p, v int
	star, retry := -1, 0
	for v < len(value) {
		if p < len(pattern) {
			switch c := pattern[p]; c {
			case '*':
				star, retry = p, v
				p++
				continue
			case '?':
				_, n := utf8.DecodeRuneInString(value[v:])
				p, v = p+1, v+n
				continue
			default:
				if c == value[v] {
					p, v = p+1, v+1
					continue
				}
			}
		}
		if star < 0 {
			return false
		}
		// Let the last * take one more character and try again.
		_, n := utf8.DecodeRuneInString(value[retry:])
		retry += n
		p, v = star+1, retry
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}
