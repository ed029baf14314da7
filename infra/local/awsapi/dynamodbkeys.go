package awsapi

import (
	"encoding/json"
	"slices"
	"strings"

	"github.com/rallyhq/rally/infra/local/policy"
)

// itemRequest is what a DynamoDB item call (or one item of a batch or a
// transaction) names that IAM's fine-grained condition keys read.
type itemRequest struct {
	TableName string
	IndexName string

	Key  map[string]json.RawMessage
	Item map[string]json.RawMessage
	Keys []map[string]json.RawMessage // BatchGetItem

	ProjectionExpression     string
	UpdateExpression         string
	ConditionExpression      string
	KeyConditionExpression   string
	FilterExpression         string
	ExpressionAttributeNames map[string]string

	// The legacy parameters name attributes too.
	AttributesToGet  []string
	AttributeUpdates map[string]json.RawMessage
	Expected         map[string]json.RawMessage
	KeyConditions    map[string]json.RawMessage
	QueryFilter      map[string]json.RawMessage
	ScanFilter       map[string]json.RawMessage

	Select       string
	ReturnValues string
}

// reads are the calls that return attributes, so have a Select.
var reads = []string{"GetItem", "BatchGetItem", "Query", "Scan", "TransactGetItems"}

// conditionKeys are the condition keys IAM evaluates a DynamoDB item call
// with (op is the call, or for a transaction's item the item's own
// action):
//   - dynamodb:Attributes, every top-level attribute the request names:
//     its key, a put's item, and the attributes of its projection,
//     update, condition, key condition and filter;
//   - dynamodb:Select, the read's Select; a read that sets none is
//     SPECIFIC_ATTRIBUTES with a projection and ALL_ATTRIBUTES without,
//     so a grant on some attributes never reads whole items locally;
//   - dynamodb:ReturnValues, when the request sets it.
func conditionKeys(op string, in itemRequest) policy.Keys {
	var attrs []string
	add := func(names ...string) {
		for _, n := range names {
			if n != "" && !slices.Contains(attrs, n) {
				attrs = append(attrs, n)
			}
		}
	}
	for _, m := range append([]map[string]json.RawMessage{in.Key, in.Item, in.AttributeUpdates, in.Expected,
		in.KeyConditions, in.QueryFilter, in.ScanFilter}, in.Keys...) {
		for n := range m {
			add(n)
		}
	}
	add(in.AttributesToGet...)
	for _, expr := range []string{in.ProjectionExpression, in.UpdateExpression, in.ConditionExpression,
		in.KeyConditionExpression, in.FilterExpression} {
		add(topLevelNames(expr, in.ExpressionAttributeNames)...)
	}
	slices.Sort(attrs)
	keys := policy.Keys{"dynamodb:Attributes": attrs}
	if slices.Contains(reads, op) {
		switch {
		case in.Select != "":
			keys["dynamodb:Select"] = []string{in.Select}
		case in.ProjectionExpression != "" || len(in.AttributesToGet) > 0:
			keys["dynamodb:Select"] = []string{"SPECIFIC_ATTRIBUTES"}
		default:
			keys["dynamodb:Select"] = []string{"ALL_ATTRIBUTES"}
		}
	}
	if in.ReturnValues != "" {
		keys["dynamodb:ReturnValues"] = []string{in.ReturnValues}
	}
	return keys
}

// expressionWords are an expression's keywords, which are not attribute
// names; a function name is told by the parenthesis after it.
var expressionWords = []string{"SET", "REMOVE", "ADD", "DELETE", "AND", "OR", "NOT", "BETWEEN", "IN"}

// topLevelNames are the top-level attributes an expression names, with its
// #placeholders resolved through names: "#0.#1[2], board" names #0's
// attribute and board.
func topLevelNames(expr string, names map[string]string) []string {
	var out []string
	nested := false // the next name follows a '.': part of a path
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == '#' || c == ':' || isNameByte(c):
			j := i + 1
			for j < len(expr) && isNameByte(expr[j]) {
				j++
			}
			word := expr[i:j]
			k := j
			for k < len(expr) && expr[k] == ' ' {
				k++
			}
			call := k < len(expr) && expr[k] == '('
			switch {
			case c == ':' || nested || call || isDigit(c):
			case c == '#':
				out = append(out, names[word])
			case !slices.ContainsFunc(expressionWords, func(w string) bool { return strings.EqualFold(w, word) }):
				out = append(out, word)
			}
			nested = false
			i = j
		case c == '.':
			nested = true
			i++
		default:
			i++
		}
	}
	return out
}

func isNameByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || isDigit(c)
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
