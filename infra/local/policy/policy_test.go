package policy_test

import (
	"testing"

	"github.com/rallyhq/rally/infra/local/policy"
)

const table = "arn:aws:dynamodb:us-east-1:000000000000:table/"

// scoresRole is shaped like a processor's role: reads and writes on one
// table and its indexes, reads of another table's stream, one action
// denied outright.
var scoresRole = policy.Policy{
	{Effect: "Allow", Actions: []string{"dynamodb:GetItem", "dynamodb:Query", "dynamodb:PutItem", "dynamodb:UpdateItem"},
		Resources: []string{table + "Scores", table + "Scores/index/*"}},
	{Effect: "Allow", Actions: []string{"dynamodb:GetRecords", "dynamodb:GetShardIterator", "dynamodb:DescribeStream"},
		Resources: []string{table + "ScoreEvents/stream/*"}},
	{Effect: "Allow", Actions: []string{"dynamodb:ListStreams"}, Resources: []string{"*"}},
	{Effect: "Allow", Actions: []string{"dynamodb:Batch*"}, Resources: []string{table + "Counters"}},
	{Effect: "Allow", Actions: []string{"dynamodb:*"}, Resources: []string{table + "Scratch-?"}},
	{Effect: "Deny", Actions: []string{"dynamodb:DeleteItem"}, Resources: []string{"*"}},
	{Effect: "Allow", Actions: []string{"secretsmanager:GetSecretValue"},
		Resources: []string{"arn:aws:secretsmanager:us-east-1:000000000000:secret:rally-cursor-*"}},
}

func TestAPolicyAllowsOnlyWhatAnAllowStatementMatchesAndNoDenyDoes(t *testing.T) {
	for _, c := range []struct {
		name, action, resource string
		want                   policy.Decision
	}{
		{"granted action on the granted table", "dynamodb:GetItem", table + "Scores", policy.Allow},
		{"action names are case-insensitive", "DynamoDB:getitem", table + "Scores", policy.Allow},
		{"an action not in the statement", "dynamodb:Scan", table + "Scores", policy.ImplicitDeny},
		{"the same action on another table", "dynamodb:GetItem", table + "Players", policy.ImplicitDeny},
		{"a table whose name only starts like the granted one", "dynamodb:GetItem", table + "ScoresArchive", policy.ImplicitDeny},
		{"resource ARNs are case-sensitive", "dynamodb:GetItem", table + "scores", policy.ImplicitDeny},
		{"an index of the granted table", "dynamodb:Query", table + "Scores/index/by-board", policy.Allow},
		{"an index of a table granted without its indexes", "dynamodb:BatchGetItem", table + "Counters/index/by-key", policy.ImplicitDeny},
		{"the table itself is not its index pattern", "dynamodb:Query", table + "ScoreEvents/index/by-user", policy.ImplicitDeny},
		{"the granted table's stream", "dynamodb:GetRecords", table + "ScoreEvents/stream/2026-11-24T20:00:00.000", policy.Allow},
		{"a stream read on the table, not its stream", "dynamodb:GetRecords", table + "ScoreEvents", policy.ImplicitDeny},
		{"another table's stream", "dynamodb:GetShardIterator", table + "Scores/stream/2026-11-24T20:00:00.000", policy.ImplicitDeny},
		{"an action granted on *", "dynamodb:ListStreams", "*", policy.Allow},
		{"an action wildcard", "dynamodb:BatchWriteItem", table + "Counters", policy.Allow},
		{"an action wildcard does not cross the prefix", "dynamodb:GetItem", table + "Counters", policy.ImplicitDeny},
		{"? is one character", "dynamodb:PutItem", table + "Scratch-1", policy.Allow},
		{"? is not zero characters", "dynamodb:PutItem", table + "Scratch-", policy.ImplicitDeny},
		{"? is not two characters", "dynamodb:PutItem", table + "Scratch-12", policy.ImplicitDeny},
		{"a Deny wins over an Allow that matches", "dynamodb:DeleteItem", table + "Scratch-1", policy.ExplicitDeny},
		{"a Deny applies where nothing allows", "dynamodb:DeleteItem", table + "Players", policy.ExplicitDeny},
		{"another service's action on a matching ARN", "secretsmanager:GetSecretValue",
			"arn:aws:secretsmanager:us-east-1:000000000000:secret:rally-cursor-AbC123", policy.Allow},
		{"a service prefix is part of the action", "dynamodb:GetSecretValue",
			"arn:aws:secretsmanager:us-east-1:000000000000:secret:rally-cursor-AbC123", policy.ImplicitDeny},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := scoresRole.Decide(c.action, c.resource, nil); got != c.want {
				t.Errorf("%s on %s: %s, want %s", c.action, c.resource, got, c.want)
			}
			if got := scoresRole.Allows(c.action, c.resource, nil); got != (c.want == policy.Allow) {
				t.Errorf("Allows(%s, %s) = %v", c.action, c.resource, got)
			}
		})
	}
}

