package ddb

import (
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// MustBuild builds b. The stores build every expression from attribute
// names declared in shared/schema and from values that are plain strings,
// numbers or already-encoded attribute values, so the builder can fail only
// on a mistake in the code (an empty name, an empty builder), which every
// test of the call finds; like regexp.MustCompile, it panics then.
func MustBuild(b expression.Builder) expression.Expression {
	e, err := b.Build()
	if err != nil {
		panic(fmt.Sprintf("ddb: build expression: %v", err))
	}
	return e
}

// QueryInput is a query of table by e's key condition, with e's filter and
// projection when it has them. Callers add the index, paging and read
// consistency.
func QueryInput(table string, e expression.Expression) *dynamodb.QueryInput {
	return &dynamodb.QueryInput{
		TableName:                 aws.String(table),
		KeyConditionExpression:    e.KeyCondition(),
		FilterExpression:          e.Filter(),
		ProjectionExpression:      e.Projection(),
		ExpressionAttributeNames:  e.Names(),
		ExpressionAttributeValues: e.Values(),
	}
}

// UpdateInput is e's update of the item at key, under e's condition when it
// has one.
func UpdateInput(table string, key map[string]types.AttributeValue, e expression.Expression) *dynamodb.UpdateItemInput {
	return &dynamodb.UpdateItemInput{
		TableName:                 aws.String(table),
		Key:                       key,
		UpdateExpression:          e.Update(),
		ConditionExpression:       e.Condition(),
		ExpressionAttributeNames:  e.Names(),
		ExpressionAttributeValues: e.Values(),
	}
}

// TransactUpdate is UpdateInput as a transaction item, for an update that
// must commit together with other writes.
func TransactUpdate(table string, key map[string]types.AttributeValue, e expression.Expression) *types.Update {
	return &types.Update{
		TableName:                 aws.String(table),
		Key:                       key,
		UpdateExpression:          e.Update(),
		ConditionExpression:       e.Condition(),
		ExpressionAttributeNames:  e.Names(),
		ExpressionAttributeValues: e.Values(),
	}
}

// PutInput is a put of item under e's condition.
func PutInput(table string, item map[string]types.AttributeValue, e expression.Expression) *dynamodb.PutItemInput {
	return &dynamodb.PutItemInput{
		TableName:                 aws.String(table),
		Item:                      item,
		ConditionExpression:       e.Condition(),
		ExpressionAttributeNames:  e.Names(),
		ExpressionAttributeValues: e.Values(),
	}
}

// TransactPut is PutInput as a transaction item.
func TransactPut(table string, item map[string]types.AttributeValue, e expression.Expression) *types.Put {
	return &types.Put{
		TableName:                 aws.String(table),
		Item:                      item,
		ConditionExpression:       e.Condition(),
		ExpressionAttributeNames:  e.Names(),
		ExpressionAttributeValues: e.Values(),
	}
}

// TransactCheck is a transaction item that writes nothing and holds while
// the item at key meets e's condition.
func TransactCheck(table string, key map[string]types.AttributeValue, e expression.Expression) *types.ConditionCheck {
	return &types.ConditionCheck{
		TableName:                 aws.String(table),
		Key:                       key,
		ConditionExpression:       e.Condition(),
		ExpressionAttributeNames:  e.Names(),
		ExpressionAttributeValues: e.Values(),
	}
}
