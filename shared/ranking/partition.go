package ranking

// Partitioned boards: one board over many Redis shards.
//
// A board with Partitions > 0 keeps its entries in score-range
// partitions. Each partition is an ordinary board (sorted set, lookup,
// versions, tombstones) under its own hash tag, <tag>~<generation>, so a
// cluster spreads the partitions over its shards. Partition i holds the
// sorted-set scores from its lower bound up to the next partition's: a tie
// is never split, so every entry of a better partition is strictly better,
// and
//
//	rank = entries in better partitions + rank inside the partition.
//
// The board's own hash tag keeps its layout (the partitions' bounds, an
// epoch that goes up with every change). A location index (ID -> version,
// score, previous score), spread over locShards shards under hash tags of
// their own, orders the writes of an ID and says which partition held it
// before, so a score that crosses a bound leaves its old partition. A
// write is two round trips: route it through its location, then apply it
// in its partitions, each version-guarded as on any board, so retries and
// reordering change nothing.
//
// Bounds move while the board serves (see move.go). While a move runs,
// writes go to the partitions of both the old and the new layout; the old
// partitions stay exact until they are retired, and a reader that meets a
// retired partition reads the layout again. Readers and writers cache the
// layout for layoutTTL: with it cached, rank + K and top-N are one round
// trip.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rallyhq/rally/shared/cache"
)

// layoutTTL bounds how long a process trusts its cached layout without
// hearing of a newer one; a retired partition's meta outlives it many
// times (retiredTTL), so a reader never meets a partition that vanished.
const (
	layoutTTL  = 30 * time.Second
	retiredTTL = 24 * time.Hour
	// routeAttempts bounds how often a write is routed again after a
	// partition refused its epoch (a move began meanwhile).
	routeAttempts = 8
)

// span is one partition of a layout: its generation and the lowest
// sorted-set score it holds (nil for the first, which holds everything
// below the second's bound).
type span struct {
	Lo *int64 `json:"lo,omitempty"`
	G  string `json:"g"`
}

type spans []span

// at returns the index of the partition that holds sorted-set score z.
func (s spans) at(z int64) int {
	i := len(s) - 1
	for i > 0 && *s[i].Lo > z {
		i--
	}
	return i
}

func (s spans) gens() []string {
	out := make([]string, len(s))
	for i, p := range s {
		out[i] = p.G
	}
	return out
}

// layout is a partitioned board's current shape.
type layout struct {
	Epoch int64 `json:"-"`
	// Next numbers the next partition generation.
	Next int64 `json:"next"`
	// Read is what readers use; Write the layouts every write goes to:
	// one, or the old and the new while a move runs.
	Read  spans   `json:"read"`
	Write []spans `json:"write"`
	Move  *move   `json:"move,omitempty"`

	fetched time.Time
}

// move is a split or merge under way: From's partitions are being
// replaced by To's (see move.go).
type move struct {
	Phase string   `json:"phase"`
	From  []string `json:"from"`
	To    []string `json:"to"`
}

func firstLayout() *layout {
	first := spans{{G: "1"}}
	return &layout{Next: 2, Read: first, Write: []spans{first}}
}

func parseLayout(epoch, raw any) (*layout, error) {
	es, _ := epoch.(string)
	rs, _ := raw.(string)
	n, err := strconv.ParseInt(es, 10, 64)
	if err != nil || rs == "" {
		return nil, fmt.Errorf("ranking: unexpected layout %v %v", epoch, raw)
	}
	var l layout
	if err := json.Unmarshal([]byte(rs), &l); err != nil {
		return nil, fmt.Errorf("ranking: unexpected layout %q: %w", rs, err)
	}
	if len(l.Read) == 0 || len(l.Write) == 0 {
		return nil, fmt.Errorf("ranking: layout %q has no partitions", rs)
	}
	l.Epoch = n
	l.fetched = time.Now()
	return &l, nil
}

func (l *layout) encode() string {
	raw, _ := json.Marshal(l) // plain strings and numbers
	return string(raw)
}

// writeGens returns the partitions a write of sorted-set score z goes to.
func (l *layout) writeGens(z int64) []string {
	var out []string
	for _, w := range l.Write {
		if g := w[w.at(z)].G; !slices.Contains(out, g) {
			out = append(out, g)
		}
	}
	return out
}

