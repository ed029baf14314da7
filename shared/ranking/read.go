package ranking

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Top returns the best n entries and the board's total, in one round trip
// (a transaction of two reads; no script). With Also, the extra keys are
// read in the same round trip: the two reads then go in a plain pipeline
// beside them (a transaction cannot span hash slots), so a write landing
// between them can make the total differ from the entries by that write.
func (e *Engine) Top(ctx context.Context, b Board, n int, opts ...ReadOption) ([]Entry, int64, error) {
	if err := b.validate(); err != nil {
		return nil, 0, err
	}
	if n < 0 {
		return nil, 0, invalid("top n %d is negative", n)
	}
	ro := readOptions(opts)
	if b.Partitions > 0 {
		return e.pagePartitioned(ctx, b, 1, n, ro)
	}
	if !b.auto() {
		return e.topOfSet(ctx, b, n, ro)
	}
	var entries []Entry
	var total int64
	err := e.readByShape(ctx, b, func() (err error) {
		entries, total, err = e.topOfSet(ctx, b, n, ro)
		return err
	}, func(p Board) (err error) {
		entries, total, err = e.pagePartitioned(ctx, p, 1, n, ro)
		return err
	})
	return entries, total, err
}

// topOfSet is Top on one sorted set. An auto board's set that its
// conversion retired answers errShapeChanged.
func (e *Engine) topOfSet(ctx context.Context, b Board, n int, ro readOpts) ([]Entry, int64, error) {
	k := b.keys()
	live := k.live()
	pipe := e.rdb.TxPipeline()
	if len(ro.also) > 0 {
		pipe = e.rdb.Pipeline()
	}
	var best *redis.ZSliceCmd
	if n > 0 {
		best = pipe.ZRangeWithScores(ctx, live, 0, int64(n-1))
	}
	total := pipe.ZCard(ctx, live)
	var retired *redis.BoolCmd
	if b.auto() {
		retired = pipe.HExists(ctx, k.meta(), "ret")
	}
	also := ro.queue(ctx, pipe)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, 0, fmt.Errorf("top %d of %s: %w", n, b, err)
	}
	if retired != nil && retired.Val() {
		return nil, 0, errShapeChanged
	}
	if err := ro.store(also); err != nil {
		return nil, 0, fmt.Errorf("top %d of %s: %w", n, b, err)
	}
	if best == nil {
		return nil, total.Val(), nil
	}
	raw := make([]rawEntry, len(best.Val()))
	for i, z := range best.Val() {
		m, _ := z.Member.(string)
		zs, err := integral(z.Score)
		if err != nil {
			return nil, 0, fmt.Errorf("top %d of %s: %w", n, b, err)
		}
		raw[i] = rawEntry{member: m, z: zs}
	}
	entries, err := b.window(raw, 0, 0)
	if err != nil {
		return nil, 0, fmt.Errorf("top %d of %s: %w", n, b, err)
	}
	return entries, total.Val(), nil
}

// Page returns n entries from rank from (1-based) on, ranked, and the
// board's total, in one round trip: how a client scrolls a board past its
// first page. It is exact with ties: under Shared, a page that starts
// inside a tie gives it the rank the whole board gives it. Page from 1 is
// Top.
func (e *Engine) Page(ctx context.Context, b Board, from, n int, opts ...ReadOption) ([]Entry, int64, error) {
	if from == 1 {
		return e.Top(ctx, b, n, opts...)
	}
	if err := b.validate(); err != nil {
		return nil, 0, err
	}
	if from < 1 || n < 0 {
		return nil, 0, invalid("page of %d from rank %d: from must be at least 1 and n not negative", n, from)
	}
	ro := readOptions(opts)
	if b.Partitions > 0 {
		return e.pagePartitioned(ctx, b, from, n, ro)
	}
	if !b.auto() {
		return e.pageOfSet(ctx, b, from, n, ro)
	}
	var entries []Entry
	var total int64
	err := e.readByShape(ctx, b, func() (err error) {
		entries, total, err = e.pageOfSet(ctx, b, from, n, ro)
		return err
	}, func(p Board) (err error) {
		entries, total, err = e.pagePartitioned(ctx, p, from, n, ro)
		return err
	})
	return entries, total, err
}

