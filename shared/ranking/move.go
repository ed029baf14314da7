package ranking

// Moving partition bounds. A split replaces one partition by two, at its
// median score; a merge replaces two neighbours by one. Either way some
// partitions (From) are replaced by new ones (To) covering the same
// scores, in four steps, each recorded in the layout so an interrupted
// move resumes where it stopped:
//
//  1. begin: writes go to the old and the new layout alike (epoch E);
//     then From is fenced at E, so a write routed by an older layout
//     (which would reach From alone) is refused and routed again.
//  2. copy: every entry of From is copied into To with its version. A
//     write that raced it reached To itself, and versions decide.
//  3. switch: readers use To. From is still written, so a reader that
//     has not seen the switch yet still reads exact partitions.
//  4. retire: From is marked retired (a reader that meets it reads the
//     layout again; a write to it is dropped) and emptied; then writes go
//     to the new layout alone.
//
// No read is wrong while this runs. Entries written during a move are
// written twice, and the move costs a copy of From's entries.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrMoveRunning means a split or merge of the board is under way (or the
// layout changed under the request); Rebalance finishes it.
var ErrMoveRunning = errors.New("ranking: a partition move is under way")

// copyChunk is how many entries one step of a move's copy reads.
const copyChunk = 500

// Partition describes one partition of a partitioned board.
type Partition struct {
	// Tag is the partition's hash tag.
	Tag string
	// Best is the best score the partition may hold (nil for the first,
	// which holds everything better than the second's bound).
	Best *int64
	// Members is its number of entries.
	Members int64
}

// Partitions lists a partitioned board's partitions, best first, as
// readers see them. An auto board (PartitionAt) not converted yet is one
// partition: its sorted set.
func (e *Engine) Partitions(ctx context.Context, b Board) ([]Partition, error) {
	if err := b.validate(); err != nil {
		return nil, err
	}
	if b.auto() && b.Partitions == 0 {
		var out []Partition
		err := e.readByShape(ctx, b, func() error {
			n, err := e.totalOfSet(ctx, b)
			out = []Partition{{Tag: b.Tag, Members: n}}
			return err
		}, func(p Board) (err error) {
			out, err = e.Partitions(ctx, p)
			return err
		})
		return out, err
	}
	if b.Partitions == 0 {
		return nil, invalid("board %s is not partitioned", b)
	}
	var out []Partition
	err := e.readLoop(ctx, b, func(lay *layout) error {
		views, err := e.readParts(ctx, b, lay, readOpts{}, func(int) partRead { return partRead{rangeStart: -1} })
		if err != nil {
			return err
		}
		out = make([]Partition, len(views))
		for i, v := range views {
			out[i] = Partition{Tag: b.part(lay.Read[i].G).Tag, Members: v.total}
			if lo := lay.Read[i].Lo; lo != nil {
				best := flip(b.Order, *lo)
				out[i].Best = &best
			}
		}
		return nil
	})
	return out, err
}

// Split splits the partition at index i (best first) into two at its
// median score. A partition whose entries all share one score cannot be
// split (ErrInvalid).
func (e *Engine) Split(ctx context.Context, b Board, i int) error {
	lay, err := e.idleLayout(ctx, b)
	if err != nil {
		return err
	}
	if i < 0 || i >= len(lay.Read) {
		return invalid("split %s: no partition %d of %d", b, i, len(lay.Read))
	}
	at, err := e.medianBound(ctx, b, lay.Read[i])
	if err != nil {
		return err
	}
	lo := lay.Read[i].Lo
	to := spans{{Lo: lo, G: lay.gen()}, {Lo: &at, G: lay.gen()}}
	return e.startMove(ctx, b, lay, i, i+1, to)
}

// Merge merges the partitions at index i and i+1 (best first) into one.
func (e *Engine) Merge(ctx context.Context, b Board, i int) error {
	lay, err := e.idleLayout(ctx, b)
	if err != nil {
		return err
	}
	if i < 0 || i+1 >= len(lay.Read) {
		return invalid("merge %s: no partitions %d and %d of %d", b, i, i+1, len(lay.Read))
	}
	to := spans{{Lo: lay.Read[i].Lo, G: lay.gen()}}
	return e.startMove(ctx, b, lay, i, i+2, to)
}

