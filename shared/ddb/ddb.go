// Package ddb holds what every DynamoDB store needs once: the DB interface
// the stores take, the layout stored times are written in, the batch
// mechanics (chunking to the API's limits and retrying unprocessed items
// with backoff, so no store drops an item a batch call left behind), and
// the step from an expression built with the SDK's expression builder to
// the fields of a request.
package ddb

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/shared/clock"
)

// Batcher is the part of DynamoDB the batch helpers use.
type Batcher interface {
	BatchWriteItem(context.Context, *dynamodb.BatchWriteItemInput, ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error)
	BatchGetItem(context.Context, *dynamodb.BatchGetItemInput, ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error)
}

// Limits of the batch APIs.
const (
	MaxBatchWrite = 25
	MaxBatchGet   = 100
	MaxTransact   = 100
)

const maxAttempts = 8

// BatchWrite writes every request to table, 25 at a time, retrying
// unprocessed items.
func BatchWrite(ctx context.Context, db Batcher, table string, reqs []types.WriteRequest) error {
	for start := 0; start < len(reqs); start += MaxBatchWrite {
		end := min(start+MaxBatchWrite, len(reqs))
		pending := map[string][]types.WriteRequest{table: reqs[start:end]}
		for attempt := 0; len(pending) > 0; attempt++ {
			if attempt == maxAttempts {
				return fmt.Errorf("batch write %s: items still unprocessed after %d attempts", table, attempt)
			}
			if err := backoff(ctx, attempt); err != nil {
				return err
			}
			out, err := db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: pending})
			if err != nil {
				return fmt.Errorf("batch write %s: %w", table, err)
			}
			pending = out.UnprocessedItems
		}
	}
	return nil
}

// BatchGet reads the items with the given keys from table, 100 at a time,
// retrying unprocessed keys. Missing items are simply absent from the result.
func BatchGet(ctx context.Context, db Batcher, table string, keys []map[string]types.AttributeValue, consistent bool, projection ...string) ([]map[string]types.AttributeValue, error) {
	var items []map[string]types.AttributeValue
	for start := 0; start < len(keys); start += MaxBatchGet {
		end := min(start+MaxBatchGet, len(keys))
		ka := types.KeysAndAttributes{Keys: keys[start:end], ConsistentRead: aws.Bool(consistent)}
		if len(projection) > 0 {
			names := make([]expression.NameBuilder, len(projection))
			for i, p := range projection {
				names[i] = expression.Name(p)
			}
			e := MustBuild(expression.NewBuilder().WithProjection(expression.NamesList(names[0], names[1:]...)))
			ka.ProjectionExpression, ka.ExpressionAttributeNames = e.Projection(), e.Names()
		}
		pending := map[string]types.KeysAndAttributes{table: ka}
		for attempt := 0; len(pending) > 0; attempt++ {
			if attempt == maxAttempts {
				return nil, fmt.Errorf("batch get %s: keys still unprocessed after %d attempts", table, attempt)
			}
			if err := backoff(ctx, attempt); err != nil {
				return nil, err
			}
			out, err := db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: pending})
			if err != nil {
				return nil, fmt.Errorf("batch get %s: %w", table, err)
			}
			items = append(items, out.Responses[table]...)
			pending = out.UnprocessedKeys
		}
	}
	return items, nil
}

func backoff(ctx context.Context, attempt int) error {
	if attempt == 0 {
		return nil
	}
	return clock.Sleep(ctx, time.Duration(1<<min(attempt, 6))*10*time.Millisecond)
}

// IsConditionFailed reports whether err is a failed condition expression.
func IsConditionFailed(err error) bool {
	var ccf *types.ConditionalCheckFailedException
	return errors.As(err, &ccf)
}

// CancelledBy returns, for a cancelled transaction, the index of each item
// whose condition failed. ok is false when err is not a cancelled
// transaction.
func CancelledBy(err error) (failed []int, ok bool) {
	var tce *types.TransactionCanceledException
	if !errors.As(err, &tce) {
		return nil, false
	}
	for i, r := range tce.CancellationReasons {
		if r.Code != nil && *r.Code == "ConditionalCheckFailed" {
			failed = append(failed, i)
		}
	}
	return failed, true
}

// S is a string attribute value.
func S(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }

// N is a number attribute value.
func N(v int64) types.AttributeValue { return &types.AttributeValueMemberN{Value: fmt.Sprint(v)} }
