package ranking

// Boards that partition themselves once they grow.
//
// A board with PartitionAt > 0 (and Partitions 0) starts as one sorted
// set, the cheapest shape, and Rebalance turns it into score-range
// partitions (partition.go) once it holds more than PartitionAt entries.
// Callers read and write it the same way before, during and after: the
// engine finds its shape from what Redis answers.
//
// The conversion is a move whose From is the whole set, in three steps
// recorded on the set's meta, so one cut short resumes where it stopped:
//
//  1. begin: the partitions' layout is made from the set's quantiles and
//     the set is fenced at the layout's epoch. A write that meets the
//     fence (STALE) learns of the conversion and from then on writes the
//     set and the partitions alike. Reads still read the set: it stays
//     exact.
//  2. copy: every ID in the set's lookup, entries and tombstones, is
//     written into the partitions with its version, some lookup buckets at
//     a time, through the partitions' own write path (so each ID's
//     location is recorded). A write that raced the copy reached the
//     partitions itself and versions decide. An ID forgotten meanwhile
//     (an erasure, which bumps the set's 'fg' count) is forgotten in the
//     partitions again.
//  3. retire: the set is marked retired in one step, then emptied. A read
//     or write that meets the mark (RETIRED, or STALE for a writer that
//     never saw the fence) reads the shape again and uses the partitions
//     from then on. The marked meta stays: it is how a process that last
//     saw the set learns where the board went.
//
// A load (rebuild) of the set that begins while a conversion copies
// abandons the conversion, since its copy may hold what the load drops;
// the next conversion begins once the writes that knew of the abandoned
// one have forgotten it (reconvertAfter).

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// errShapeChanged says an auto board was not in the shape the caller
// took it to be in: read the shape again and retry.
var errShapeChanged = errors.New("ranking: the board changed shape")

// Conversion tuning: lookup buckets read per round trip of the copy, IDs
// written to the partitions per step, how long before a deadline a step
// stops rather than overrun it, and how long after an abandoned
// conversion the next may begin (writers cache a shape for up to
// layoutTTL).
const (
	convertItems   = 4000
	convertReserve = 500 * time.Millisecond
	shapeAttempts  = 3
)

// Variables so tests can take a conversion in many small steps and
// begin again at once.
var (
	convertBuckets int64 = 256
	reconvertAfter       = 2 * layoutTTL
)

type shapeKind int

const (
	// shapeSet is one sorted set.
	shapeSet shapeKind = iota
	// shapeConverting is the set, fenced at fence: it still answers reads,
	// and writes go to the partitions as well.
	shapeConverting
	// shapeParted is partitions; the set is retired.
	shapeParted
)

type shape struct {
	kind  shapeKind
	fence int64
}

// auto reports whether b picks its own shape.
func (b Board) auto() bool { return b.PartitionAt > 0 }

// parted is an auto board as its partitions: the partitioned board code
// sees a board with partitions, and PartitionAt tells it that the layout
// is made by a conversion only, never by a write.
func (b Board) parted() Board {
	p := b
	p.Partitions = 1
	return p
}

// autoTarget is how many partitions an auto board of total entries
// keeps: about PartitionAt/2 entries each, at least 2.
func (b Board) autoTarget(total int64) int {
	half := max(b.PartitionAt/2, 1)
	n := (total + half - 1) / half
	return int(min(max(n, 2), MaxPartitions))
}

// shapeOf returns the shape this process last saw b in (one sorted set
// when it saw none: a read or write of the set says when that is wrong),
// or, with fresh, the shape Redis records now.
func (e *Engine) shapeOf(ctx context.Context, b Board, fresh bool) (shape, error) {
	if !fresh {
		if v, ok := e.shapes.Load(b.String()); ok {
			return v.(shape), nil
		}
		return shape{kind: shapeSet}, nil
	}
	m, err := e.rdb.HMGet(ctx, b.keys().meta(), "fence", "ret").Result()
	if err != nil {
		return shape{}, fmt.Errorf("read the shape of %s: %w", b, err)
	}
	sh := shape{kind: shapeSet}
	switch {
	case m[1] != nil:
		sh.kind = shapeParted
	case m[0] != nil:
		f, err := strconv.ParseInt(fmt.Sprint(m[0]), 10, 64)
		if err != nil {
			return shape{}, fmt.Errorf("read the shape of %s: fence %v: %w", b, m[0], err)
		}
		sh = shape{kind: shapeConverting, fence: f}
	}
	e.shapes.Store(b.String(), sh)
	return sh, nil
}