// Rebalance finishes a move under way, or makes at most one: it splits
// the largest partition while there are fewer than b.Partitions, or while
// one holds more than twice its share; it merges the smallest pair of
// neighbours while there are more. It reports whether it moved anything.
//
// On an auto board (PartitionAt) it begins or continues the board's
// conversion to partitions once the board holds more than PartitionAt
// entries, stopping short of ctx's deadline (the next call resumes it);
// once converted, it keeps about PartitionAt/2 entries per partition.
func (e *Engine) Rebalance(ctx context.Context, b Board) (bool, error) {
	if err := b.validate(); err != nil {
		return false, err
	}
	if b.Partitions == 0 && b.auto() {
		return e.rebalanceAuto(ctx, b)
	}
	if b.Partitions == 0 {
		return false, nil
	}
	return e.rebalance(ctx, b, func(int64) int { return b.Partitions })
}

// rebalance is Rebalance toward target(total) partitions.
func (e *Engine) rebalance(ctx context.Context, b Board, target func(total int64) int) (bool, error) {
	lay, err := e.layoutOf(ctx, b, true, !b.auto())
	if err != nil {
		return false, err
	}
	if lay.Move != nil {
		return true, e.runMove(ctx, b, lay)
	}
	parts, err := e.Partitions(ctx, b)
	if err != nil {
		return false, err
	}
	var total int64
	largest, pair := 0, -1
	for i, p := range parts {
		total += p.Members
		if p.Members > parts[largest].Members {
			largest = i
		}
		if i > 0 && (pair < 0 || p.Members+parts[i-1].Members < parts[pair].Members+parts[pair+1].Members) {
			pair = i - 1
		}
	}
	want := target(total)
	share := max(total/int64(want), 1)
	switch {
	case len(parts) > want && pair >= 0:
		err = e.Merge(ctx, b, pair)
	case parts[largest].Members >= 2 && (len(parts) < want || parts[largest].Members > 2*share):
		err = e.Split(ctx, b, largest)
		if errors.Is(err, ErrInvalid) {
			return false, nil // one tie: nothing to split at
		}
	default:
		return false, nil
	}
	return err == nil, err
}

// idleLayout returns a copy of the board's current layout when no move
// runs.
func (e *Engine) idleLayout(ctx context.Context, b Board) (*layout, error) {
	if err := b.validate(); err != nil {
		return nil, err
	}
	if b.Partitions == 0 && b.auto() {
		sh, err := e.shapeOf(ctx, b, true)
		if err != nil {
			return nil, err
		}
		if sh.kind != shapeParted {
			return nil, invalid("board %s is not partitioned yet", b)
		}
		b = b.parted()
	}
	if b.Partitions == 0 {
		return nil, invalid("board %s is not partitioned", b)
	}
	lay, err := e.layoutOf(ctx, b, true, !b.auto())
	if err != nil {
		return nil, err
	}
	if lay.Epoch == 0 && b.auto() {
		return nil, fmt.Errorf("%s: %w", b, errNoLayout)
	}
	if lay.Move != nil {
		return nil, fmt.Errorf("%s: %w", b, ErrMoveRunning)
	}
	return lay.clone(), nil // edited by gen; the cached one is shared
}

// gen hands out the next partition generation of a layout being edited.
func (l *layout) gen() string {
	g := strconv.FormatInt(l.Next, 10)
	l.Next++
	return g
}

// clone copies a layout for editing.
func (l *layout) clone() *layout {
	c := *l
	c.Read = slices.Clone(l.Read)
	c.Write = slices.Clone(l.Write)
	if l.Move != nil {
		m := *l.Move
		c.Move = &m
	}
	return &c
}

