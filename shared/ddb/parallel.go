package ddb

import (
	"context"
	"sync"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"golang.org/x/sync/errgroup"
)

// Parallel is how many batch calls a bulk load (an import) keeps in
// flight at once: enough to hide the round trips (measured against
// DynamoDB Local, which serves every call on one thread, 4 beat both 1
// and 8).
const Parallel = 4

// BatchWriteAll writes every request to table like BatchWrite, with up to
// Parallel batches of 25 in flight at once (for bulk loads, whose items
// are independent of each other).
func BatchWriteAll(ctx context.Context, db Batcher, table string, reqs []types.WriteRequest) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(Parallel)
	for start := 0; start < len(reqs); start += MaxBatchWrite {
		part := reqs[start:min(start+MaxBatchWrite, len(reqs))]
		g.Go(func() error { return BatchWrite(ctx, db, table, part) })
	}
	return g.Wait()
}

// BatchGetAll reads the items with the given keys like BatchGet, with up
// to Parallel batches of 100 in flight at once. The keys must be
// distinct.
func BatchGetAll(ctx context.Context, db Batcher, table string, keys []map[string]types.AttributeValue, consistent bool, projection ...string) ([]map[string]types.AttributeValue, error) {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(Parallel)
	var mu sync.Mutex
	var items []map[string]types.AttributeValue
	for start := 0; start < len(keys); start += MaxBatchGet {
		part := keys[start:min(start+MaxBatchGet, len(keys))]
		g.Go(func() error {
			got, err := BatchGet(ctx, db, table, part, consistent, projection...)
			mu.Lock()
			items = append(items, got...)
			mu.Unlock()
			return err
		})
	}
	return items, g.Wait()
}
