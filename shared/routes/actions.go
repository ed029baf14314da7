package routes

// The DynamoDB actions a function's Uses grant it on a table and the
// table's indexes: Reads grants TableReadActions, Writes those and
// TableWriteActions. A transaction needs the action of each of its items
// (a ConditionCheck is ConditionCheckItem, a read). Streams grants
// StreamReadActions on the table's stream. The CDK stack grants exactly
// these; the local stack's access recorder (infra/local/access) proves
// each function uses what it is granted.
var (
	TableReadActions = []string{
		"dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:Query", "dynamodb:Scan", "dynamodb:ConditionCheckItem",
	}
	TableWriteActions = []string{
		"dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:BatchWriteItem",
	}
	// A function reads a stream itself only from a known position (a
	// parked batch's shard and sequence numbers), so it never lists
	// shards; event source mappings get their own grants from the stack.
	StreamReadActions = []string{"dynamodb:GetShardIterator", "dynamodb:GetRecords"}
)
