package ranking

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/redis/go-redis/v9"

	"github.com/rallyhq/rally/shared/cache"
)

// readAttempts bounds how often a read starts again after it met a
// partition that a move retired (it then reads the layout afresh).
const readAttempts = 4

// errRetired says a read met a retired partition.
var errRetired = errors.New("ranking: partition retired")

// partRead asks one partition for its total and, optionally, a range, its
// head, its tail and a window around an ID (see partread.lua).
type partRead struct {
	rangeStart, rangeN int64 // rangeStart -1 for none
	head, tail         int
	id                 string
	k                  int
}

// partView is what one partition answered.
type partView struct {
	total                   int64
	rng, head, tail         []rawEntry
	rangeBetter, tailBetter int64
	found                   bool
	index, start, better    int64
	window                  []rawEntry
}

func (r partRead) call(b Board, g string) cache.ScriptCall {
	k := b.part(g).keys()
	keys := k.heads()
	if r.id != "" {
		keys = k.appendIDKeys(keys, r.id)
	}
	return cache.ScriptCall{Script: partReadScript, Keys: keys, Args: []any{
		r.rangeStart, r.rangeN, r.head, r.tail, flag(b.Ties == Shared), r.id, r.k}}
}

func parsePartView(v any) (partView, error) {
	arr, ok := v.([]any)
	if ok && len(arr) == 1 {
		return partView{}, errRetired
	}
	if !ok || len(arr) != 12 {
		return partView{}, fmt.Errorf("ranking: unexpected partition reply %v", v)
	}
	n, err := ints([]any{arr[1], arr[3], arr[6], arr[7], arr[8], arr[9], arr[10]}, 7)
	if err != nil {
		return partView{}, err
	}
	pv := partView{total: n[0], rangeBetter: n[1], tailBetter: n[2], found: n[3] == 1, index: n[4], start: n[5], better: n[6]}
	for _, l := range []struct {
		src any
		dst *[]rawEntry
	}{{arr[2], &pv.rng}, {arr[4], &pv.head}, {arr[5], &pv.tail}, {arr[11], &pv.window}} {
		if *l.dst, err = rawEntries(l.src); err != nil {
			return partView{}, err
		}
	}
	return pv, nil
}

// readParts sends one read to every partition of the read layout, plus
// the options' extra reads, in one round trip (one more after Redis lost
// its script cache). plan gives each partition's read.
func (e *Engine) readParts(ctx context.Context, b Board, lay *layout, ro readOpts, plan func(i int) partRead) ([]partView, error) {
	calls := make([]cache.ScriptCall, len(lay.Read))
	for i, p := range lay.Read {
		calls[i] = plan(i).call(b, p.G)
	}
	replies, err := e.runAllReading(ctx, calls, ro)
	if err != nil {
		return nil, err
	}
	out := make([]partView, len(replies))
	for i, v := range replies {
		if out[i], err = parsePartView(v); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// runAllReading sends calls and the options' extra reads in one pipeline:
// one round trip once Redis has the scripts cached, one more (by source)
// for the calls it lost.
func (e *Engine) runAllReading(ctx context.Context, calls []cache.ScriptCall, ro readOpts) ([]any, error) {
	pipe := e.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(calls))
	for i, c := range calls {
		cmds[i] = c.Script.EvalSha(ctx, pipe, c.Keys, c.Args...)
	}
	also := ro.queue(ctx, pipe)
	_, _ = pipe.Exec(ctx) // errors are read per command below
	var missing []int
	for i, c := range cmds {
		if redis.HasErrorPrefix(c.Err(), "NOSCRIPT") {
			missing = append(missing, i)
		}
	}
	if len(missing) > 0 {
		pipe = e.rdb.Pipeline()
		for _, i := range missing {
			cmds[i] = calls[i].Script.Eval(ctx, pipe, calls[i].Keys, calls[i].Args...)
		}
		_, _ = pipe.Exec(ctx)
	}
	out := make([]any, len(cmds))
	for i, c := range cmds {
		v, err := c.Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, err
		}
		out[i] = v
	}
	return out, ro.store(also)
}

// readLoop runs read with the board's layout, reading the layout afresh
// and starting again when the read met a retired partition.
func (e *Engine) readLoop(ctx context.Context, b Board, read func(lay *layout) error) error {
	lay, err := e.layoutOf(ctx, b, false, false)
	if err == nil && lay.Epoch == 0 && b.auto() {
		// An auto board without partitions is one sorted set again
		// (Redis lost the board, or its conversion was abandoned).
		return errShapeChanged
	}
	for attempt := 0; err == nil; attempt++ {
		if err = read(lay); !errors.Is(err, errRetired) || attempt+1 == readAttempts {
			break
		}
		lay, err = e.layoutOf(ctx, b, true, false)
	}
	return err
}

