package ranking

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// keyBatch bounds the commands or keys of one pipelined step over a
// board's lookup buckets.
const keyBatch = 1000

// Sum stores into dst the per-ID sum of the scores of srcs, expiring after
// ttl, in one round trip: trending windows are sums of hourly or daily
// buckets. All boards must share dst's Tag and Order, and the sources'
// items must all use the zero ReachedAt, so an ID has the same member in
// every source. dst keeps no lookup or versions: read it with Top, Around
// or Among, and write it only with Sum. Sums are exact while they stay
// within ±2^53.
func (e *Engine) Sum(ctx context.Context, dst Board, srcs []Board, ttl time.Duration) error {
	if err := dst.validate(); err != nil {
		return err
	}
	if dst.Partitions > 0 || dst.auto() {
		return invalid("sum into %s: a partitioned board cannot be a sum", dst)
	}
	if ttl < time.Millisecond {
		return invalid("sum into %s: ttl %s under 1ms", dst, ttl)
	}
	dk := dst.keys()
	keys := []string{dk.meta(), dk.live()}
	for _, s := range srcs {
		if err := s.validate(); err != nil {
			return err
		}
		if s.Tag != dst.Tag || s.Order != dst.Order || s.Partitions > 0 || s.auto() {
			return invalid("sum into %s: source %s has another tag or order", dst, s)
		}
		keys = append(keys, s.keys().live())
	}
	if _, err := e.run(ctx, sumScript, keys, ttl.Milliseconds()); err != nil {
		return fmt.Errorf("sum %d boards into %s: %w", len(srcs), dst, err)
	}
	return nil
}

// Expire makes the whole board (entries, lookups, tombstones) expire after
// ttl; later writes keep every key they touch on the same deadline. It
// does nothing to a board that does not exist. It costs two round trips,
// the second touching every lookup bucket the board may have (about one
// per 8 to 64 IDs).
func (e *Engine) Expire(ctx context.Context, b Board, ttl time.Duration) error {
	if err := b.validate(); err != nil {
		return err
	}
	if ttl < time.Millisecond {
		return invalid("expire %s: ttl %s under 1ms", b, ttl)
	}
	if b.Partitions > 0 {
		return e.expirePartitioned(ctx, b, ttl)
	}
	if b.auto() {
		// The set's meta keeps the deadline either way; partitions, once
		// the board has them, take it too.
		if err := e.expireSet(ctx, b, ttl); err != nil {
			return err
		}
		if sh, err := e.shapeOf(ctx, b, true); err != nil || sh.kind == shapeSet {
			return err
		}
		return e.expirePartitioned(ctx, b.parted(), ttl)
	}
	return e.expireSet(ctx, b, ttl)
}

// expireSet is Expire on one sorted set.
func (e *Engine) expireSet(ctx context.Context, b Board, ttl time.Duration) error {
	k := b.keys()
	v, err := e.run(ctx, expireScript, k.heads(), ttl.Milliseconds())
	if err != nil {
		return fmt.Errorf("expire %s: %w", b, err)
	}
	arr, ok := v.([]any)
	if !ok {
		return fmt.Errorf("expire %s: unexpected reply %v", b, v)
	}
	if len(arr) == 0 {
		return nil
	}
	st, err := parseSlotState(arr)
	if err != nil {
		return fmt.Errorf("expire %s: %w", b, err)
	}
	deadline := time.UnixMilli(st.deadline)
	err = e.eachBucketBatch(ctx, k, st, func(pipe redis.Pipeliner, keys []string) {
		for _, key := range keys {
			pipe.PExpireAt(ctx, key, deadline)
		}
	})
	if err != nil {
		return fmt.Errorf("expire %s lookups: %w", b, err)
	}
	return nil
}