// byShape runs op with b's shape, reading the shape again and retrying
// when op says it was not b's (errShapeChanged).
func (e *Engine) byShape(ctx context.Context, b Board, op func(shape) error) error {
	var err error
	for attempt := 0; attempt < shapeAttempts; attempt++ {
		var sh shape
		if sh, err = e.shapeOf(ctx, b, attempt > 0); err != nil {
			return err
		}
		if err = op(sh); !errors.Is(err, errShapeChanged) {
			return err
		}
	}
	return fmt.Errorf("%s: %w", b, err)
}

// readByShape is byShape for a read: the set answers it until the
// conversion retires the set (it is exact while converting), the
// partitions after.
func (e *Engine) readByShape(ctx context.Context, b Board, set func() error, parts func(Board) error) error {
	return e.byShape(ctx, b, func(sh shape) error {
		if sh.kind == shapeParted {
			return parts(b.parted())
		}
		return set()
	})
}

// upsertByShape is UpsertMany on an auto board: to the set (with the
// fence while converting, and then to the partitions as well) or to the
// partitions. What the set says is what applied; a write moved to the
// partitions by a retirement is applied again there (versions make that
// harmless).
func (e *Engine) upsertByShape(ctx context.Context, b Board, items []Item) ([]bool, error) {
	applied := make([]bool, len(items))
	err := e.byShape(ctx, b, func(sh shape) error {
		var got []bool
		var err error
		if sh.kind == shapeParted {
			got, err = e.upsertPartitioned(ctx, b.parted(), items)
			if errors.Is(err, errNoLayout) {
				return errShapeChanged // Redis lost the board
			}
		} else {
			var st []int64
			st, err = e.upsertSet(ctx, b, items, sh.fence)
			got = appliedOf(st)
			if err == nil && sh.kind == shapeConverting {
				// What the set took, or holds already (a retry), the
				// partitions take too; not what it refused (the
				// partitions may not know the ID yet).
				var took []Item
				for i, s := range st {
					if s > 0 {
						took = append(took, items[i])
					}
				}
				err = e.alsoToPartitions(ctx, b, took)
			}
		}
		for i, ok := range got {
			applied[i] = applied[i] || ok
		}
		return err
	})
	return applied, err
}

// alsoToPartitions writes a converting board's items to its partitions.
// A layout gone means the conversion was abandoned: the set alone holds
// the board again.
func (e *Engine) alsoToPartitions(ctx context.Context, b Board, items []Item) error {
	if len(items) == 0 {
		return nil
	}
	_, err := e.upsertPartitioned(ctx, b.parted(), items)
	if errors.Is(err, errNoLayout) {
		e.shapes.Delete(b.String())
		return nil
	}
	return err
}

// forgetByShape is Forget on an auto board: the set always (it says
// whether the board is converting or converted), and then the partitions.
func (e *Engine) forgetByShape(ctx context.Context, b Board, id string) error {
	k := b.keys()
	v, err := e.run(ctx, forgetScript, k.appendIDKeys(k.heads(), id), id)
	if err != nil {
		return fmt.Errorf("forget %s on %s: %w", id, b, err)
	}
	arr, ok := v.([]any)
	if !ok || len(arr) != 2 {
		return fmt.Errorf("forget %s on %s: unexpected reply %v", id, b, v)
	}
	if fence, _ := arr[0].(string); fence == "0" && arr[1] == int64(0) {
		return nil
	}
	return e.forgetPartitioned(ctx, b.parted(), id)
}

// Conversion state on the set's meta (see convert.lua).
type conversion struct {
	// over is set when no conversion is under way (another process
	// finished or abandoned it).
	over   bool
	fence  int64
	seq    string // the load sequence when it began
	live   string // the lookup slot it copies
	levels int    // the slot's levels 0..levels it copies
	at     int64  // the next bucket, numbered over those levels
	forgot string // the set's count of Forgets while fenced
	lseq   string // the load sequence now
	build  bool   // a load runs now
}