// allGens lists every partition a layout names, read and write.
func (l *layout) allGens() []string {
	out := l.Read.gens()
	for _, w := range l.Write {
		for _, g := range w.gens() {
			if !slices.Contains(out, g) {
				out = append(out, g)
			}
		}
	}
	return out
}

// part is partition g of b: an ordinary board under its own hash tag.
func (b Board) part(g string) Board {
	return Board{Tag: b.Tag + "~" + g, Name: b.Name, Order: b.Order, Ties: b.Ties}
}

// layoutKey is a partitioned board's layout hash (epoch, layout, expiry),
// beside the board's own prefix.
func (k boardKeys) layoutKey() string { return k.base + "p" }

// The location index is spread over locShards shards by ID, each under
// its own hash tag, so it spreads over a cluster like the partitions.
const locShards = 16

func (b Board) locShard(s int) boardKeys {
	return boardKeys{base: keyPrefix + b.Tag + "~l" + strconv.Itoa(s) + "}:" + b.Name + "|"}
}

func (k boardKeys) location(level int, idx uint64) string {
	return k.base + "l" + strconv.Itoa(level) + ":" + strconv.FormatUint(idx, 16)
}

// routeKeys are the keys route.lua needs for id: its shard's meta, then
// its bucket in every level.
func (b Board) routeKeys(id string) []string {
	h := idHash(id)
	k := b.locShard(int(h >> 40 % locShards))
	keys := []string{k.meta()}
	for l := 0; l < levels; l++ {
		keys = append(keys, k.location(l, bucketIndex(h, l)))
	}
	return keys
}

// publishEpoch tells every location shard of b's layout epoch (and of its
// expiry, when it has one), so a write that routes by an older layout
// hears of the newer one in its route reply.
func (e *Engine) publishEpoch(ctx context.Context, b Board, epoch int64, exp string) error {
	calls := make([]cache.ScriptCall, locShards)
	for s := range calls {
		calls[s] = cache.ScriptCall{Script: epochScript, Keys: []string{b.locShard(s).meta()}, Args: []any{epoch, exp}}
	}
	_, err := e.runAll(ctx, calls)
	return err
}

func (e *Engine) cached(b Board) *layout {
	if v, ok := e.layouts.Load(b.String()); ok {
		return v.(*layout)
	}
	return nil
}

// remember caches l, read from Redis just now, as b's layout.
func (e *Engine) remember(b Board, l *layout) *layout {
	e.layouts.Store(b.String(), l)
	return l
}

// errNoLayout means a partitioned board has no layout in Redis (Redis
// lost it, or the board was deleted) while the caller had one cached.
var errNoLayout = errors.New("ranking: layout missing")

// layoutOf returns b's layout, from the cache unless it is older than
// layoutTTL or fresh is set. A board without one has the first layout;
// create stores it (writes do, reads need not).
func (e *Engine) layoutOf(ctx context.Context, b Board, fresh, create bool) (*layout, error) {
	if l := e.cached(b); l != nil && !fresh && time.Since(l.fetched) < layoutTTL {
		return l, nil
	}
	key := b.keys().layoutKey()
	var arr []any
	if create {
		v, err := e.run(ctx, layoutScript, []string{key}, "", firstLayout().encode())
		if err != nil {
			return nil, fmt.Errorf("read the layout of %s: %w", b, err)
		}
		arr, _ = v.([]any)
	} else {
		v, err := e.rdb.HMGet(ctx, key, "epoch", "layout").Result()
		if err != nil {
			return nil, fmt.Errorf("read the layout of %s: %w", b, err)
		}
		if v[0] == nil {
			l := firstLayout()
			l.fetched = time.Now()
			return l, nil
		}
		arr = v
	}
	if len(arr) != 2 {
		return nil, fmt.Errorf("read the layout of %s: unexpected reply %v", b, arr)
	}
	l, err := parseLayout(arr[0], arr[1])
	if err != nil {
		return nil, fmt.Errorf("read the layout of %s: %w", b, err)
	}
	return e.remember(b, l), nil
}