func sumTotals(views []partView) int64 {
	var n int64
	for _, v := range views {
		n += v.total
	}
	return n
}

// pagePartitioned is Page (and Top) on a partitioned board: ranks from
// (1-based) to from+n-1. Each partition is asked for the part of the page
// it holds by the sizes the last read saw; when the sizes moved so that
// this was not enough, a second round trip asks again with the new ones.
// The first top page of a board this process has not read asks every
// partition for its first n.
func (e *Engine) pagePartitioned(ctx context.Context, b Board, from, n int, ro readOpts) ([]Entry, int64, error) {
	var entries []Entry
	var total int64
	err := e.readLoop(ctx, b, func(lay *layout) error {
		sizes := e.sizesOf(b, lay)
		known := sizes != nil
		if !known {
			// Nothing known: a top asks every partition for its first n,
			// a deeper page asks for the sizes first.
			sizes = make([]int64, len(lay.Read))
			if from > 1 {
				views, err := e.readParts(ctx, b, lay, readOpts{}, func(int) partRead { return partRead{rangeStart: -1} })
				if err != nil {
					return err
				}
				for i, v := range views {
					sizes[i] = v.total
				}
			}
		}
		for pass := 0; ; pass++ {
			asked := pagePlan(sizes, int64(from-1), int64(n))
			if from == 1 && !known {
				for i := range asked {
					asked[i] = [2]int64{0, int64(n)}
				}
			}
			views, err := e.readParts(ctx, b, lay, ro, func(i int) partRead {
				return partRead{rangeStart: asked[i][0], rangeN: asked[i][1]}
			})
			if err != nil {
				return err
			}
			actual := make([]int64, len(views))
			for i, v := range views {
				actual[i] = v.total
			}
			e.keepSizes(b, lay, actual)
			need := pagePlan(actual, int64(from-1), int64(n))
			if covers(asked, need, views) || pass == 1 {
				if !covers(asked, need, views) {
					need = coveredPart(asked, need, views)
				}
				entries, total = nil, sumTotals(views)
				entries, err = b.assemblePage(views, asked, need)
				return err
			}
			sizes = actual
		}
	})
	if err != nil {
		return nil, 0, fmt.Errorf("page from %d of %s: %w", from, b, err)
	}
	return entries, total, nil
}

// pagePlan gives each partition's {start, count} of the page of n from
// 0-based position skip, by partition sizes (nil sizes: none known, so
// every partition is asked from its start).
func pagePlan(sizes []int64, skip, n int64) [][2]int64 {
	plan := make([][2]int64, len(sizes))
	var before int64
	for i, size := range sizes {
		lo, hi := max(skip-before, 0), min(skip+n-before, size)
		plan[i] = [2]int64{-1, 0}
		if lo < hi {
			plan[i] = [2]int64{lo, hi - lo}
		}
		before += size
	}
	return plan
}

// covers reports whether what each partition was asked for (and
// returned) holds what the page needs of it.
func covers(asked, need [][2]int64, views []partView) bool {
	for i, w := range need {
		if w[0] < 0 {
			continue
		}
		got := asked[i][0] + int64(len(views[i].rng))
		if asked[i][0] < 0 || w[0] < asked[i][0] || w[0]+w[1] > got {
			return false
		}
	}
	return true
}

// coveredPart trims need to what was asked and returned, for a page whose
// partitions changed size twice in a row under it (a page then ends early
// rather than show a wrong rank).
func coveredPart(asked, need [][2]int64, views []partView) [][2]int64 {
	out := make([][2]int64, len(need))
	short := false
	for i, w := range need {
		out[i] = [2]int64{-1, 0}
		if w[0] < 0 || short {
			continue
		}
		got := asked[i][0] + int64(len(views[i].rng))
		lo, hi := max(w[0], asked[i][0]), min(w[0]+w[1], got)
		if asked[i][0] < 0 || lo != w[0] {
			short = true // nothing past a gap
			continue
		}
		if lo < hi {
			out[i] = [2]int64{lo, hi - lo}
		}
		short = hi < w[0]+w[1]
	}
	return out
}

// assemblePage ranks what each partition returned and keeps the part of
// it the page needs.
func (b Board) assemblePage(views []partView, asked, need [][2]int64) ([]Entry, error) {
	var out []Entry
	var before int64
	for i, v := range views {
		if need[i][0] >= 0 && asked[i][0] >= 0 && len(v.rng) > 0 {
			ranked, err := b.window(v.rng, before+asked[i][0], before+v.rangeBetter)
			if err != nil {
				return nil, err
			}
			lo := need[i][0] - asked[i][0]
			hi := min(lo+need[i][1], int64(len(ranked)))
			if lo >= 0 && lo < hi {
				out = append(out, ranked[lo:hi]...)
			}
		}
		before += v.total
	}
	return out, nil
}

