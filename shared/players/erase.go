package players

import "context"

// Eraser erases a player's profile, friend list and analytics secret (one
// item) and takes them off every other player's friend list (a part of
// shared/privacy's erasure job). It runs last: once the secret is gone,
// the player's exported events cannot be tied to them.
type Eraser struct {
	Store interface {
		// ErasePlayer returns done false when it stopped short (its
		// context ended): the next call continues.
		ErasePlayer(ctx context.Context, player string) (done bool, err error)
	}
}

// Name implements privacy.Part.
func (e *Eraser) Name() string { return "profile" }

// Erase implements privacy.Part.
func (e *Eraser) Erase(ctx context.Context, player string) (done bool, err error) {
	return e.Store.ErasePlayer(ctx, player)
}
