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
			if got := scoresRole.Decide(c.action, c.resource); got != c.want {
				t.Errorf("%s on %s: %s, want %s", c.action, c.resource, got, c.want)
			}
			if got := scoresRole.Allows(c.action, c.resource); got != (c.want == policy.Allow) {
				t.Errorf("Allows(%s, %s) = %v", c.action, c.resource, got)
			}
		})
	}
}

func TestAnEmptyPolicyAllowsNothing(t *testing.T) {
	if (policy.Policy{}).Allows("dynamodb:GetItem", table+"Scores") {
		t.Error("a role with no statements was allowed a read")
	}
	noResources := policy.Policy{{Effect: "Allow", Actions: []string{"*"}}}
	if noResources.Allows("dynamodb:GetItem", table+"Scores") {
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
