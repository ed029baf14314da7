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
	StreamReadActions = []string{
		"dynamodb:DescribeStream", "dynamodb:GetShardIterator", "dynamodb:GetRecords",
	}
)
