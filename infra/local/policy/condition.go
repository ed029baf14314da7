package policy

import (
	"fmt"
	"slices"
	"strings"
)

// Keys are a call's condition keys and their values, as IAM sees the
// request: "dynamodb:Attributes" → the attribute names it touches. A key
// the call does not have is absent.
type Keys map[string][]string

// CheckedKeys are the condition keys the local stack gives the calls it
// checks (infra/local/awsapi sets them on DynamoDB item calls). A
// statement conditioned on any other key cannot be checked locally:
// infra/local/template refuses it rather than drop the condition.
var CheckedKeys = []string{"dynamodb:Attributes", "dynamodb:Select", "dynamodb:ReturnValues"}

// operators are the condition operators evaluated here (each also with
// IfExists, and the String ones under ForAllValues: or ForAnyValue:),
// each with what it asks of one request value given the statement's.
var operators = map[string]func(value string, want []string) bool{
	"StringEquals":              func(v string, w []string) bool { return slices.Contains(w, v) },
	"StringNotEquals":           func(v string, w []string) bool { return !slices.Contains(w, v) },
	"StringEqualsIgnoreCase":    func(v string, w []string) bool { return slices.ContainsFunc(w, eqFold(v)) },
	"StringNotEqualsIgnoreCase": func(v string, w []string) bool { return !slices.ContainsFunc(w, eqFold(v)) },
	"StringLike":                func(v string, w []string) bool { return slices.ContainsFunc(w, like(v)) },
	"StringNotLike":             func(v string, w []string) bool { return !slices.ContainsFunc(w, like(v)) },
	"Bool":                      func(v string, w []string) bool { return slices.ContainsFunc(w, eqFold(v)) },
}

func eqFold(v string) func(string) bool {
	return func(w string) bool { return strings.EqualFold(v, w) }
}
func like(v string) func(string) bool { return func(w string) bool { return Match(w, v) } }

// parse splits an operator into its set qualifier (ForAllValues,
// ForAnyValue or ""), its base and whether it ends in IfExists.
func parse(operator string) (set, base string, ifExists bool) {
	if q, rest, ok := strings.Cut(operator, ":"); ok {
		set, operator = q, rest
	}
	base, ifExists = strings.CutSuffix(operator, "IfExists")
	return set, base, ifExists
}

// Check reports whether c can be evaluated here: a known operator on a
// key the local stack sets.
func (c Condition) Check() error {
	set, base, ifExists := parse(c.Operator)
	switch {
	case set != "" && set != "ForAllValues" && set != "ForAnyValue":
		return fmt.Errorf("condition operator %s is not supported locally", c.Operator)
	case base == "Null" && set == "" && !ifExists:
	case operators[base] == nil || (set != "" && !strings.HasPrefix(base, "String")):
		return fmt.Errorf("condition operator %s is not supported locally", c.Operator)
	}
	if !slices.ContainsFunc(CheckedKeys, func(k string) bool { return strings.EqualFold(k, c.Key) }) {
		return fmt.Errorf("condition key %s is not checked locally (only %s are)", c.Key, strings.Join(CheckedKeys, ", "))
	}
	return nil
}

// holds evaluates c on a call's keys as IAM does: a missing key fails
// a plain operator, passes one ending in IfExists, passes ForAllValues
// (every one of no values matches) and fails ForAnyValue; a set
// operator asks every (ForAllValues) or some (ForAnyValue) value of the
// key to match, a plain one some value.
func (c Condition) holds(keys Keys) bool {
	values, present := lookup(keys, c.Key)
	set, base, ifExists := parse(c.Operator)
	if base == "Null" {
		// Null: true asks that the key be absent, false that it be there.
		return slices.ContainsFunc(c.Values, eqFold(fmt.Sprint(!present)))
	}
	test := operators[base]
	if test == nil {
		return false // Check refuses it first; never let it allow
	}
	if !present {
		return ifExists || set == "ForAllValues"
	}
	match := func(v string) bool { return test(v, c.Values) }
	if set == "ForAllValues" {
		for _, v := range values {
			if !match(v) {
				return false
			}
		}
		return true
	}
	return slices.ContainsFunc(values, match)
}

// lookup finds key in keys; condition keys are case-insensitive.
func lookup(keys Keys, key string) ([]string, bool) {
	for k, v := range keys {
		if strings.EqualFold(k, key) {
			return v, true
		}
	}
	return nil, false
}