// medianBound is the sorted-set score to split partition p at: its
// median entry's, or the next higher score when the median shares the
// partition's lowest score.
func (e *Engine) medianBound(ctx context.Context, b Board, p span) (int64, error) {
	live := b.part(p.G).keys().live()
	n, err := e.rdb.ZCard(ctx, live).Result()
	if err != nil {
		return 0, fmt.Errorf("split %s: %w", b, err)
	}
	mid, err := e.rdb.ZRangeWithScores(ctx, live, n/2, n/2).Result()
	if err != nil || len(mid) == 0 {
		return 0, fmt.Errorf("split %s: %w", b, errors.Join(err, invalid("partition %s is empty", p.G)))
	}
	at, err := integral(mid[0].Score)
	if err != nil {
		return 0, err
	}
	below, err := e.rdb.ZCount(ctx, live, "-inf", "("+strconv.FormatInt(at, 10)).Result()
	if err != nil {
		return 0, fmt.Errorf("split %s: %w", b, err)
	}
	if below > 0 {
		return at, nil
	}
	next, err := e.rdb.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{Key: live, ByScore: true,
		Start: "(" + strconv.FormatInt(at, 10), Stop: "+inf", Count: 1}).Result()
	if err != nil {
		return 0, fmt.Errorf("split %s: %w", b, err)
	}
	if len(next) == 0 {
		return 0, invalid("split %s: every entry of partition %s has one score", b, p.G)
	}
	return integral(next[0].Score)
}

// startMove records that Read[from:to] are being replaced by repl, then
// runs the move.
func (e *Engine) startMove(ctx context.Context, b Board, lay *layout, from, to int, repl spans) error {
	next := lay.clone()
	newRead := slices.Concat(lay.Read[:from], repl, lay.Read[to:])
	next.Write = []spans{lay.Read, newRead}
	next.Move = &move{Phase: "copy", From: lay.Read[from:to].gens(), To: repl.gens()}
	// A load under way on a partition would not see the move's copy.
	for _, g := range next.Move.From {
		building, err := e.rdb.HExists(ctx, b.part(g).keys().meta(), "build").Result()
		if err != nil {
			return err
		}
		if building {
			return fmt.Errorf("%s: a load is under way: %w", b, ErrMoveRunning)
		}
	}
	ok, now, err := e.setLayout(ctx, b, next)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%s: the layout changed: %w", b, ErrMoveRunning)
	}
	return e.runMove(ctx, b, now)
}

// runMove takes a move from its recorded phase to its end.
func (e *Engine) runMove(ctx context.Context, b Board, lay *layout) error {
	for lay.Move != nil {
		mv := lay.Move
		e.observe(mv.Phase)
		next := lay.clone()
		switch mv.Phase {
		case "copy":
			if err := e.copyMove(ctx, b, lay); err != nil {
				return fmt.Errorf("move %s: %w", b, err)
			}
			next.Read = next.Write[len(next.Write)-1]
			next.Move.Phase = "retire"
		case "retire":
			if err := e.retire(ctx, b, lay); err != nil {
				return fmt.Errorf("move %s: %w", b, err)
			}
			next.Write = []spans{lay.Read}
			next.Move = nil
		default:
			return fmt.Errorf("move %s: unknown phase %q", b, mv.Phase)
		}
		ok, now, err := e.setLayout(ctx, b, next)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%s: the layout changed: %w", b, ErrMoveRunning)
		}
		lay = now
	}
	e.observe("done")
	return nil
}

// observe tells a test's hook which phase a move enters.
func (e *Engine) observe(phase string) {
	if e.onMove != nil {
		e.onMove(phase)
	}
}