func TestAnEmptyPolicyAllowsNothing(t *testing.T) {
	if (policy.Policy{}).Allows("dynamodb:GetItem", table+"Scores", nil) {
		t.Error("a role with no statements was allowed a read")
	}
	noResources := policy.Policy{{Effect: "Allow", Actions: []string{"*"}}}
	if noResources.Allows("dynamodb:GetItem", table+"Scores", nil) {
		t.Error("a statement with no resources allowed a read")
	}
}

func TestWildcardsMatchAcrossSlashesAndColonsAndBacktrack(t *testing.T) {
	for _, c := range []struct {
		pattern, value string
		want           bool
	}{
		{"*", "", true},
		{"*", "arn:aws:dynamodb:us-east-1:1:table/T/index/I", true},
		{"arn:aws:dynamodb:*:*:table/T", "arn:aws:dynamodb:us-east-1:000000000000:table/T", true},
		{"arn:aws:dynamodb:*:table/T", "arn:aws:dynamodb:us-east-1:000000000000:table/T", true},
		{"arn:*/index/*", "arn:aws:dynamodb:us-east-1:0:table/T/index/I", true},
		{"arn:*/index/*", "arn:aws:dynamodb:us-east-1:0:table/T", false},
		{"a*b*c", "aXbYbZc", true},
		{"a*b*c", "aXbYbZ", false},
		{"a?c", "abc", true},
		{"a?c", "aéc", true},
		{"a?c", "ac", false},
		{"", "", true},
		{"", "x", false},
		{"abc", "ab", false},
	} {
		if got := policy.Match(c.pattern, c.value); got != c.want {
			t.Errorf("Match(%q, %q) = %v, want %v", c.pattern, c.value, got, c.want)
		}
	}
}

// secretsOnly is shaped like the analytics shipper's grant on Players: two
// item actions, only on the key and one attribute, reads projecting them
// and updates returning nothing else.
var secretsOnly = policy.Policy{{
	Effect: "Allow", Actions: []string{"dynamodb:GetItem", "dynamodb:UpdateItem"}, Resources: []string{table + "Players"},
	Conditions: []policy.Condition{
		{Operator: "ForAllValues:StringEquals", Key: "dynamodb:Attributes", Values: []string{"player_id", "analytics_secret"}},
		{Operator: "StringEqualsIfExists", Key: "dynamodb:Select", Values: []string{"SPECIFIC_ATTRIBUTES"}},
		{Operator: "StringEqualsIfExists", Key: "dynamodb:ReturnValues", Values: []string{"NONE", "UPDATED_OLD", "UPDATED_NEW"}},
	},
}}

func TestAStatementAppliesOnlyWhereItsConditionsHold(t *testing.T) {
	attrs := func(names ...string) []string { return names }
	for _, c := range []struct {
		name   string
		action string
		keys   policy.Keys
		want   policy.Decision
	}{
		{"a read projecting the granted attribute", "dynamodb:GetItem",
			policy.Keys{"dynamodb:Attributes": attrs("player_id", "analytics_secret"), "dynamodb:Select": {"SPECIFIC_ATTRIBUTES"}}, policy.Allow},
		{"a read projecting another attribute too", "dynamodb:GetItem",
			policy.Keys{"dynamodb:Attributes": attrs("player_id", "analytics_secret", "region"), "dynamodb:Select": {"SPECIFIC_ATTRIBUTES"}}, policy.ImplicitDeny},
		{"a read of the whole item", "dynamodb:GetItem",
			policy.Keys{"dynamodb:Attributes": attrs("player_id"), "dynamodb:Select": {"ALL_ATTRIBUTES"}}, policy.ImplicitDeny},
		{"an update of the granted attribute", "dynamodb:UpdateItem",
			policy.Keys{"dynamodb:Attributes": attrs("player_id", "analytics_secret")}, policy.Allow},
		{"an update returning what it left", "dynamodb:UpdateItem",
			policy.Keys{"dynamodb:Attributes": attrs("player_id", "analytics_secret"), "dynamodb:ReturnValues": {"UPDATED_OLD"}}, policy.Allow},
		{"an update returning the whole item", "dynamodb:UpdateItem",
			policy.Keys{"dynamodb:Attributes": attrs("player_id", "analytics_secret"), "dynamodb:ReturnValues": {"ALL_NEW"}}, policy.ImplicitDeny},
		{"an update of another attribute", "dynamodb:UpdateItem",
			policy.Keys{"dynamodb:Attributes": attrs("player_id", "display_name")}, policy.ImplicitDeny},
		{"condition keys are case-insensitive, values not", "dynamodb:UpdateItem",
			policy.Keys{"DynamoDB:attributes": attrs("player_id", "Analytics_Secret")}, policy.ImplicitDeny},
		{"an action the statement does not name", "dynamodb:PutItem",
			policy.Keys{"dynamodb:Attributes": attrs("player_id", "analytics_secret")}, policy.ImplicitDeny},
		// IAM's own rule, which is why the grant pairs the attributes
		// with Select: ForAllValues holds over no values at all.
		{"a call without the keys", "dynamodb:GetItem", nil, policy.Allow},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := secretsOnly.Decide(c.action, table+"Players", c.keys); got != c.want {
				t.Errorf("%s with %v: %s, want %s", c.action, c.keys, got, c.want)
			}
		})
	}
}

