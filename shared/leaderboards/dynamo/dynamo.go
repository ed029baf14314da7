// Package dynamo stores leaderboards in DynamoDB, their source of truth:
// definitions, each player's score per board and period (changed only by
// conditional transactions that also record the match, so a match id applies
// once), a score-ordered index that answers top N and rank-with-neighbours
// exactly when Redis cannot, and player profiles and friend lists.
package dynamo

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/errs"
)

// DB is the part of the DynamoDB API the stores use.
type DB interface {
	ddb.Batcher
	GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	Query(context.Context, *dynamodb.QueryInput, ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	Scan(context.Context, *dynamodb.ScanInput, ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
	TransactWriteItems(context.Context, *dynamodb.TransactWriteItemsInput, ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
}

func formatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func parseTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}
	}
	return t.UTC()
}

// now is c's time, or the wall clock when the store was built without one.
func now(c clock.Clock) time.Time {
	if c == nil {
		return time.Now().UTC()
	}
	return c.Now().UTC()
}

// unavailable classifies a DynamoDB failure: the source of truth cannot be
// reached, which callers answer with 503.
func unavailable(err error, what string) error {
	return errs.Wrap(errs.Unavailable, fmt.Errorf("%s: %w", what, err), "the leaderboards store is unreachable")
}