// setLayout replaces b's layout with next if its epoch is still next's
// (compare and set). It reports whether it did and the layout now stored.
func (e *Engine) setLayout(ctx context.Context, b Board, next *layout) (bool, *layout, error) {
	v, err := e.run(ctx, layoutScript, []string{b.keys().layoutKey()}, strconv.FormatInt(next.Epoch, 10), next.encode())
	if err != nil {
		return false, nil, fmt.Errorf("change the layout of %s: %w", b, err)
	}
	arr, ok := v.([]any)
	if !ok || len(arr) != 2 {
		return false, nil, fmt.Errorf("change the layout of %s: unexpected reply %v", b, v)
	}
	l, err := parseLayout(arr[0], arr[1])
	if err != nil {
		return false, nil, fmt.Errorf("change the layout of %s: %w", b, err)
	}
	if l.Epoch != next.Epoch+1 {
		return false, e.remember(b, l), nil
	}
	return true, e.remember(b, l), e.publishEpoch(ctx, b, l.Epoch, "")
}

// routed is one item after its home step.
type routed struct {
	status int64 // 0 stale, 1 new, 2 the stored version again
	lay    *layout
	old    string // sorted-set score before it, "" when none
}

// route sends every item's home step in one round trip. When a location
// shard has heard of another layout epoch than lay's, the layout is read
// again (one more round trip, after a move); when one has heard of none,
// Redis lost the board's layout: errNoLayout.
func (e *Engine) route(ctx context.Context, b Board, lay *layout, items []Item, mode string) ([]routed, error) {
	calls := make([]cache.ScriptCall, len(items))
	for i, it := range items {
		z := ""
		if !it.Removed {
			z = zscore(b.Order, it.Score)
		}
		calls[i] = cache.ScriptCall{Script: routeScript, Keys: b.routeKeys(it.ID),
			Args: []any{it.ID, z, strconv.FormatInt(it.Version, 10), mode}}
	}
	replies, err := e.runAll(ctx, calls)
	if err != nil {
		return nil, err
	}
	out := make([]routed, len(items))
	moved := false
	for i, v := range replies {
		arr, ok := v.([]any)
		if !ok || len(arr) != 4 {
			return nil, fmt.Errorf("ranking: unexpected route reply %v", v)
		}
		st, _ := arr[0].(int64)
		if st == -1 {
			return nil, errNoLayout
		}
		epoch, _ := arr[1].(string)
		old, _ := arr[2].(string)
		if stored, _ := arr[3].(string); st == 2 && stored != calls[i].Args[1] {
			// The same version with other content is not a retry of
			// the stored write: nothing to finish.
			st = 0
		}
		out[i] = routed{status: st, old: old}
		moved = moved || epoch != strconv.FormatInt(lay.Epoch, 10)
	}
	if moved {
		if lay, err = e.layoutOf(ctx, b, true, true); err != nil {
			return nil, err
		}
	}
	for i := range out {
		out[i].lay = lay
	}
	return out, nil
}

// partOp is one item's write to one partition. counts says whether its
// applying makes the item applied: a removal from the partition a score
// left does not (the item's own write says that).
type partOp struct {
	item   int
	it     Item
	epoch  int64
	counts bool
}

