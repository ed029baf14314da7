package analytics

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"golang.org/x/sync/errgroup"

	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/schema"
)

// MarkerRetention is how long a shipped event's marker is kept: longer
// than a stream keeps records (24 h) and than the shipper's maximum record
// age, so no redelivery outlives the marker that recognises it.
const MarkerRetention = 48 * time.Hour

// Shipped remembers which events reached the sink, so a redelivered stream
// record is not sent again. A marker is written only after the sink
// accepted the event. Markers are Counters items keyed
// schema.CountersShipPrefix + event id, schema.CountersShipSK.
type Shipped struct {
	DB    ddb.DB
	Table string // Counters, physical name
	// Clock dates the markers' expiry; nil means the wall clock.
	Clock clock.Clock
}

func (s *Shipped) key(id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{schema.AttrPK: ddb.S(schema.CountersShipPrefix + id), schema.AttrSK: ddb.S(schema.CountersShipSK)}
}

// Filter returns the ids, in order and without repeats, that have no
// marker yet. The markers are read 100 a call, the calls running
// concurrently (a batch of 1,000 events is ten reads, not ten in a row).
func (s *Shipped) Filter(ctx context.Context, ids []string) ([]string, error) {
	ids = unique(ids)
	if len(ids) == 0 {
		return nil, nil
	}
	var mu sync.Mutex
	shipped := make(map[string]bool, len(ids))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(inFlight)
	for chunk := range slices.Chunk(ids, ddb.MaxBatchGet) {
		g.Go(func() error {
			keys := make([]map[string]types.AttributeValue, len(chunk))
			for i, id := range chunk {
				keys[i] = s.key(id)
			}
			items, err := ddb.BatchGet(gctx, s.DB, s.Table, keys, true, schema.AttrPK)
			if err != nil {
				return fmt.Errorf("analytics: read shipped markers: %w", err)
			}
			mu.Lock()
			defer mu.Unlock()
			for _, it := range items {
				if pk, ok := it[schema.AttrPK].(*types.AttributeValueMemberS); ok {
					shipped[strings.TrimPrefix(pk.Value, schema.CountersShipPrefix)] = true
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	unsent := make([]string, 0, len(ids))
	for _, id := range ids {
		if !shipped[id] {
			unsent = append(unsent, id)
		}
	}
	return unsent, nil
}

// Mark records that the events with ids reached the sink, 25 markers a
// call, the calls running concurrently.
func (s *Shipped) Mark(ctx context.Context, ids []string) error {
	ids = unique(ids)
	if len(ids) == 0 {
		return nil
	}
	expires := ddb.N(s.now().Add(MarkerRetention).Unix())
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(inFlight)
	for chunk := range slices.Chunk(ids, ddb.MaxBatchWrite) {
		g.Go(func() error {
			reqs := make([]types.WriteRequest, len(chunk))
			for i, id := range chunk {
				item := s.key(id)
				item[schema.TTL] = expires
				reqs[i] = types.WriteRequest{PutRequest: &types.PutRequest{Item: item}}
			}
			if err := ddb.BatchWrite(gctx, s.DB, s.Table, reqs); err != nil {
				return fmt.Errorf("analytics: write shipped markers: %w", err)
			}
			return nil
		})
	}
	return g.Wait()
}

func (s *Shipped) now() time.Time {
	if s.Clock == nil {
		return time.Now().UTC()
	}
	return s.Clock.Now()
}

// unique returns ids without repeats, in first-seen order; DynamoDB's
// batch calls refuse a key twice.
func unique(ids []string) []string {
	seen := make(map[string]bool, len(ids))
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}
