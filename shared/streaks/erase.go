package streaks

import (
	"context"
	"fmt"
)

// Eraser erases a player's streak, points events, daily totals and
// activity idempotency records, and their cached streak and board entries
// (a part of shared/privacy's erasure job).
type Eraser struct {
	Store interface {
		Get(ctx context.Context, user string) (State, bool, error)
		ErasePlayer(ctx context.Context, user string) error
	}
	Cache Cache
	Gen   interface {
		Drop(ctx context.Context, keys ...string) error
	}
}

// Name implements privacy.Part.
func (e *Eraser) Name() string { return "streaks" }

// Erase implements privacy.Part.
func (e *Eraser) Erase(ctx context.Context, user string) (done bool, err error) {
	st, ok, err := e.Store.Get(ctx, user)
	if err != nil {
		return false, err
	}
	if err := e.Store.ErasePlayer(ctx, user); err != nil {
		return false, err
	}
	gone := State{UserID: user, Removed: true}
	if ok {
		gone = st
		gone.Version++ // a deletion is one version past what it deleted
		gone.Removed = true
	}
	if err := e.Cache.Put(ctx, gone); err != nil {
		return false, fmt.Errorf("forget the cached streak: %w", err)
	}
	if err := e.Gen.Drop(ctx, dirtyUser+user); err != nil {
		return false, err
	}
	return true, nil
}