func (e *Engine) conversionOf(ctx context.Context, b Board) (conversion, error) {
	m, err := e.rdb.HMGet(ctx, b.keys().meta(), "fence", "cvseq", "cvlive", "cvlvl", "cvat", "fg", "lseq", "build", "ret").Result()
	if err != nil {
		return conversion{}, err
	}
	return parseConversion(m)
}

func parseConversion(m []any) (conversion, error) {
	str := func(v any) string {
		s, _ := v.(string)
		return s
	}
	if m[0] == nil || m[8] != nil {
		return conversion{over: true}, nil
	}
	var c conversion
	var err1, err2, err3 error
	c.fence, err1 = strconv.ParseInt(str(m[0]), 10, 64)
	c.seq, c.live = str(m[1]), str(m[2])
	c.levels, err2 = strconv.Atoi(str(m[3]))
	c.at, err3 = strconv.ParseInt(str(m[4]), 10, 64)
	c.forgot, c.lseq, c.build = str(m[5]), str(m[6]), m[7] != nil
	if c.lseq == "" {
		c.lseq = "0"
	}
	if err := errors.Join(err1, err2, err3); err != nil {
		return conversion{}, fmt.Errorf("ranking: unexpected conversion state %v: %w", m, err)
	}
	return c, nil
}

// abandoned reports whether a load began since the conversion did.
func (c conversion) abandoned() bool { return c.build || c.lseq != c.seq }

// buckets is how many lookup buckets the copy reads: every bucket of
// levels 0..levels.
func (c conversion) buckets() int64 {
	var n int64
	for l := 0; l <= c.levels && l < levels; l++ {
		n += 1 << (levelBits * l)
	}
	return n
}

// bucketAt is the key of the copy's i-th bucket.
func (c conversion) bucketAt(k boardKeys, i int64) string {
	for l := 0; l < levels; l++ {
		n := int64(1) << (levelBits * l)
		if i < n {
			return k.bucket(c.live, l, uint64(i))
		}
		i -= n
	}
	return ""
}

// rebalanceAuto is Rebalance of an auto board: begin or continue its
// conversion once it outgrows PartitionAt, and once converted, keep its
// partitions near PartitionAt/2 entries each.
func (e *Engine) rebalanceAuto(ctx context.Context, b Board) (bool, error) {
	sh, err := e.shapeOf(ctx, b, true)
	if err != nil {
		return false, err
	}
	switch sh.kind {
	case shapeParted:
		return e.rebalance(ctx, b.parted(), b.autoTarget)
	case shapeConverting:
		return true, e.convert(ctx, b)
	}
	total, err := e.rdb.ZCard(ctx, b.keys().live()).Result()
	if err != nil || total <= b.PartitionAt {
		return false, err
	}
	begun, err := e.beginConversion(ctx, b, total)
	if err != nil || !begun {
		return false, err
	}
	return true, e.convert(ctx, b)
}

// beginConversion lays out the partitions from the set's quantiles and
// fences the set. It reports false when it may not begin yet: a load
// runs, another process is beginning one, or one was abandoned lately.
func (e *Engine) beginConversion(ctx context.Context, b Board, total int64) (bool, error) {
	k := b.keys()
	m, err := e.rdb.HMGet(ctx, k.meta(), "cvab", "exp").Result()
	if err != nil {
		return false, err
	}
	if ab, _ := strconv.ParseInt(fmt.Sprint(m[0]), 10, 64); ab > 0 && time.Since(time.UnixMilli(ab)) < reconvertAfter {
		return false, nil
	}
	// One process begins it; the others find it begun.
	ok, err := e.rdb.SetNX(ctx, k.base+"cvlock", "1", 2*rebalanceLease).Result()
	if err != nil || !ok {
		return false, err
	}
	defer e.rdb.Del(context.WithoutCancel(ctx), k.base+"cvlock")
	p := b.parted()
	// What an abandoned conversion left (writes that had not heard of
	// its end may have written since it cleared up).
	if err := e.deletePartitioned(ctx, p); err != nil {
		return false, err
	}
	lay, err := e.quantileLayout(ctx, b, total)
	if err != nil {
		return false, err
	}
	v, err := e.run(ctx, layoutScript, []string{k.layoutKey()}, "", lay.encode())
	if err != nil {
		return false, fmt.Errorf("lay out the partitions of %s: %w", b, err)
	}
	arr, _ := v.([]any)
	if len(arr) != 2 {
		return false, fmt.Errorf("lay out the partitions of %s: unexpected reply %v", b, v)
	}
	if lay, err = parseLayout(arr[0], arr[1]); err != nil {
		return false, err
	}
	e.remember(p, lay)
	exp, _ := m[1].(string)
	if err := e.publishEpoch(ctx, p, lay.Epoch, exp); err != nil {
		return false, err
	}
	if exp != "" {
		if err := e.rdb.HSet(ctx, k.layoutKey(), "exp", exp).Err(); err != nil {
			return false, err
		}
	}
	fence := strconv.FormatInt(lay.Epoch, 10)
	res, err := e.run(ctx, convertScript, []string{k.meta()}, "begin", fence)
	if err != nil {
		return false, fmt.Errorf("begin converting %s: %w", b, err)
	}
	if res != "OK" {
		// A load runs: leave the set as it is.
		return false, e.deletePartitioned(ctx, p)
	}
	e.shapes.Store(b.String(), shape{kind: shapeConverting, fence: lay.Epoch})
	e.observe("convert")
	return true, nil
}