// pageOfSet is Page on one sorted set.
func (e *Engine) pageOfSet(ctx context.Context, b Board, from, n int, ro readOpts) ([]Entry, int64, error) {
	start := int64(from - 1)
	k := b.keys()
	v, err := e.runReading(ctx, ro, pageScript, []string{k.live(), k.meta()}, start, n, flag(b.Ties == Shared))
	if err != nil {
		return nil, 0, fmt.Errorf("page from %d of %s: %w", from, b, err)
	}
	if v == "RETIRED" {
		return nil, 0, errShapeChanged
	}
	arr, ok := v.([]any)
	if !ok || len(arr) != 3 {
		return nil, 0, fmt.Errorf("page from %d of %s: unexpected reply %v", from, b, v)
	}
	r, err := ints(arr[:2], 2)
	if err != nil {
		return nil, 0, fmt.Errorf("page from %d of %s: unexpected reply %v", from, b, v)
	}
	total, better := r[0], r[1]
	raw, err := rawEntries(arr[2])
	if err != nil {
		return nil, 0, fmt.Errorf("page from %d of %s: %w", from, b, err)
	}
	entries, err := b.window(raw, start, better)
	if err != nil {
		return nil, 0, fmt.Errorf("page from %d of %s: %w", from, b, err)
	}
	return entries, total, nil
}

// ReadOption adds to a read.
type ReadOption func(*readOpts)

type readOpts struct{ also []alsoRead }

type alsoRead struct {
	key string
	dst *string
}

// Also makes a read (Top, Around, Among) also read the string at key, in
// the same round trip, into *dst ("" when the key does not exist): what a
// caller must know beside the board (how fresh it is, say) at no extra
// round trip. The key may be in any hash slot: it is read beside the
// board's script or transaction in one pipeline, never inside them.
func Also(key string, dst *string) ReadOption {
	return func(o *readOpts) { o.also = append(o.also, alsoRead{key: key, dst: dst}) }
}

func readOptions(opts []ReadOption) readOpts {
	var o readOpts
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

func (o readOpts) queue(ctx context.Context, pipe redis.Pipeliner) []*redis.StringCmd {
	cmds := make([]*redis.StringCmd, len(o.also))
	for i, a := range o.also {
		cmds[i] = pipe.Get(ctx, a.key)
	}
	return cmds
}

func (o readOpts) store(cmds []*redis.StringCmd) error {
	for i, c := range cmds {
		v, err := c.Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("read %s: %w", o.also[i].key, err)
		}
		*o.also[i].dst = v
	}
	return nil
}

// runReading evaluates one script and the options' extra reads in one
// pipeline: one round trip once Redis has the script cached, one more
// (by source) after it lost its script cache. Without extra reads it is run.
func (e *Engine) runReading(ctx context.Context, ro readOpts, s *redis.Script, keys []string, args ...any) (any, error) {
	if len(ro.also) == 0 {
		return e.run(ctx, s, keys, args...)
	}
	send := func(bySource bool) (*redis.Cmd, []*redis.StringCmd) {
		pipe := e.rdb.Pipeline()
		var c *redis.Cmd
		if bySource {
			c = s.Eval(ctx, pipe, keys, args...)
		} else {
			c = s.EvalSha(ctx, pipe, keys, args...)
		}
		also := ro.queue(ctx, pipe)
		_, _ = pipe.Exec(ctx) // errors are read per command below
		return c, also
	}
	c, also := send(false)
	if redis.HasErrorPrefix(c.Err(), "NOSCRIPT") {
		c, also = send(true)
	}
	v, err := c.Result()
	if errors.Is(err, redis.Nil) {
		v, err = nil, nil
	}
	if err != nil {
		return nil, err
	}
	return v, ro.store(also)
}

// Total returns the number of entries on the board.
func (e *Engine) Total(ctx context.Context, b Board) (int64, error) {
	if err := b.validate(); err != nil {
		return 0, err
	}
	if b.Partitions > 0 {
		return e.totalPartitioned(ctx, b)
	}
	if !b.auto() {
		n, err := e.rdb.ZCard(ctx, b.keys().live()).Result()
		if err != nil {
			return 0, fmt.Errorf("count %s: %w", b, err)
		}
		return n, nil
	}
	var n int64
	err := e.readByShape(ctx, b, func() (err error) {
		n, err = e.totalOfSet(ctx, b)
		return err
	}, func(p Board) (err error) {
		n, err = e.totalPartitioned(ctx, p)
		return err
	})
	return n, err
}

