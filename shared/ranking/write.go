package ranking

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/rallyhq/rally/shared/cache"
)

// upsertChunk bounds the items of one script call, so one call never holds
// Redis for long; UpsertMany pipelines the chunks in one round trip.
const upsertChunk = 256

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// appendItemArgs appends the five script arguments of an item (see
// upsert.lua). Removals carry no member.
func appendItemArgs(args []any, o Order, it Item) []any {
	if it.Removed {
		return append(args, it.ID, "", "0", strconv.FormatInt(it.Version, 10), "1")
	}
	ms, _ := reachedMillis(it.ReachedAt) // validated by the caller
	return append(args, it.ID, prefix(ms), zscore(o, it.Score), strconv.FormatInt(it.Version, 10), "0")
}

// Upsert applies it when its version is newer than the stored one (a stale
// or repeated version changes nothing), in one round trip, and tells where
// the item stands afterwards. An Item with Removed set removes.
func (e *Engine) Upsert(ctx context.Context, b Board, it Item) (UpsertResult, error) {
	if err := b.validate(); err != nil {
		return UpsertResult{}, err
	}
	if err := it.validate(); err != nil {
		return UpsertResult{}, fmt.Errorf("upsert into %s: %w", b, err)
	}
	if b.Partitions > 0 {
		return e.upsertOnePartitioned(ctx, b, it)
	}
	if !b.auto() {
		res, _, err := e.upsertOneInSet(ctx, b, it, 0)
		return res, err
	}
	var res UpsertResult
	applied := false
	err := e.byShape(ctx, b, func(sh shape) (err error) {
		var st int64
		switch sh.kind {
		case shapeParted:
			res, err = e.upsertOnePartitioned(ctx, b.parted(), it)
			if errors.Is(err, errNoLayout) {
				return errShapeChanged
			}
		case shapeConverting:
			if res, st, err = e.upsertOneInSet(ctx, b, it, sh.fence); err == nil && st > 0 {
				err = e.alsoToPartitions(ctx, b, []Item{it})
			}
		default:
			res, _, err = e.upsertOneInSet(ctx, b, it, 0)
		}
		applied = applied || res.Applied
		return err
	})
	res.Applied = applied
	return res, err
}

// upsertOneInSet is Upsert on one sorted set, writing with the fence of a
// conversion (0 when none is known): errShapeChanged when the set is
// fenced at a later one (a conversion the caller has not heard of) or
// retired. It also returns the item's status (see upsert.lua).
func (e *Engine) upsertOneInSet(ctx context.Context, b Board, it Item, fence int64) (UpsertResult, int64, error) {
	k := b.keys()
	keys := k.appendIDKeys(k.heads(), it.ID)
	args := appendItemArgs([]any{flag(b.Ties == Shared), "1", strconv.FormatInt(fence, 10)}, b.Order, it)
	v, err := e.run(ctx, upsertScript, keys, args...)
	if err != nil {
		return UpsertResult{}, 0, fmt.Errorf("upsert %s into %s: %w", it.ID, b, err)
	}
	if v == "STALE" || v == "RETIRED" {
		return UpsertResult{}, 0, errShapeChanged
	}
	r, err := ints(v, 3)
	if err != nil {
		return UpsertResult{}, 0, fmt.Errorf("upsert %s into %s: %w", it.ID, b, err)
	}
	return UpsertResult{Applied: r[0] == 1, Rank: int(r[1]), Total: r[2]}, r[0], nil
}

// UpsertMany applies items to one board in one round trip and reports, per
// item, whether it applied. Items of the same ID apply as if one at a time
// in slice order, so the newest version wins.
func (e *Engine) UpsertMany(ctx context.Context, b Board, items []Item) ([]bool, error) {
	if err := b.validate(); err != nil {
		return nil, err
	}
	for _, it := range items {
		if err := it.validate(); err != nil {
			return nil, fmt.Errorf("upsert into %s: %w", b, err)
		}
	}
	if len(items) == 0 {
		return nil, nil
	}
	if b.Partitions > 0 {
		return e.upsertPartitioned(ctx, b, items)
	}
	if b.auto() {
		return e.upsertByShape(ctx, b, items)
	}
	st, err := e.upsertSet(ctx, b, items, 0)
	return appliedOf(st), err
}

