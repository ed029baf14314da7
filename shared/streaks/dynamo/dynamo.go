// Package dynamo stores streaks and points in DynamoDB, their source of
// truth: each player's streak item in Streaks, and their points event log,
// daily totals and idempotency records in Activity, all four written by one
// transaction guarded by the streak's version. Two sparse, write-sharded
// indexes keyed by the date of the last activity order the streaks that may
// still be live, so the streak boards can be answered (and Redis rebuilt)
// without scanning the table.
package dynamo

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/errs"
	"github.com/rallyhq/rally/shared/streaks"
)

// Store is streaks.Store over the Streaks and Activity tables.
type Store struct {
	DB ddb.DB
	// Streaks and Activity are the physical table names.
	Streaks, Activity string
	// Clock stamps idempotency records; nil means the wall clock.
	Clock clock.Clock
	// Capacity, when set, receives the capacity units each operation
	// consumed, summed over its calls, named "get", "day", "commit",
	// "replay", "history", "top" or "live".
	Capacity func(op string, units float64)
}

var _ streaks.Store = (*Store)(nil)

// meter sums the consumed capacity of one operation's calls, which may run
// concurrently.
type meter struct {
	mu    sync.Mutex
	units float64
}

func (m *meter) add(cc *types.ConsumedCapacity) {
	if cc == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.units += aws.ToFloat64(cc.CapacityUnits)
}

func (m *meter) addAll(ccs []types.ConsumedCapacity) {
	for i := range ccs {
		m.add(&ccs[i])
	}
}

// report hands the operation's units to the Capacity hook.
func (s *Store) report(op string, m *meter) {
	if s.Capacity == nil {
		return
	}
	m.mu.Lock()
	units := m.units
	m.mu.Unlock()
	if units > 0 {
		s.Capacity(op, units)
	}
}

// meteredBatcher lets the shared batch helpers run through the meter: it
// asks every batch call for its consumed capacity and adds it up.
type meteredBatcher struct {
	db ddb.DB
	m  *meter
}

func (b meteredBatcher) BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	in.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
	out, err := b.db.BatchGetItem(ctx, in, opts...)
	if err == nil {
		b.m.addAll(out.ConsumedCapacity)
	}
	return out, err
}

func (b meteredBatcher) BatchWriteItem(ctx context.Context, in *dynamodb.BatchWriteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error) {
	in.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
	out, err := b.db.BatchWriteItem(ctx, in, opts...)
	if err == nil {
		b.m.addAll(out.ConsumedCapacity)
	}
	return out, err
}

// millis is t in Unix milliseconds, nil for the zero time (attribute
// omitted).
func millis(t time.Time) *int64 {
	if t.IsZero() {
		return nil
	}
	ms := t.UnixMilli()
	return &ms
}

func fromMillis(ms *int64) time.Time {
	if ms == nil {
		return time.Time{}
	}
	return time.UnixMilli(*ms).UTC()
}

// now is the store's time, or the wall clock when it was built without one.
func (s *Store) now() time.Time {
	if s.Clock == nil {
		return time.Now().UTC()
	}
	return s.Clock.Now().UTC()
}

// unavailable classifies a DynamoDB failure: the source of truth cannot be
// reached, which callers answer with 503.
func unavailable(err error, what string) error {
	return errs.Wrap(errs.Unavailable, fmt.Errorf("%s: %w", what, err), "the streaks store is unreachable")
}
