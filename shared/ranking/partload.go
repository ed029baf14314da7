package ranking

import (
	"context"
	"errors"
	"fmt"
	"sort"
)

// A load of a partitioned board loads each partition of its read layout
// by the partition's own Loader, and writes each item's location at home
// (version-guarded, so a newer write that raced the load stays). Commit
// swaps the partitions in one after the other: a reader between two
// swaps sees some partitions rebuilt and others not yet. A move cannot
// start while the load runs, and a load whose layout changed meanwhile
// is superseded.

func (e *Engine) beginPartitionedLoad(ctx context.Context, b Board, expected int) (*Loader, error) {
	lay, err := e.layoutOf(ctx, b, true, true)
	if err != nil {
		return nil, err
	}
	if lay.Move != nil {
		// Finish the move first: a load builds the read layout only.
		if err := e.runMove(ctx, b, lay); err != nil {
			return nil, err
		}
		if lay, err = e.layoutOf(ctx, b, true, true); err != nil {
			return nil, err
		}
	}
	if err := e.publishEpoch(ctx, b, lay.Epoch, ""); err != nil {
		return nil, err
	}
	l := &Loader{e: e, b: b, k: b.keys(), lay: lay, parts: map[string]*Loader{}}
	for _, p := range lay.Read {
		sub, err := e.BeginLoad(ctx, b.part(p.G), expected/len(lay.Read))
		if err != nil {
			_ = l.Abort(ctx)
			return nil, err
		}
		l.parts[p.G] = sub
	}
	return l, nil
}

func (e *Engine) resumePartitionedLoad(b Board, st LoadState) (*Loader, error) {
	l := &Loader{e: e, b: b, k: b.keys(), parts: map[string]*Loader{}}
	var read spans
	for g, ps := range st.Parts {
		sub, err := e.ResumeLoad(b.part(g), ps)
		if err != nil {
			return nil, err
		}
		l.parts[g] = sub
		read = append(read, span{G: g})
	}
	// The bounds come back with the layout at the first Add or Commit.
	l.lay = &layout{Epoch: st.Epoch, Read: read}
	return l, nil
}

// eachPart calls fn for every partition's loader, in generation order.
func (l *Loader) eachPart(fn func(*Loader) error) error {
	gens := make([]string, 0, len(l.parts))
	for g := range l.parts {
		gens = append(gens, g)
	}
	sort.Strings(gens)
	var errs []error
	for _, g := range gens {
		errs = append(errs, fn(l.parts[g]))
	}
	return errors.Join(errs...)
}

// current checks that the board's layout is still the one the load began
// under, and learns its bounds after a ResumeLoad.
func (l *Loader) current(ctx context.Context) error {
	lay, err := l.e.layoutOf(ctx, l.b, true, true)
	if err != nil {
		return err
	}
	if lay.Epoch != l.lay.Epoch {
		l.closed = true
		_ = l.eachPart(func(p *Loader) error { return p.Abort(ctx) })
		return fmt.Errorf("load of %s: the partitions moved: %w", l.b, ErrLoadSuperseded)
	}
	l.lay = lay
	return nil
}

func (l *Loader) addPartitioned(ctx context.Context, items []Item) error {
	for _, it := range items {
		if err := it.validate(); err != nil {
			return fmt.Errorf("load into %s: %w", l.b, err)
		}
	}
	if l.lay.fetched.IsZero() {
		if err := l.current(ctx); err != nil {
			return err
		}
	}
	for start := 0; start < len(items); start += loadChunk * loadPipeline {
		batch := items[start:min(start+loadChunk*loadPipeline, len(items))]
		if _, err := l.e.route(ctx, l.b, l.lay, batch, "l"); err != nil {
			return fmt.Errorf("load into %s: %w", l.b, err)
		}
	}
	for _, it := range items {
		if it.Removed {
			continue
		}
		g := l.lay.Read[l.lay.Read.at(flip(l.b.Order, it.Score))].G
		sub, ok := l.parts[g]
		if !ok {
			return fmt.Errorf("load into %s: partition %s: %w", l.b, g, ErrLoadSuperseded)
		}
		if err := sub.Add(ctx, it); err != nil {
			return err
		}
	}
	return nil
}

func (l *Loader) commitPartitioned(ctx context.Context) error {
	if err := l.current(ctx); err != nil {
		return err
	}
	l.closed = true
	return l.eachPart(func(p *Loader) error { return p.Commit(ctx) })
}