// sizesOf returns the partition sizes the last read of b saw under lay,
// or nil.
func (e *Engine) sizesOf(b Board, lay *layout) []int64 {
	if v, ok := e.sizes.Load(b.String()); ok {
		s := v.(sizesSeen)
		if s.epoch == lay.Epoch && len(s.sizes) == len(lay.Read) {
			return s.sizes
		}
	}
	return nil
}

type sizesSeen struct {
	epoch int64
	sizes []int64
}

func (e *Engine) keepSizes(b Board, lay *layout, sizes []int64) {
	e.sizes.Store(b.String(), sizesSeen{epoch: lay.Epoch, sizes: sizes})
}

// totalPartitioned adds up the partitions' totals.
func (e *Engine) totalPartitioned(ctx context.Context, b Board) (int64, error) {
	var total int64
	err := e.readLoop(ctx, b, func(lay *layout) error {
		views, err := e.readParts(ctx, b, lay, readOpts{}, func(int) partRead { return partRead{rangeStart: -1} })
		if err == nil {
			total = sumTotals(views)
		}
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("count %s: %w", b, err)
	}
	return total, nil
}

// aroundPartitioned is Around on a partitioned board, in one round trip:
// every partition is asked for id's window, and for its first and last k
// entries in case the window crosses into it. With ErrNotRanked it still
// returns the total.
func (e *Engine) aroundPartitioned(ctx context.Context, b Board, id string, k int, ro readOpts) (Entry, []Entry, int64, error) {
	var self Entry
	var window []Entry
	var total int64
	err := e.readLoop(ctx, b, func(lay *layout) error {
		views, err := e.readParts(ctx, b, lay, ro, func(int) partRead {
			return partRead{rangeStart: -1, head: k, tail: k, id: id, k: k}
		})
		if err != nil {
			return err
		}
		total = sumTotals(views)
		f := slices.IndexFunc(views, func(v partView) bool { return v.found })
		if f < 0 {
			return ErrNotRanked
		}
		before := make([]int64, len(views)+1)
		for i, v := range views {
			before[i+1] = before[i] + v.total
		}
		mine, err := b.window(views[f].window, before[f]+views[f].start, before[f]+views[f].better)
		if err != nil {
			return err
		}
		self = mine[views[f].index-views[f].start]
		// Entries before the partition's window, from the tails of the
		// partitions before it, nearest last.
		var lead []Entry
		need := int64(k) - views[f].index
		for i := f - 1; i >= 0 && need > 0; i-- {
			v := views[i]
			tail, err := b.window(v.tail, before[i+1]-int64(len(v.tail)), before[i]+v.tailBetter)
			if err != nil {
				return err
			}
			take := min(need, int64(len(tail)))
			lead = append(append([]Entry{}, tail[int64(len(tail))-take:]...), lead...)
			need -= take
		}
		window = append(lead, mine...)
		need = int64(k) - (views[f].total - 1 - views[f].index)
		for i := f + 1; i < len(views) && need > 0; i++ {
			head, err := b.window(views[i].head, before[i], before[i])
			if err != nil {
				return err
			}
			take := min(need, int64(len(head)))
			window = append(window, head[:take]...)
			need -= take
		}
		return nil
	})
	if err != nil {
		return Entry{}, nil, total, fmt.Errorf("rank %s on %s: %w", id, b, err)
	}
	return self, window, total, nil
}

// amongPartitioned is Among on a partitioned board: every partition ranks
// the ids it holds, in one round trip, and the answers merge.
func (e *Engine) amongPartitioned(ctx context.Context, b Board, ids []string, ro readOpts) ([]Entry, error) {
	var out []Entry
	err := e.readLoop(ctx, b, func(lay *layout) error {
		calls := make([]cache.ScriptCall, len(lay.Read))
		for i, p := range lay.Read {
			k := b.part(p.G).keys()
			keys := k.heads()
			args := make([]any, len(ids))
			for j, id := range ids {
				keys = k.appendIDKeys(keys, id)
				args[j] = id
			}
			calls[i] = cache.ScriptCall{Script: amongScript, Keys: keys, Args: args}
		}
		replies, err := e.runAllReading(ctx, calls, ro)
		if err != nil {
			return err
		}
		var found []rawEntry
		for _, v := range replies {
			if v == "RETIRED" {
				return errRetired
			}
			part, err := amongEntries(v, ids)
			if err != nil {
				return err
			}
			found = append(found, part...)
		}
		sortRaw(found)
		out, err = b.window(found, 0, 0)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("rank %d ids on %s: %w", len(ids), b, err)
	}
	return out, nil
}

// sortRaw sorts as Redis does: sorted-set score, then member bytes.
func sortRaw(raw []rawEntry) {
	sort.Slice(raw, func(i, j int) bool {
		if raw[i].z != raw[j].z {
			return raw[i].z < raw[j].z
		}
		return raw[i].member < raw[j].member
	})
}