// totalOfSet is Total on an auto board's sorted set: errShapeChanged once
// its conversion retired it.
func (e *Engine) totalOfSet(ctx context.Context, b Board) (int64, error) {
	k := b.keys()
	pipe := e.rdb.TxPipeline()
	total := pipe.ZCard(ctx, k.live())
	retired := pipe.HExists(ctx, k.meta(), "ret")
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, fmt.Errorf("count %s: %w", b, err)
	}
	if retired.Val() {
		return 0, errShapeChanged
	}
	return total.Val(), nil
}

// Exists reports whether the board has been written, loaded or summed since
// Redis last lost it (or it expired), even if it holds no entries now.
func (e *Engine) Exists(ctx context.Context, b Board) (bool, error) {
	if err := b.validate(); err != nil {
		return false, err
	}
	key := b.keys().meta()
	if b.Partitions > 0 {
		key = b.keys().layoutKey()
	}
	n, err := e.rdb.Exists(ctx, key).Result()
	if err != nil {
		return false, fmt.Errorf("check %s exists: %w", b, err)
	}
	return n == 1, nil
}

// Around returns id's entry and the window of up to k entries on each side
// of it (fewer at the edges; the window includes id) plus the total, in one
// round trip. It returns ErrNotRanked when id has no score.
func (e *Engine) Around(ctx context.Context, b Board, id string, k int, opts ...ReadOption) (Entry, []Entry, int64, error) {
	if err := b.validate(); err != nil {
		return Entry{}, nil, 0, err
	}
	if err := validateID(id); err != nil {
		return Entry{}, nil, 0, err
	}
	if k < 0 {
		return Entry{}, nil, 0, invalid("around k %d is negative", k)
	}
	ro := readOptions(opts)
	if b.Partitions > 0 {
		self, window, total, err := e.aroundPartitioned(ctx, b, id, k, ro)
		if err != nil {
			return Entry{}, nil, 0, err
		}
		return self, window, total, nil
	}
	if !b.auto() {
		return e.aroundInSet(ctx, b, id, k, ro)
	}
	var self Entry
	var window []Entry
	var total int64
	err := e.readByShape(ctx, b, func() (err error) {
		self, window, total, err = e.aroundInSet(ctx, b, id, k, ro)
		return err
	}, func(p Board) (err error) {
		self, window, total, err = e.aroundPartitioned(ctx, p, id, k, ro)
		return err
	})
	return self, window, total, err
}

// aroundInSet is Around on one sorted set.
func (e *Engine) aroundInSet(ctx context.Context, b Board, id string, k int, ro readOpts) (Entry, []Entry, int64, error) {
	keys := b.keys()
	v, err := e.runReading(ctx, ro, aroundScript, keys.appendIDKeys(keys.heads(), id), id, k, flag(b.Ties == Shared))
	if err != nil {
		return Entry{}, nil, 0, fmt.Errorf("rank %s on %s: %w", id, b, err)
	}
	if v == "RETIRED" {
		return Entry{}, nil, 0, errShapeChanged
	}
	arr, ok := v.([]any)
	if !ok {
		return Entry{}, nil, 0, fmt.Errorf("rank %s on %s: unexpected reply %v", id, b, v)
	}
	if len(arr) == 0 {
		return Entry{}, nil, 0, fmt.Errorf("rank %s on %s: %w", id, b, ErrNotRanked)
	}
	r, err := ints(arr[:4], 4)
	if err != nil || len(arr) != 5 {
		return Entry{}, nil, 0, fmt.Errorf("rank %s on %s: unexpected reply %v", id, b, v)
	}
	total, index, start, better := r[0], r[1], r[2], r[3]
	raw, err := rawEntries(arr[4])
	if err != nil {
		return Entry{}, nil, 0, fmt.Errorf("rank %s on %s: %w", id, b, err)
	}
	window, err := b.window(raw, start, better)
	if err != nil || index-start >= int64(len(window)) {
		return Entry{}, nil, 0, fmt.Errorf("rank %s on %s: unexpected reply %v: %w", id, b, v, err)
	}
	return window[index-start], window, total, nil
}

