package ranking

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"

	"github.com/rallyhq/rally/shared/cache"
)

// Load sizes: items per script call (a few ms of Redis time, so other
// clients are not held up during a rebuild) and calls per round trip.
const (
	loadChunk    = 250
	loadPipeline = 32
)

// Loader rebuilds a board from the source of truth. It builds the new
// content in the board's spare slot, in chunks, while readers keep seeing
// the old content; Commit swaps it in with one step, so nobody sees a
// half-built board. Writes made while the load runs go to both slots and
// versions decide, so read the snapshot after BeginLoad: every write that
// reached Redis before BeginLoad is then in the snapshot, and every later
// one reaches the new content directly.
//
// A Loader is not safe for concurrent use. A second BeginLoad on the same
// board, or a Forget, cancels the load (ErrLoadSuperseded).
type Loader struct {
	e      *Engine
	b      Board
	k      boardKeys
	token  string
	seq    string
	stage  string
	lo     int // lowest lookup level of the staging slot
	level  int // its current level, as last seen
	buf    []Item
	closed bool
	// parts loads each partition of a partitioned board, as its layout
	// at epoch stood when the load began (see partload.go).
	parts map[string]*Loader
	lay   *layout
}

// Load replaces the board's whole content with items atomically: see
// Loader. Versions are kept, so replaying the stream afterwards is
// harmless, and removed items (Removed set) leave their tombstones.
func (e *Engine) Load(ctx context.Context, b Board, items []Item) error {
	l, err := e.BeginLoad(ctx, b, len(items))
	if err != nil {
		return err
	}
	if err := l.Add(ctx, items...); err != nil {
		_ = l.Abort(ctx)
		return err
	}
	return l.Commit(ctx)
}

// BeginLoad starts rebuilding b; expected (an estimate of the item count)
// sizes the lookup so it stays compact. It cancels any load under way.
func (e *Engine) BeginLoad(ctx context.Context, b Board, expected int) (*Loader, error) {
	if err := b.validate(); err != nil {
		return nil, err
	}
	if b.Partitions > 0 {
		return e.beginPartitionedLoad(ctx, b, expected)
	}
	if b.auto() {
		// A converted board loads its partitions. A conversion under
		// way is abandoned: its copy may hold what this load drops.
		sh, err := e.shapeOf(ctx, b, true)
		if err != nil {
			return nil, err
		}
		switch sh.kind {
		case shapeParted:
			return e.beginPartitionedLoad(ctx, b.parted(), expected)
		case shapeConverting:
			if err := e.abandonConversion(ctx, b, sh.fence); err != nil {
				return nil, err
			}
		}
	}
	k := b.keys()
	v, err := e.run(ctx, loadPrepareScript, []string{k.meta()})
	if err != nil {
		return nil, fmt.Errorf("begin load of %s: %w", b, err)
	}
	arr, ok := v.([]any)
	if !ok || len(arr) != 4 {
		return nil, fmt.Errorf("begin load of %s: unexpected reply %v", b, v)
	}
	stage, _ := arr[0].(string)
	oldLevel, _ := strconv.Atoi(fmt.Sprint(arr[1]))
	dirty, _ := arr[2].(int64)
	seq := fmt.Sprint(arr[3])
	if dirty == 1 {
		if err := e.clearSlot(ctx, k, stage, oldLevel, seq); err != nil {
			return nil, fmt.Errorf("begin load of %s: %w", b, err)
		}
	}
	token, err := newToken()
	if err != nil {
		return nil, fmt.Errorf("begin load of %s: %w", b, err)
	}
	lo := levelFor(int64(expected))
	v, err = e.run(ctx, loadBeginScript, []string{k.meta()}, seq, token, lo)
	if err != nil {
		return nil, fmt.Errorf("begin load of %s: %w", b, err)
	}
	if v != int64(1) {
		return nil, fmt.Errorf("begin load of %s: %w", b, ErrLoadSuperseded)
	}
	return &Loader{e: e, b: b, k: k, token: token, seq: seq, stage: stage, lo: lo, level: lo}, nil
}