func appliedOf(status []int64) []bool {
	out := make([]bool, len(status))
	for i, s := range status {
		out[i] = s == 1
	}
	return out
}

// upsertSet is UpsertMany on one sorted set, writing with the fence of a
// conversion (0 when none is known), and returns each item's status (see
// upsert.lua). When a chunk meets a later fence or a retired set, it
// returns the other chunks' and errShapeChanged.
func (e *Engine) upsertSet(ctx context.Context, b Board, items []Item, fence int64) ([]int64, error) {
	k := b.keys()
	chunks := groupByID(items, upsertChunk)
	calls := make([]cache.ScriptCall, len(chunks))
	for c, idx := range chunks {
		keys := k.heads()
		args := []any{flag(b.Ties == Shared), "0", strconv.FormatInt(fence, 10)}
		for _, i := range idx {
			keys = k.appendIDKeys(keys, items[i].ID)
			args = appendItemArgs(args, b.Order, items[i])
		}
		calls[c] = cache.ScriptCall{Script: upsertScript, Keys: keys, Args: args}
	}
	replies, err := e.runAll(ctx, calls)
	if err != nil {
		return nil, fmt.Errorf("upsert %d items into %s: %w", len(items), b, err)
	}
	status := make([]int64, len(items))
	var moved error
	for c, v := range replies {
		if v == "STALE" || v == "RETIRED" {
			moved = errShapeChanged
			continue
		}
		r, err := ints(v, len(chunks[c]))
		if err != nil {
			return nil, fmt.Errorf("upsert %d items into %s: %w", len(items), b, err)
		}
		for j, i := range chunks[c] {
			status[i] = r[j]
		}
	}
	return status, moved
}

// groupByID splits the indexes of items into chunks of at most size IDs
// such that all items of one ID share a chunk, in their order. The chunks of a
// pipeline may then run in any order, as they do when Redis lost its
// script cache and some calls of the pipeline are sent again.
func groupByID(items []Item, size int) [][]int {
	var chunks [][]int
	chunkOf := make(map[string]int, len(items))
	for i, it := range items {
		c, ok := chunkOf[it.ID]
		if !ok {
			if len(chunks) == 0 || len(chunks[len(chunks)-1]) >= size {
				chunks = append(chunks, make([]int, 0, size))
			}
			c = len(chunks) - 1
			chunkOf[it.ID] = c
		}
		chunks[c] = append(chunks[c], i)
	}
	return chunks
}

// Remove takes id off the board when version is newer than the stored one.
// The version is remembered (a tombstone), so an older upsert delivered
// later cannot bring the item back.
func (e *Engine) Remove(ctx context.Context, b Board, id string, version int64) (bool, error) {
	r, err := e.Upsert(ctx, b, Item{ID: id, Version: version, Removed: true})
	return r.Applied, err
}

// Forget erases every trace of id from the board: its entry, lookup and
// tombstone (GDPR erasure). A load under way on the board is cancelled
// (ErrLoadSuperseded), since its snapshot may still hold id.
func (e *Engine) Forget(ctx context.Context, b Board, id string) error {
	if err := b.validate(); err != nil {
		return err
	}
	if err := validateID(id); err != nil {
		return err
	}
	if b.Partitions > 0 {
		return e.forgetPartitioned(ctx, b, id)
	}
	if b.auto() {
		return e.forgetByShape(ctx, b, id)
	}
	k := b.keys()
	if _, err := e.run(ctx, forgetScript, k.appendIDKeys(k.heads(), id), id); err != nil {
		return fmt.Errorf("forget %s on %s: %w", id, b, err)
	}
	return nil
}

// ints reads a script reply that is an array of n integers.
func ints(v any, n int) ([]int64, error) {
	arr, ok := v.([]any)
	if !ok || len(arr) != n {
		return nil, fmt.Errorf("ranking: unexpected script reply %v", v)
	}
	out := make([]int64, n)
	for i, x := range arr {
		if out[i], ok = x.(int64); !ok {
			return nil, fmt.Errorf("ranking: unexpected script reply %v", v)
		}
	}
	return out, nil
}
