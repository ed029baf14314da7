package players

import "context"

// Eraser erases a player's profile, friend list and analytics secret (one
// item) and takes them off every other player's friend list (a part of
// shared/privacy's erasure job). It runs last: once the secret is gone,
// the player's exported events cannot be tied to them.
type Eraser struct {
	Store interface {
		ErasePlayer(ctx context.Context, player string) error
	}
}

// Name implements privacy.Part.
func (e *Eraser) Name() string { return "profile" }

// Erase implements privacy.Part.
func (e *Eraser) Erase(ctx context.Context, player string) (done bool, err error) {
	if err := e.Store.ErasePlayer(ctx, player); err != nil {
		return false, err
	}
	return true, nil
}