// upsertPartitioned applies items to a partitioned board: route them at
// home, then write each to the partitions its new score falls in and
// remove it from the ones its old score fell in. When a move fenced a
// partition meanwhile, the same routes are written again by the new
// layout (which names the move's new partitions too); routing again at
// home would not do, since a later version of an item in the batch would
// hide where the earlier one left.
//
// An auto board's layout is made by its conversion only: without one,
// its writes answer errNoLayout.
func (e *Engine) upsertPartitioned(ctx context.Context, b Board, items []Item) ([]bool, error) {
	lay, err := e.layoutOf(ctx, b, false, !b.auto())
	if err != nil {
		return nil, err
	}
	if lay.Epoch == 0 {
		return nil, fmt.Errorf("write %s: %w", b, errNoLayout)
	}
	rs, err := e.route(ctx, b, lay, items, "w")
	if errors.Is(err, errNoLayout) && !b.auto() {
		// A new board, or Redis lost the layout this process had cached.
		if lay, err = e.layoutOf(ctx, b, true, true); err == nil {
			if err = e.publishEpoch(ctx, b, lay.Epoch, ""); err == nil {
				rs, err = e.route(ctx, b, lay, items, "w")
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("route %d items of %s: %w", len(items), b, err)
	}
	applied := make([]bool, len(items))
	for i, r := range rs {
		applied[i] = r.status == 1
	}
	for attempt := 1; ; attempt++ {
		order, ops, err := b.partOps(items, rs)
		if err != nil {
			return nil, err
		}
		stale, err := e.applyParts(ctx, b, order, ops, applied)
		if err != nil || !stale {
			return applied, err
		}
		if attempt == routeAttempts {
			return nil, fmt.Errorf("write %d items to %s: the layout kept changing under %d attempts", len(items), b, routeAttempts)
		}
		if lay, err = e.layoutOf(ctx, b, true, true); err != nil {
			return nil, err
		}
		for i := range rs {
			rs[i].lay = lay
		}
	}
}

// partOps turns routed items into each partition's writes, partitions in
// first-use order and each one's writes in item order.
func (b Board) partOps(items []Item, rs []routed) ([]string, map[string][]partOp, error) {
	ops := map[string][]partOp{}
	var order []string
	add := func(g string, op partOp) {
		if _, ok := ops[g]; !ok {
			order = append(order, g)
		}
		ops[g] = append(ops[g], op)
	}
	for i, r := range rs {
		if r.status == 0 {
			continue
		}
		it := items[i]
		var targets []string
		if !it.Removed {
			targets = r.lay.writeGens(flip(b.Order, it.Score))
			for _, g := range targets {
				add(g, partOp{item: i, it: it, epoch: r.lay.Epoch, counts: true})
			}
		}
		if r.old == "" {
			continue
		}
		oz, err := strconv.ParseInt(r.old, 10, 64)
		if err != nil {
			return nil, nil, fmt.Errorf("route %s of %s: stored score %q: %w", it.ID, b, r.old, err)
		}
		for _, g := range r.lay.writeGens(oz) {
			if !slices.Contains(targets, g) {
				add(g, partOp{item: i, it: Item{ID: it.ID, Version: it.Version, Removed: true}, epoch: r.lay.Epoch})
			}
		}
	}
	return order, ops, nil
}

// flip turns a score into its sorted-set score and back: Desc boards
// store the negation.
func flip(o Order, score int64) int64 {
	if o == Desc {
		return -score
	}
	return score
}

// applyParts sends every partition's writes in one round trip and marks
// in applied the items some partition applied. It reports whether a
// partition refused the epoch its writes were routed by.
func (e *Engine) applyParts(ctx context.Context, b Board, order []string, ops map[string][]partOp, applied []bool) (bool, error) {
	type call struct{ ops []partOp }
	var calls []cache.ScriptCall
	var meta []call
	for _, g := range order {
		pk := b.part(g).keys()
		list := ops[g]
		// One call per run of ops routed by the same epoch, in chunks.
		for start := 0; start < len(list); {
			end := start + 1
			for end < len(list) && end-start < upsertChunk && list[end].epoch == list[start].epoch {
				end++
			}
			chunk := list[start:end]
			keys := pk.heads()
			args := []any{flag(b.Ties == Shared), "0", strconv.FormatInt(chunk[0].epoch, 10)}
			for _, op := range chunk {
				keys = pk.appendIDKeys(keys, op.it.ID)
				args = appendItemArgs(args, b.Order, op.it)
			}
			calls = append(calls, cache.ScriptCall{Script: upsertScript, Keys: keys, Args: args})
			meta = append(meta, call{ops: chunk})
			start = end
		}
	}
	replies, err := e.runAll(ctx, calls)
	if err != nil {
		return false, fmt.Errorf("write partitions of %s: %w", b, err)
	}
	stale := false
	for c, v := range replies {
		switch v {
		case "STALE":
			stale = true
			continue
		case "RETIRED":
			// Nobody reads a retired partition; the write's other
			// partition carries it.
			continue
		}
		r, err := ints(v, len(meta[c].ops))
		if err != nil {
			return false, fmt.Errorf("write partitions of %s: %w", b, err)
		}
		for j, op := range meta[c].ops {
			if r[j] == 1 && op.counts {
				applied[op.item] = true
			}
		}
	}
	return stale, nil
}

// forgetPartitioned erases id from the home and from every partition
// (tombstones from old moves included).
func (e *Engine) forgetPartitioned(ctx context.Context, b Board, id string) error {
	lay, err := e.layoutOf(ctx, b, true, false)
	if err != nil {
		return err
	}
	if _, err := e.route(ctx, b, lay, []Item{{ID: id, Removed: true}}, "f"); err != nil && !errors.Is(err, errNoLayout) {
		return fmt.Errorf("forget %s on %s: %w", id, b, err)
	}
	for _, g := range lay.allGens() {
		if err := e.Forget(ctx, b.part(g), id); err != nil {
			return err
		}
	}
	return nil
}

// homeKeys lists the keys a partitioned board may have beside its
// partitions: the layout, and every location shard's meta and buckets of
// the levels in use.
func (e *Engine) homeKeys(ctx context.Context, b Board) ([]string, error) {
	keys := []string{b.keys().layoutKey()}
	for s := 0; s < locShards; s++ {
		k := b.locShard(s)
		lvl, err := e.rdb.HGet(ctx, k.meta(), "l").Int()
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, err
		}
		keys = append(keys, k.meta())
		for l := 0; l <= lvl && l < levels; l++ {
			for i := uint64(0); i < 1<<(levelBits*l); i++ {
				keys = append(keys, k.location(l, i))
			}
		}
	}
	return keys, nil
}

// deletePartitioned removes every partition and the home.
func (e *Engine) deletePartitioned(ctx context.Context, b Board) error {
	lay, err := e.layoutOf(ctx, b, true, false)
	if err != nil {
		return err
	}
	gens := lay.allGens()
	if lay.Move != nil {
		gens = append(gens, lay.Move.To...)
	}
	for _, g := range gens {
		if err := e.clear(ctx, b.part(g), false); err != nil {
			return err
		}
	}
	keys, err := e.homeKeys(ctx, b)
	if err == nil {
		err = e.unlinkBatches(ctx, keys)
	}
	e.layouts.Delete(b.String())
	if err != nil {
		return fmt.Errorf("delete %s: %w", b, err)
	}
	return nil
}

// expirePartitioned makes the home and every partition expire after ttl;
// partitions a later move makes get the same deadline.
func (e *Engine) expirePartitioned(ctx context.Context, b Board, ttl time.Duration) error {
	lay, err := e.layoutOf(ctx, b, true, false)
	if err != nil {
		return err
	}
	if lay.Epoch == 0 {
		return nil // nothing stored
	}
	now, err := e.rdb.Time(ctx).Result()
	if err != nil {
		return fmt.Errorf("expire %s: %w", b, err)
	}
	deadline := now.Add(ttl)
	if err := e.rdb.HSet(ctx, b.keys().layoutKey(), "exp", deadline.UnixMilli()).Err(); err != nil {
		return fmt.Errorf("expire %s: %w", b, err)
	}
	if err := e.publishEpoch(ctx, b, lay.Epoch, strconv.FormatInt(deadline.UnixMilli(), 10)); err != nil {
		return fmt.Errorf("expire %s: %w", b, err)
	}
	keys, err := e.homeKeys(ctx, b)
	if err != nil {
		return fmt.Errorf("expire %s: %w", b, err)
	}
	for start := 0; start < len(keys); start += keyBatch {
		pipe := e.rdb.Pipeline()
		for _, k := range keys[start:min(start+keyBatch, len(keys))] {
			pipe.PExpireAt(ctx, k, deadline)
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("expire %s: %w", b, err)
		}
	}
	for _, g := range lay.allGens() {
		if err := e.Expire(ctx, b.part(g), ttl); err != nil {
			return err
		}
	}
	return nil
}

// unlinkBatches unlinks keys a batch per round trip.
func (e *Engine) unlinkBatches(ctx context.Context, keys []string) error {
	for start := 0; start < len(keys); start += keyBatch {
		pipe := e.rdb.Pipeline()
		for _, k := range keys[start:min(start+keyBatch, len(keys))] {
			pipe.Unlink(ctx, k)
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
	}
	return nil
}

// upsertOnePartitioned is Upsert on a partitioned board; telling where the
// item stands afterwards costs one more round trip.
func (e *Engine) upsertOnePartitioned(ctx context.Context, b Board, it Item) (UpsertResult, error) {
	applied, err := e.upsertPartitioned(ctx, b, []Item{it})
	if err != nil {
		return UpsertResult{}, err
	}
	res := UpsertResult{Applied: applied[0]}
	self, _, total, err := e.aroundPartitioned(ctx, b, it.ID, 0, readOpts{})
	switch {
	case err == nil:
		res.Rank, res.Total = self.Rank, total
	case errors.Is(err, ErrNotRanked):
		res.Total, err = total, nil
	}
	return res, err
}