func newToken() (string, error) {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// Add queues items, sending them in pipelined chunks as they accumulate.
func (l *Loader) Add(ctx context.Context, items ...Item) error {
	if l.closed {
		return fmt.Errorf("load of %s: %w", l.b, ErrLoadSuperseded)
	}
	if l.parts != nil {
		return l.addPartitioned(ctx, items)
	}
	for _, it := range items {
		if err := it.validate(); err != nil {
			return fmt.Errorf("load into %s: %w", l.b, err)
		}
	}
	l.buf = append(l.buf, items...)
	for len(l.buf) >= loadChunk*loadPipeline {
		if err := l.send(ctx, loadChunk*loadPipeline); err != nil {
			return err
		}
	}
	return nil
}

// send writes the first n queued items to the staging slot. A chunk stops
// early when the slot outgrows the lookup levels it was given; its rest is
// sent again with the new levels.
func (l *Loader) send(ctx context.Context, n int) error {
	pending := l.buf[:n]
	for len(pending) > 0 {
		batch := pending[:min(len(pending), loadChunk*loadPipeline)]
		pending = pending[len(batch):]
		var calls []cache.ScriptCall
		var chunks [][]Item
		for _, idx := range groupByID(batch, loadChunk) {
			chunk := make([]Item, len(idx))
			for j, i := range idx {
				chunk[j] = batch[i]
			}
			keys := l.k.heads()
			args := []any{l.token, l.lo, l.level}
			for _, it := range chunk {
				h := idHash(it.ID)
				for lv := l.lo; lv <= l.level; lv++ {
					keys = append(keys, l.k.bucket(l.stage, lv, bucketIndex(h, lv)))
				}
				args = appendItemArgs(args, l.b.Order, it)
			}
			calls = append(calls, cache.ScriptCall{Script: loadChunkScript, Keys: keys, Args: args})
			chunks = append(chunks, chunk)
		}
		replies, err := l.e.runAll(ctx, calls)
		if err != nil {
			return fmt.Errorf("load into %s: %w", l.b, err)
		}
		var rest []Item
		for i, v := range replies {
			r, err := ints(v, 2)
			if err != nil {
				return fmt.Errorf("load into %s: %w", l.b, err)
			}
			if r[0] < 0 {
				l.closed = true
				return fmt.Errorf("load into %s: %w", l.b, ErrLoadSuperseded)
			}
			l.level = max(l.level, int(r[1]))
			rest = append(rest, chunks[i][r[0]:]...)
		}
		pending = append(rest, pending...)
	}
	l.buf = l.buf[n:]
	return nil
}

// LoadState is where a load stands, so a load longer than one invocation
// continues in the next (ResumeLoad): take it after Flush.
type LoadState struct {
	Token string `json:"token"`
	Seq   string `json:"seq"`
	Stage string `json:"stage"`
	Low   int    `json:"low"`
	Level int    `json:"level"`
	// Epoch and Parts are a partitioned board's: its layout's epoch and
	// each partition's load.
	Epoch int64                `json:"epoch,omitempty"`
	Parts map[string]LoadState `json:"parts,omitempty"`
}

// Flush sends everything queued.
func (l *Loader) Flush(ctx context.Context) error {
	if l.closed {
		return fmt.Errorf("load of %s: %w", l.b, ErrLoadSuperseded)
	}
	if l.parts != nil {
		return l.eachPart(func(p *Loader) error { return p.Flush(ctx) })
	}
	return l.send(ctx, len(l.buf))
}

// State is the load's position; everything added before the last Flush
// is in Redis.
func (l *Loader) State() LoadState {
	if l.parts != nil {
		st := LoadState{Epoch: l.lay.Epoch, Parts: map[string]LoadState{}}
		for g, p := range l.parts {
			st.Parts[g] = p.State()
		}
		return st
	}
	return LoadState{Token: l.token, Seq: l.seq, Stage: l.stage, Low: l.lo, Level: l.level}
}

// ResumeLoad continues a load another Loader began (its State after a
// Flush). If a later load or a Forget superseded it meanwhile, the
// resumed Loader's first Add, Flush or Commit says ErrLoadSuperseded.
func (e *Engine) ResumeLoad(b Board, st LoadState) (*Loader, error) {
	if err := b.validate(); err != nil {
		return nil, err
	}
	if b.Partitions > 0 {
		return e.resumePartitionedLoad(b, st)
	}
	if b.auto() && st.Parts != nil {
		return e.resumePartitionedLoad(b.parted(), st)
	}
	return &Loader{e: e, b: b, k: b.keys(), token: st.Token, seq: st.Seq, stage: st.Stage, lo: st.Low, level: st.Level}, nil
}

// Commit sends what is queued and makes the new content live in one step,
// then frees the old content.
func (l *Loader) Commit(ctx context.Context) error {
	if l.closed {
		return fmt.Errorf("commit load of %s: %w", l.b, ErrLoadSuperseded)
	}
	if l.parts != nil {
		return l.commitPartitioned(ctx)
	}
	if err := l.send(ctx, len(l.buf)); err != nil {
		return err
	}
	l.closed = true
	v, err := l.e.run(ctx, loadCommitScript, l.k.heads(), l.token)
	if err != nil {
		return fmt.Errorf("commit load of %s: %w", l.b, err)
	}
	arr, ok := v.([]any)
	if !ok {
		return fmt.Errorf("commit load of %s: unexpected reply %v", l.b, v)
	}
	if len(arr) != 3 {
		return fmt.Errorf("commit load of %s: %w", l.b, ErrLoadSuperseded)
	}
	old, _ := arr[0].(string)
	level, _ := strconv.Atoi(fmt.Sprint(arr[1]))
	seq := fmt.Sprint(arr[2])
	if err := l.e.freeSlot(ctx, l.k, old, level, seq); err != nil {
		return fmt.Errorf("load of %s committed, but freeing the previous content failed (the next load retries): %w", l.b, err)
	}
	return nil
}

// Abort cancels the load and frees what it built. The board keeps its
// current content.
func (l *Loader) Abort(ctx context.Context) error {
	if l.closed {
		return nil
	}
	if l.parts != nil {
		l.closed = true
		return l.eachPart(func(p *Loader) error { return p.Abort(ctx) })
	}
	l.closed = true
	if _, err := l.e.run(ctx, loadAbortScript, []string{l.k.meta()}, l.token); err != nil {
		return fmt.Errorf("abort load of %s: %w", l.b, err)
	}
	if err := l.e.freeSlot(ctx, l.k, l.stage, l.level, l.seq); err != nil {
		return fmt.Errorf("abort load of %s: %w", l.b, err)
	}
	return nil
}

// freeSlot clears a slot that is no longer live and records it clean. A
// load that started meanwhile owns the slot and clears it itself.
func (e *Engine) freeSlot(ctx context.Context, k boardKeys, slot string, level int, seq string) error {
	err := e.clearSlot(ctx, k, slot, level, seq)
	if errors.Is(err, ErrLoadSuperseded) {
		return nil
	}
	if err != nil {
		return err
	}
	if _, err := e.run(ctx, loadCleanedScript, []string{k.meta()}, seq, slot); err != nil {
		return err
	}
	return nil
}

// clearSlot unlinks the next sorted set and every lookup bucket a slot up
// to level may hold, unless another load starts meanwhile
// (ErrLoadSuperseded).
func (e *Engine) clearSlot(ctx context.Context, k boardKeys, slot string, level int, seq string) error {
	var calls []cache.ScriptCall
	batch := []string{k.meta(), k.next()}
	send := func() error {
		replies, err := e.runAll(ctx, calls)
		calls = calls[:0]
		if err != nil {
			return err
		}
		for _, v := range replies {
			if v != int64(1) {
				return ErrLoadSuperseded
			}
		}
		return nil
	}
	var err error
	k.eachBucket(slot, level, func(key string) {
		if err != nil {
			return
		}
		batch = append(batch, key)
		if len(batch) > keyBatch {
			calls = append(calls, cache.ScriptCall{Script: loadClearScript, Keys: batch, Args: []any{seq}})
			batch = []string{k.meta()}
			if len(calls) == loadPipeline {
				err = send()
			}
		}
	})
	if err != nil {
		return err
	}
	calls = append(calls, cache.ScriptCall{Script: loadClearScript, Keys: batch, Args: []any{seq}})
	return send()
}