// rebalanceLease bounds how long one process may take to begin a
// conversion before another may.
const rebalanceLease = 10 * time.Second

// quantileLayout splits the set into autoTarget(total) partitions of
// about equal size: partition i begins at the score of the entry at
// i*total/n (a tie is never split; equal bounds merge).
func (e *Engine) quantileLayout(ctx context.Context, b Board, total int64) (*layout, error) {
	n := b.autoTarget(total)
	pipe := e.rdb.Pipeline()
	cmds := make([]*redis.ZSliceCmd, n-1)
	for i := range cmds {
		at := int64(i+1) * total / int64(n)
		cmds[i] = pipe.ZRangeWithScores(ctx, b.keys().live(), at, at)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("find the quantiles of %s: %w", b, err)
	}
	read := spans{{G: "1"}}
	for _, c := range cmds {
		if len(c.Val()) == 0 {
			continue
		}
		z, err := integral(c.Val()[0].Score)
		if err != nil {
			return nil, err
		}
		if last := read[len(read)-1].Lo; last != nil && *last >= z {
			continue
		}
		read = append(read, span{Lo: &z, G: strconv.Itoa(len(read) + 1)})
	}
	return &layout{Next: int64(len(read) + 1), Read: read, Write: []spans{read}}, nil
}

// convert copies the set into the partitions from where the copy stands,
// until it is done (then retires the set) or ctx's deadline is near (it
// resumes at the next call).
func (e *Engine) convert(ctx context.Context, b Board) error {
	k := b.keys()
	p := b.parted()
	for {
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < convertReserve {
			return nil
		}
		c, err := e.conversionOf(ctx, b)
		if err != nil {
			return fmt.Errorf("convert %s: %w", b, err)
		}
		if c.over {
			e.shapes.Delete(b.String())
			return nil
		}
		if c.abandoned() {
			return e.abandonConversion(ctx, b, c.fence)
		}
		if c.at >= c.buckets() {
			return e.finishConversion(ctx, b, c.fence)
		}
		next := min(c.at+convertBuckets, c.buckets())
		if err := e.copyBuckets(ctx, b, p, c, next); err != nil {
			if errors.Is(err, errNoLayout) {
				return nil // abandoned by another process meanwhile
			}
			return fmt.Errorf("convert %s: %w", b, err)
		}
		if err := e.rdb.HSet(ctx, k.meta(), "cvat", next).Err(); err != nil {
			return fmt.Errorf("convert %s: %w", b, err)
		}
		e.observe("convert")
	}
}

