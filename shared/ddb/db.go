package ddb

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/rallyhq/rally/shared/clock"
)

// DB is the part of the DynamoDB API Rally's stores use; *dynamodb.Client
// is one. Every store takes this one interface, so a test can wrap the
// client once (to page small, or to fail a call) for any store.
type DB interface {
	Batcher
	GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	DeleteItem(context.Context, *dynamodb.DeleteItemInput, ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	Query(context.Context, *dynamodb.QueryInput, ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	Scan(context.Context, *dynamodb.ScanInput, ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
	TransactWriteItems(context.Context, *dynamodb.TransactWriteItemsInput, ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
}

var _ DB = (*dynamodb.Client)(nil)

// timeLayout is how every store writes a time: UTC with a fixed nine-digit
// fraction, so stored times sort and compare as strings (sort keys,
// condition expressions such as leases).
const timeLayout = "2006-01-02T15:04:05.000000000Z"

// FormatTime is t as stored.
func FormatTime(t time.Time) string { return t.UTC().Format(timeLayout) }

// ParseTime reads a stored time (any RFC 3339 form, so items written with
// a shorter fraction still read); an empty or malformed value is the zero
// time.
func ParseTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}
	}
	return t.UTC()
}

// Pause waits before retry attempt (none before the first) with a small
// jittered backoff, so writers that lost a race to the same item do not
// collide again in lockstep. It returns early with ctx's error.
func Pause(ctx context.Context, attempt int) error {
	if attempt == 0 {
		return nil
	}
	ceiling := time.Duration(min(attempt, 8)) * 4 * time.Millisecond
	return clock.Sleep(ctx, ceiling/2+rand.N(ceiling/2+1))
}
