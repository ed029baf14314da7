package dynamo

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"golang.org/x/sync/errgroup"

	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/schema"
	"github.com/rallyhq/rally/shared/streaks"
)

// livePage is how many states Live hands over at a time: one BatchGetItem.
const livePage = ddb.MaxBatchGet

// queryTopSlack is how many index entries a Top query reads beyond the
// ones it still needs: broken streaks are read and filtered out, and a few
// more keys cost far less than another round trip.
const queryTopSlack = 32

// Top ranks the n best streaks live at now, globally (region "") or in a
// region. Only streaks last active on the four candidate dates can be live;
// the first n live keys of each of their shards hold the first n overall.
func (s *Store) Top(ctx context.Context, region string, n int, now time.Time) ([]streaks.Entry, error) {
	if n <= 0 {
		return []streaks.Entry{}, nil
	}
	m := &meter{}
	defer s.report("top", m)
	found, err := s.liveEntries(ctx, m, region, now, n)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(found, func(a, b streaks.Entry) int {
		if streaks.Before(a, b) {
			return -1
		}
		if streaks.Before(b, a) {
			return 1
		}
		return 0
	})
	// The index trails the table: while a player's entry moves between
	// dates it may briefly show in both. Keep their better one.
	seen := make(map[string]bool, len(found))
	entries := make([]streaks.Entry, 0, min(n, len(found)))
	for _, e := range found {
		if len(entries) == n {
			break
		}
		if !seen[e.UserID] {
			seen[e.UserID] = true
			e.Rank = len(entries) + 1
			entries = append(entries, e)
		}
	}
	return entries, nil
}

// Live calls fn with every streak live at now, read strongly consistently
// from the table in pages of up to 100, ordered by user id within a page.
func (s *Store) Live(ctx context.Context, now time.Time, fn func([]streaks.State) error) error {
	return s.LiveAfter(ctx, now, "", fn)
}

// LiveAfter is Live from the first user id after after: how a rebuild
// that spans invocations continues.
func (s *Store) LiveAfter(ctx context.Context, now time.Time, after string, fn func([]streaks.State) error) error {
	m := &meter{}
	defer s.report("live", m)
	found, err := s.liveEntries(ctx, m, "", now, 0)
	if err != nil {
		return err
	}
	users := make([]string, 0, len(found))
	for _, e := range found {
		users = append(users, e.UserID)
	}
	slices.Sort(users)
	users = slices.Compact(users)
	if after != "" {
		at, _ := slices.BinarySearch(users, after+"\x00")
		users = users[at:]
	}
	batcher := meteredBatcher{db: s.DB, m: m}
	for page := range slices.Chunk(users, livePage) {
		keys := make([]map[string]types.AttributeValue, len(page))
		for i, u := range page {
			keys[i] = userKey(u)
		}
		items, err := ddb.BatchGet(ctx, batcher, s.Streaks, keys, true)
		if err != nil {
			return unavailable(err, "read live streaks")
		}
		states := make([]streaks.State, 0, len(items))
		for _, item := range items {
			st, err := decodeState(item)
			if err != nil {
				return fmt.Errorf("decode live streak: %w", err)
			}
			// The table is newer than the index: a streak read now is
			// still live unless it was erased (and then it is absent).
			if st.LiveAt(now) {
				states = append(states, st)
			}
		}
		if len(states) == 0 {
			continue
		}
		slices.SortFunc(states, func(a, b streaks.State) int { return cmp.Compare(a.UserID, b.UserID) })
		if err := fn(states); err != nil {
			return err
		}
	}
	return nil
}

// liveEntries queries every shard of the candidate dates in the global
// (region "") or the region's index, in parallel, each up to limit live
// entries in board order (all of them when limit is 0).
func (s *Store) liveEntries(ctx context.Context, m *meter, region string, now time.Time, limit int) ([]streaks.Entry, error) {
	var parts []string
	for _, date := range candidateDates(now) {
		for shard := range LiveShards {
			if region == "" {
				parts = append(parts, LivePartition(date, shard))
			} else {
				parts = append(parts, RegionPartition(region, date, shard))
			}
		}
	}
	found := make([][]streaks.Entry, len(parts))
	g, gctx := errgroup.WithContext(ctx)
	for i, part := range parts {
		g.Go(func() (err error) {
			found[i], err = s.livePartition(gctx, m, region != "", part, now, limit)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return slices.Concat(found...), nil
}

// livePartition reads one index partition in board order, keeping the
// entries whose streak has not broken by now.
func (s *Store) livePartition(ctx context.Context, m *meter, regional bool, part string, now time.Time, limit int) ([]streaks.Entry, error) {
	index, pk := schema.IndexStreaksLive, schema.AttrLivePK
	if regional {
		index, pk = schema.IndexStreaksRegion, schema.AttrRegionPK
	}
	in := ddb.QueryInput(s.Streaks, ddb.MustBuild(expression.NewBuilder().
		WithKeyCondition(expression.Key(pk).Equal(expression.Value(part))).
		WithFilter(expression.Name(schema.AttrBreaksAt).GreaterThan(expression.Value(now.UnixMilli()))).
		WithProjection(expression.NamesList(expression.Name(schema.AttrLiveSK)))))
	in.IndexName = aws.String(index)
	in.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
	var entries []streaks.Entry
	for limit == 0 || len(entries) < limit {
		if limit > 0 {
			in.Limit = aws.Int32(int32(min(limit-len(entries)+queryTopSlack, 1000)))
		}
		out, err := s.DB.Query(ctx, in)
		if err != nil {
			return nil, unavailable(err, "read streak index "+index+" "+part)
		}
		m.add(out.ConsumedCapacity)
		for _, item := range out.Items {
			sk, ok := item[schema.AttrLiveSK].(*types.AttributeValueMemberS)
			if !ok {
				return nil, fmt.Errorf("streak index %s %s: an item has no %s", index, part, schema.AttrLiveSK)
			}
			e, err := entryOfKey(sk.Value)
			if err != nil {
				return nil, err
			}
			entries = append(entries, e)
		}
		if len(out.LastEvaluatedKey) == 0 {
			break
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
	if limit > 0 && len(entries) > limit {
		entries = entries[:limit]
	}
	return entries, nil
}