// copyBuckets writes the IDs of the set's buckets c.at..next-1 into the
// partitions, then forgets there again any of them the set forgot while
// it ran.
func (e *Engine) copyBuckets(ctx context.Context, b, p Board, c conversion, next int64) error {
	k := b.keys()
	pipe := e.rdb.Pipeline()
	keys := make([]string, 0, next-c.at)
	cmds := make([]*redis.MapStringStringCmd, 0, next-c.at)
	for i := c.at; i < next; i++ {
		keys = append(keys, c.bucketAt(k, i))
		cmds = append(cmds, pipe.HGetAll(ctx, keys[len(keys)-1]))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	type found struct {
		id, bucket, prefix string
		version            int64
	}
	var ids []found
	for i, cmd := range cmds {
		for id, v := range cmd.Val() {
			ver, pfx, err := decodeLookup(v)
			if err != nil {
				return fmt.Errorf("bucket %s: %w", keys[i], err)
			}
			ids = append(ids, found{id: id, bucket: keys[i], prefix: pfx, version: ver})
		}
	}
	for start := 0; start < len(ids); start += convertItems {
		batch := ids[start:min(start+convertItems, len(ids))]
		pipe := e.rdb.Pipeline()
		scores := make([]*redis.FloatCmd, len(batch))
		for i, f := range batch {
			if f.prefix != "" {
				scores[i] = pipe.ZScore(ctx, k.live(), f.prefix+f.id)
			}
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		items := make([]Item, 0, len(batch))
		for i, f := range batch {
			if f.prefix == "" {
				items = append(items, Item{ID: f.id, Version: f.version, Removed: true})
				continue
			}
			z, err := scores[i].Result()
			if errors.Is(err, redis.Nil) {
				continue // changed since: that write went to the partitions itself
			}
			if err != nil {
				return err
			}
			zs, err := integral(z)
			if err != nil {
				return err
			}
			ms, _, err := splitMember(f.prefix + f.id)
			if err != nil {
				return err
			}
			items = append(items, Item{ID: f.id, Score: flip(b.Order, zs), ReachedAt: reachedTime(ms), Version: f.version})
		}
		if len(items) > 0 {
			if _, err := e.upsertPartitioned(ctx, p, items); err != nil {
				return err
			}
		}
	}
	forgot, err := e.rdb.HGet(ctx, k.meta(), "fg").Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	if forgot == c.forgot {
		return nil
	}
	// Something was forgotten meanwhile: whatever the set no longer has
	// at all was erased, and may have been copied after it was.
	pipe = e.rdb.Pipeline()
	held := make([]*redis.BoolCmd, len(ids))
	for i, f := range ids {
		held[i] = pipe.HExists(ctx, f.bucket, f.id)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	for i, f := range ids {
		if !held[i].Val() {
			if err := e.forgetPartitioned(ctx, p, f.id); err != nil {
				return err
			}
		}
	}
	return nil
}

// decodeLookup reads a lookup value: an entry's 8-byte member prefix and
// decimal version, or a tombstone's bare version (prefix "").
func decodeLookup(v string) (int64, string, error) {
	pfx := ""
	if len(v) > 0 && v[0] == 0 {
		if len(v) < 9 {
			return 0, "", fmt.Errorf("ranking: unexpected lookup value %q", v)
		}
		pfx, v = v[:8], v[8:]
	}
	ver, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, "", fmt.Errorf("ranking: unexpected lookup value %q: %w", v, err)
	}
	return ver, pfx, nil
}

// finishConversion retires the set: from now on the partitions answer.
// The partitions take the board's expiry, if it has one.
func (e *Engine) finishConversion(ctx context.Context, b Board, fence int64) error {
	k := b.keys()
	p := b.parted()
	exp, err := e.rdb.HGet(ctx, k.meta(), "exp").Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	if exp > 0 {
		if err := e.Expire(ctx, p, max(time.Until(time.UnixMilli(exp)), time.Millisecond)); err != nil {
			return err
		}
	}
	e.observe("retire")
	res, err := e.run(ctx, convertScript, []string{k.meta()}, "finish", strconv.FormatInt(fence, 10))
	if err != nil {
		return fmt.Errorf("retire the set of %s: %w", b, err)
	}
	switch res {
	case "OK":
	case "ABANDON":
		return e.abandonConversion(ctx, b, fence)
	default:
		return nil // another process finished it
	}
	e.shapes.Store(b.String(), shape{kind: shapeParted})
	if err := e.clear(ctx, b, true); err != nil {
		return fmt.Errorf("empty the retired set of %s: %w", b, err)
	}
	e.observe("converted")
	return nil
}

// abandonConversion drops a conversion and what it copied; the set holds
// the board as it did.
func (e *Engine) abandonConversion(ctx context.Context, b Board, fence int64) error {
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	if _, err := e.run(ctx, convertScript, []string{b.keys().meta()}, "abandon", strconv.FormatInt(fence, 10), now); err != nil {
		return fmt.Errorf("abandon converting %s: %w", b, err)
	}
	e.shapes.Delete(b.String())
	return e.deletePartitioned(ctx, b.parted())
}
