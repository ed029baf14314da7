package idempotency

import "context"

// Eraser erases a user's HTTP idempotency records (a part of
// shared/privacy's erasure job): the stored responses name them.
type Eraser struct {
	Store *Store
}

// Name implements privacy.Part.
func (e *Eraser) Name() string { return "requests" }

// Erase implements privacy.Part.
func (e *Eraser) Erase(ctx context.Context, user string) (done bool, err error) {
	if _, err := e.Store.EraseOwner(ctx, user); err != nil {
		return false, err
	}
	return true, nil
}