// Among returns the entries of ids that have a score, best first, ranked
// among themselves (rank 1 is the best of them, with the board's Ties), in
// one round trip: a player's rank among friends. Repeated ids count once.
func (e *Engine) Among(ctx context.Context, b Board, ids []string, opts ...ReadOption) ([]Entry, error) {
	if err := b.validate(); err != nil {
		return nil, err
	}
	seen := make(map[string]bool, len(ids))
	uniq := make([]string, 0, len(ids))
	for _, id := range ids {
		if err := validateID(id); err != nil {
			return nil, err
		}
		if !seen[id] {
			seen[id] = true
			uniq = append(uniq, id)
		}
	}
	ro := readOptions(opts)
	if len(uniq) == 0 {
		// Nothing to rank, but the extra reads are still owed.
		pipe := e.rdb.Pipeline()
		also := ro.queue(ctx, pipe)
		if len(also) > 0 {
			if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
				return nil, fmt.Errorf("rank no ids on %s: %w", b, err)
			}
		}
		return nil, ro.store(also)
	}
	if b.Partitions > 0 {
		return e.amongPartitioned(ctx, b, uniq, ro)
	}
	if !b.auto() {
		return e.amongInSet(ctx, b, uniq, ro)
	}
	var out []Entry
	err := e.readByShape(ctx, b, func() (err error) {
		out, err = e.amongInSet(ctx, b, uniq, ro)
		return err
	}, func(p Board) (err error) {
		out, err = e.amongPartitioned(ctx, p, uniq, ro)
		return err
	})
	return out, err
}

// amongInSet is Among on one sorted set.
func (e *Engine) amongInSet(ctx context.Context, b Board, uniq []string, ro readOpts) ([]Entry, error) {
	k := b.keys()
	keys := k.heads()
	args := make([]any, len(uniq))
	for i, id := range uniq {
		keys = k.appendIDKeys(keys, id)
		args[i] = id
	}
	v, err := e.runReading(ctx, ro, amongScript, keys, args...)
	if err != nil {
		return nil, fmt.Errorf("rank %d ids on %s: %w", len(uniq), b, err)
	}
	if v == "RETIRED" {
		return nil, errShapeChanged
	}
	found, err := amongEntries(v, uniq)
	if err != nil {
		return nil, fmt.Errorf("rank %d ids on %s: %w", len(uniq), b, err)
	}
	sortRaw(found)
	return b.window(found, 0, 0)
}

// amongEntries reads among.lua's {index, member prefix, score, ...} for
// ids.
func amongEntries(v any, ids []string) ([]rawEntry, error) {
	arr, ok := v.([]any)
	if !ok || len(arr)%3 != 0 {
		return nil, fmt.Errorf("ranking: unexpected reply %v", v)
	}
	found := make([]rawEntry, 0, len(arr)/3)
	for i := 0; i < len(arr); i += 3 {
		idx, ok1 := arr[i].(int64)
		pfx, ok2 := arr[i+1].(string)
		zs, ok3 := arr[i+2].(string)
		if !ok1 || !ok2 || !ok3 || idx < 0 || idx >= int64(len(ids)) {
			return nil, fmt.Errorf("ranking: unexpected reply %v", v)
		}
		z, err := parseZScore(Asc, zs)
		if err != nil {
			return nil, err
		}
		found = append(found, rawEntry{member: pfx + ids[idx], z: z})
	}
	return found, nil
}

// rawEntry is a sorted-set member and its (sorted-set) score.
type rawEntry struct {
	member string
	z      int64
}

// rawEntries reads a script's flat member, score list.
func rawEntries(v any) ([]rawEntry, error) {
	flat, ok := v.([]any)
	if !ok || len(flat)%2 != 0 {
		return nil, fmt.Errorf("ranking: unexpected member list %v", v)
	}
	out := make([]rawEntry, len(flat)/2)
	for i := range out {
		m, ok1 := flat[2*i].(string)
		zs, ok2 := flat[2*i+1].(string)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("ranking: unexpected member list %v", v)
		}
		z, err := parseZScore(Asc, zs)
		if err != nil {
			return nil, err
		}
		out[i] = rawEntry{member: m, z: z}
	}
	return out, nil
}

// window decodes entries that start at 0-based position start of the
// board, ranking each. better is the number of entries strictly better
// than the first (needed for Shared ties only).
func (b Board) window(raw []rawEntry, start, better int64) ([]Entry, error) {
	out := make([]Entry, 0, len(raw))
	for i, r := range raw {
		ms, id, err := splitMember(r.member)
		if err != nil {
			return nil, err
		}
		score := r.z
		if b.Order == Desc {
			score = -score
		}
		rank := start + int64(i) + 1
		if b.Ties == Shared {
			switch {
			case i == 0:
				rank = better + 1
			case raw[i-1].z == r.z:
				rank = int64(out[i-1].Rank)
			}
		}
		out = append(out, Entry{ID: id, Score: score, ReachedAt: reachedTime(ms), Rank: int(rank)})
	}
	return out, nil
}
