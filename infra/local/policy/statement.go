// Package policy checks, in the local stack, an AWS call against the IAM
// statements the synthesized template gives a function's role.
package policy

// Statement is one IAM policy statement with its resources resolved to
// local ARNs.
type Statement struct {
	Effect    string   // "Allow" or "Deny"
	Actions   []string // e.g. "dynamodb:GetItem", "dynamodb:*"
	Resources []string // ARNs, possibly with * wildcards
}
