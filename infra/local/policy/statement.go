// Package policy checks, in the local stack, an AWS call against the IAM
// statements the synthesized template gives a function's role.
package policy

// Statement is one IAM policy statement with its resources resolved to
// local ARNs.
type Statement struct {
	Effect    string   // "Allow" or "Deny"
	Actions   []string // e.g. "dynamodb:GetItem", "dynamodb:*"
	Resources []string // ARNs, possibly with * wildcards
	// Conditions must all hold for the statement to apply.
	Conditions []Condition
}

// Condition is one key of a statement's Condition block under one
// operator: {"ForAllValues:StringEquals": {"dynamodb:Attributes": [...]}}
// is Condition{"ForAllValues:StringEquals", "dynamodb:Attributes", [...]}.
type Condition struct {
	Operator string
	Key      string
	Values   []string
}
