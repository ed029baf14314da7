package routes

import (
	"slices"
	"strings"

	"github.com/rallyhq/rally/shared/schema"
)

// Action is a set of DynamoDB API actions a function calls on a table or
// on one of its indexes. A transaction needs the action of each of its
// items (a ConditionCheck is ConditionCheckItem, a read), a batch the
// batch action on each table it names. The CDK stack grants exactly the
// declared actions; the local stack's access recorder (infra/local/access)
// proves each function calls no other, and every one it is granted but
// those only a failure or a race reaches (listed there with the reason).
type Action uint16

// Actions, named as DynamoDB and IAM name them.
const (
	GetItem Action = 1 << iota
	BatchGetItem
	Query
	Scan
	ConditionCheckItem
	PutItem
	UpdateItem
	DeleteItem
	BatchWriteItem
)

var actionNames = []string{
	"GetItem", "BatchGetItem", "Query", "Scan", "ConditionCheckItem",
	"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem",
}

// IAM lists a's IAM actions (dynamodb:GetItem, …), in a fixed order.
func (a Action) IAM() []string {
	var out []string
	for i, name := range actionNames {
		if a&(1<<i) != 0 {
			out = append(out, "dynamodb:"+name)
		}
	}
	return out
}

func (a Action) String() string {
	var names []string
	for _, iam := range a.IAM() {
		names = append(names, strings.TrimPrefix(iam, "dynamodb:"))
	}
	return strings.Join(names, "|")
}

// ActionOf is the Action of an IAM action name (dynamodb:Query), 0 for
// one no table grant includes (DescribeTable, the stream actions).
func ActionOf(iam string) Action {
	if i := slices.Index(actionNames, strings.TrimPrefix(iam, "dynamodb:")); i >= 0 && strings.HasPrefix(iam, "dynamodb:") {
		return 1 << i
	}
	return 0
}

// Call is what a function calls on one table, or on one of the table's
// secondary indexes.
type Call struct {
	Table schema.Table
	// Index names a secondary index: Actions (a Query, a Scan) are on it
	// alone. Empty: on the table itself.
	Index   string
	Actions Action
	// Attributes, when set, limit the calls to those attributes and the
	// key (IAM fine-grained access: a read must name them in its
	// projection, an update may name no other).
	Attributes []string
}

// On is a call of actions on table t itself.
func On(t schema.Table, a Action) Call { return Call{Table: t, Actions: a} }

// OnIndex is a call of actions (Query, Scan) on the secondary index of t
// named index.
func OnIndex(t schema.Table, index string, a Action) Call {
	return Call{Table: t, Index: index, Actions: a}
}

// Resource names what c is on: the table's name, or <table>/index/<name>
// (as the end of an IAM resource ARN).
func (c Call) Resource() string {
	if c.Index == "" {
		return c.Table.Name
	}
	return c.Table.Name + "/index/" + c.Index
}

// MergeCalls joins the calls on one resource with the same attributes
// into one, in the order each resource first appears: a function declared
// several times (a route for players and one for services, a processor per
// stream) is granted the union.
func MergeCalls(calls []Call) []Call {
	var out []Call
	for _, c := range calls {
		i := slices.IndexFunc(out, func(o Call) bool {
			return o.Resource() == c.Resource() && slices.Equal(o.Attributes, c.Attributes)
		})
		if i < 0 {
			out = append(out, c)
			continue
		}
		out[i].Actions |= c.Actions
	}
	return out
}

// A function reads a stream itself only from a known position (a parked
// batch's shard and sequence numbers), so it never lists shards; event
// source mappings get their own grants from the stack. Uses.Streams
// grants StreamReadActions on each table's stream.
var StreamReadActions = []string{"dynamodb:GetShardIterator", "dynamodb:GetRecords"}