func TestConditionOperators(t *testing.T) {
	keys := policy.Keys{"dynamodb:Select": {"COUNT"}, "dynamodb:Attributes": {"a", "b"}}
	for _, c := range []struct {
		operator, key string
		values        []string
		want          bool
	}{
		{"StringEquals", "dynamodb:Select", []string{"SPECIFIC_ATTRIBUTES", "COUNT"}, true},
		{"StringEquals", "dynamodb:Select", []string{"count"}, false},
		{"StringEqualsIgnoreCase", "dynamodb:Select", []string{"count"}, true},
		{"StringNotEquals", "dynamodb:Select", []string{"COUNT"}, false},
		{"StringNotEqualsIgnoreCase", "dynamodb:Select", []string{"count"}, false},
		{"StringLike", "dynamodb:Select", []string{"CO*"}, true},
		{"StringNotLike", "dynamodb:Select", []string{"ALL_*"}, true},
		{"StringEquals", "dynamodb:ReturnValues", []string{"NONE"}, false},
		{"StringEqualsIfExists", "dynamodb:ReturnValues", []string{"NONE"}, true},
		{"ForAllValues:StringEquals", "dynamodb:Attributes", []string{"a"}, false},
		{"ForAllValues:StringLike", "dynamodb:Attributes", []string{"a", "b*"}, true},
		{"ForAnyValue:StringEquals", "dynamodb:Attributes", []string{"b", "z"}, true},
		{"ForAnyValue:StringEquals", "dynamodb:ReturnValues", []string{"NONE"}, false},
		{"ForAllValues:StringEquals", "dynamodb:ReturnValues", []string{"NONE"}, true},
		{"Null", "dynamodb:ReturnValues", []string{"true"}, true},
		{"Null", "dynamodb:Select", []string{"true"}, false},
		{"Null", "dynamodb:Select", []string{"false"}, true},
	} {
		st := policy.Statement{Effect: "Allow", Actions: []string{"*"}, Resources: []string{"*"},
			Conditions: []policy.Condition{{Operator: c.operator, Key: c.key, Values: c.values}}}
		if err := st.Conditions[0].Check(); err != nil {
			t.Errorf("%s on %s: %v", c.operator, c.key, err)
		}
		if got := (policy.Policy{st}).Allows("dynamodb:Query", table+"T", keys); got != c.want {
			t.Errorf("%s %s %v with %v: %v, want %v", c.operator, c.key, c.values, keys, got, c.want)
		}
	}
}

// A condition the local stack cannot evaluate is refused, never dropped:
// dropped, it would allow locally what AWS refuses.
func TestAConditionThatCannotBeCheckedLocallyIsRefused(t *testing.T) {
	for _, c := range []policy.Condition{
		{Operator: "StringEquals", Key: "dynamodb:LeadingKeys", Values: []string{"alice"}},
		{Operator: "StringEquals", Key: "aws:SourceVpce", Values: []string{"vpce-1"}},
		{Operator: "NumericLessThan", Key: "dynamodb:Select", Values: []string{"1"}},
		{Operator: "ForAllValues:Bool", Key: "dynamodb:Select", Values: []string{"true"}},
		{Operator: "ForSomeValues:StringEquals", Key: "dynamodb:Attributes", Values: []string{"a"}},
		{Operator: "NullIfExists", Key: "dynamodb:Select", Values: []string{"true"}},
	} {
		if err := c.Check(); err == nil {
			t.Errorf("%s on %s was accepted", c.Operator, c.Key)
		}
	}
	// Should one get through, it never allows.
	st := policy.Statement{Effect: "Allow", Actions: []string{"*"}, Resources: []string{"*"},
		Conditions: []policy.Condition{{Operator: "NumericLessThan", Key: "dynamodb:Select", Values: []string{"1"}}}}
	if (policy.Policy{st}).Allows("dynamodb:Query", table+"T", policy.Keys{"dynamodb:Select": {"0"}}) {
		t.Error("an unknown operator allowed a call")
	}
}
