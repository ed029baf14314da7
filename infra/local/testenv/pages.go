package testenv

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// SmallPages is a DynamoDB client whose Query and Scan pages hold at most
// two items unless the caller set a Limit, so a store that trusted one page
// (an erasure, a rebuild) leaves items behind and its test fails.
// BeforeUpdate, when set, runs before every UpdateItem, to change an item
// under it; FailBatch, when set, may fail a BatchWriteItem, as a crash
// there would.
type SmallPages struct {
	*dynamodb.Client
	BeforeUpdate func(*dynamodb.UpdateItemInput)
	FailBatch    func(*dynamodb.BatchWriteItemInput) error
}

// Query implements the store's DB.
func (d *SmallPages) Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	if in.Limit == nil {
		in.Limit = aws.Int32(2)
	}
	return d.Client.Query(ctx, in, opts...)
}

// Scan implements the store's DB.
func (d *SmallPages) Scan(ctx context.Context, in *dynamodb.ScanInput, opts ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	if in.Limit == nil {
		in.Limit = aws.Int32(2)
	}
	return d.Client.Scan(ctx, in, opts...)
}

// UpdateItem implements the store's DB.
func (d *SmallPages) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if d.BeforeUpdate != nil {
		d.BeforeUpdate(in)
	}
	return d.Client.UpdateItem(ctx, in, opts...)
}

// BatchWriteItem implements the store's DB.
func (d *SmallPages) BatchWriteItem(ctx context.Context, in *dynamodb.BatchWriteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error) {
	if d.FailBatch != nil {
		if err := d.FailBatch(in); err != nil {
			return nil, err
		}
	}
	return d.Client.BatchWriteItem(ctx, in, opts...)
}
