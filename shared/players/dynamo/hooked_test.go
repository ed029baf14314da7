package dynamo_test

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/shared/schema"
)

// hooked is DynamoDB with a hook before every write call, told the
// player_id of the call's first item (for a transaction, the list's
// owner). An error from before fails the call unwritten; after runs once
// a write call returned.
type hooked struct {
	*dynamodb.Client
	before func(ctx context.Context, write string) error
	after  func()
}

func (d *hooked) done() {
	if d.after != nil {
		d.after()
	}
}

func idOf(key map[string]types.AttributeValue) string {
	if v, ok := key[schema.AttrPlayerID].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

func (d *hooked) hook(ctx context.Context, key map[string]types.AttributeValue) error {
	if d.before == nil {
		return nil
	}
	return d.before(ctx, idOf(key))
}

func (d *hooked) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if err := d.hook(ctx, in.Key); err != nil {
		return nil, err
	}
	defer d.done()
	return d.Client.UpdateItem(ctx, in, opts...)
}

func (d *hooked) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	var key map[string]types.AttributeValue
	switch first := in.TransactItems[0]; {
	case first.Update != nil:
		key = first.Update.Key
	case first.ConditionCheck != nil:
		key = first.ConditionCheck.Key
	}
	if err := d.hook(ctx, key); err != nil {
		return nil, err
	}
	defer d.done()
	return d.Client.TransactWriteItems(ctx, in, opts...)
}

func (d *hooked) BatchWriteItem(ctx context.Context, in *dynamodb.BatchWriteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error) {
	for _, reqs := range in.RequestItems {
		if r := reqs[0]; r.DeleteRequest != nil {
			if err := d.hook(ctx, r.DeleteRequest.Key); err != nil {
				return nil, err
			}
		} else if err := d.hook(ctx, r.PutRequest.Item); err != nil {
			return nil, err
		}
	}
	defer d.done()
	return d.Client.BatchWriteItem(ctx, in, opts...)
}