// copyMove fences the move's From partitions at the layout's epoch, then
// copies every entry of them into the partition of the new layout that
// holds its score. It checkpoints its position at home after each chunk,
// so a copy cut short (a deadline) continues where it stopped.
func (e *Engine) copyMove(ctx context.Context, b Board, lay *layout) error {
	epoch := strconv.FormatInt(lay.Epoch, 10)
	newLayout := lay.Write[len(lay.Write)-1]
	home := b.keys().layoutKey()
	from, cursor := 0, uint64(0)
	if cp, err := e.rdb.HGet(ctx, home, "copy").Result(); err == nil {
		var at int64
		if _, err := fmt.Sscanf(cp, "%d:%d:%d", &at, &from, &cursor); err != nil || at != lay.Epoch {
			from, cursor = 0, 0
		}
	}
	for ; from < len(lay.Move.From); from, cursor = from+1, 0 {
		k := b.part(lay.Move.From[from]).keys()
		if err := e.rdb.HSet(ctx, k.meta(), "fence", epoch).Err(); err != nil {
			return err
		}
		for first := true; first || cursor != 0; first = false {
			members, next, err := e.rdb.ZScan(ctx, k.live(), cursor, "", copyChunk).Result()
			if err != nil {
				return err
			}
			if err := e.copyEntries(ctx, b, k, lay.Epoch, newLayout, members); err != nil {
				return err
			}
			cursor = next
			at := fmt.Sprintf("%d:%d:%d", lay.Epoch, from, cursor)
			if cursor == 0 {
				at = fmt.Sprintf("%d:%d:0", lay.Epoch, from+1)
			}
			if err := e.rdb.HSet(ctx, home, "copy", at).Err(); err != nil {
				return err
			}
		}
	}
	return nil
}

// copyEntries copies the entries of ZSCAN's member, score list from the
// partition at k into newLayout's partitions, with their versions as the
// partition's lookup holds them now.
func (e *Engine) copyEntries(ctx context.Context, b Board, k boardKeys, epoch int64, newLayout spans, flat []string) error {
	if len(flat) == 0 {
		return nil
	}
	keys := k.heads()
	args := make([]any, 0, len(flat)/2)
	for i := 0; i < len(flat); i += 2 {
		_, id, err := splitMember(flat[i])
		if err != nil {
			return err
		}
		keys = k.appendIDKeys(keys, id)
		args = append(args, id)
	}
	v, err := e.run(ctx, versionsScript, keys, args...)
	if err != nil {
		return err
	}
	arr, _ := v.([]any)
	if len(arr)%4 != 0 {
		return fmt.Errorf("ranking: unexpected versions reply %v", v)
	}
	ops := map[string][]partOp{}
	var order []string
	for i := 0; i < len(arr); i += 4 {
		id, _ := arr[i].(string)
		pfx, _ := arr[i+1].(string)
		zs, _ := arr[i+2].(string)
		vs, _ := arr[i+3].(string)
		z, err1 := parseZScore(Asc, zs)
		ver, err2 := strconv.ParseInt(vs, 10, 64)
		ms, _, err3 := splitMember(pfx + id)
		if err := errors.Join(err1, err2, err3); err != nil {
			return err
		}
		it := Item{ID: id, Score: flip(b.Order, z), ReachedAt: reachedTime(ms), Version: ver}
		g := newLayout[newLayout.at(z)].G
		if _, ok := ops[g]; !ok {
			order = append(order, g)
		}
		ops[g] = append(ops[g], partOp{item: 0, it: it, epoch: epoch})
	}
	stale, err := e.applyParts(ctx, b, order, ops, make([]bool, 1))
	if err == nil && stale {
		err = fmt.Errorf("%s: the layout changed: %w", b, ErrMoveRunning)
	}
	return err
}

// retire marks the move's From partitions retired, empties them, and
// gives its To partitions the board's expiry, if it has one.
func (e *Engine) retire(ctx context.Context, b Board, lay *layout) error {
	for _, g := range lay.Move.From {
		p := b.part(g)
		k := p.keys()
		if err := e.rdb.HSet(ctx, k.meta(), "ret", "1").Err(); err != nil {
			return err
		}
		if err := e.clear(ctx, p, true); err != nil {
			return err
		}
		if err := e.rdb.PExpire(ctx, k.meta(), retiredTTL).Err(); err != nil {
			return err
		}
	}
	exp, err := e.rdb.HGet(ctx, b.keys().layoutKey(), "exp").Int64()
	if errors.Is(err, redis.Nil) {
		return nil
	}
	if err != nil {
		return err
	}
	ttl := time.Until(time.UnixMilli(exp))
	for _, g := range lay.Move.To {
		if err := e.Expire(ctx, b.part(g), max(ttl, time.Millisecond)); err != nil {
			return err
		}
	}
	return nil
}