// Delete removes the board and everything it holds. It is not atomic:
// stop writing to the board first.
func (e *Engine) Delete(ctx context.Context, b Board) error {
	if err := b.validate(); err != nil {
		return err
	}
	if b.Partitions > 0 {
		return e.deletePartitioned(ctx, b)
	}
	if b.auto() {
		e.shapes.Delete(b.String())
		if err := e.deletePartitioned(ctx, b.parted()); err != nil {
			return err
		}
	}
	return e.clear(ctx, b, false)
}

// clear removes everything b holds; keepMeta keeps its meta hash.
func (e *Engine) clear(ctx context.Context, b Board, keepMeta bool) error {
	k := b.keys()
	m, err := e.rdb.HMGet(ctx, k.meta(), "live", "la", "lb", "dirty").Result()
	if err != nil {
		return fmt.Errorf("delete %s: %w", b, err)
	}
	st, err := parseSlotState([]any{"0", m[0], m[1], m[2], m[3]})
	if err != nil {
		return fmt.Errorf("delete %s: %w", b, err)
	}
	// Clear both lookup slots whatever the meta says of the spare one.
	st.dirty = true
	err = e.eachBucketBatch(ctx, k, st, func(pipe redis.Pipeliner, keys []string) {
		pipe.Unlink(ctx, keys...)
	})
	if err == nil {
		keys := []string{k.live(), k.next()}
		if !keepMeta {
			keys = append(keys, k.meta())
		}
		err = e.rdb.Unlink(ctx, keys...).Err()
	}
	if err != nil {
		return fmt.Errorf("delete %s: %w", b, err)
	}
	return nil
}

// slotState is what a board's meta says about its slots.
type slotState struct {
	deadline int64
	live     string
	level    map[string]int
	dirty    bool // the non-live slot may hold keys
}

func (s slotState) other() string {
	if s.live == slotB {
		return slotA
	}
	return slotB
}

// parseSlotState reads {deadline, live, level a, level b, dirty}, where
// any of the last four may be missing (nil) and take defaults.
func parseSlotState(arr []any) (slotState, error) {
	if len(arr) != 5 {
		return slotState{}, fmt.Errorf("ranking: unexpected board state %v", arr)
	}
	str := func(v any, def string) string {
		if s, ok := v.(string); ok {
			return s
		}
		if n, ok := v.(int64); ok {
			return strconv.FormatInt(n, 10)
		}
		return def
	}
	st := slotState{live: slotA, level: map[string]int{}}
	var err1, err2, err3 error
	st.deadline, err1 = strconv.ParseInt(str(arr[0], "0"), 10, 64)
	if str(arr[1], slotA) == slotB {
		st.live = slotB
	}
	st.level[slotA], err2 = strconv.Atoi(str(arr[2], "0"))
	st.level[slotB], err3 = strconv.Atoi(str(arr[3], "0"))
	st.dirty = str(arr[4], "0") == "1"
	if err := errors.Join(err1, err2, err3); err != nil {
		return slotState{}, fmt.Errorf("ranking: unexpected board state %v: %w", arr, err)
	}
	return st, nil
}

// eachBucketBatch hands every lookup bucket the live slot (and, when
// dirty, the other slot) may have to fn in batches, one pipeline each.
func (e *Engine) eachBucketBatch(ctx context.Context, k boardKeys, st slotState, fn func(redis.Pipeliner, []string)) error {
	slots := []string{st.live}
	if st.dirty {
		slots = append(slots, st.other())
	}
	batch := make([]string, 0, keyBatch)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		pipe := e.rdb.Pipeline()
		fn(pipe, batch)
		_, err := pipe.Exec(ctx)
		batch = batch[:0]
		if errors.Is(err, redis.Nil) {
			err = nil
		}
		return err
	}
	var err error
	for _, slot := range slots {
		k.eachBucket(slot, st.level[slot], func(key string) {
			if err != nil {
				return
			}
			batch = append(batch, key)
			if len(batch) == keyBatch {
				err = flush()
			}
		})
	}
	if err != nil {
		return err
	}
	return flush()
}
