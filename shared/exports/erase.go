package exports

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// Eraser erases a user's exports (a part of shared/privacy's erasure job):
// their records, then every document and chunk under their prefix, with
// or without a record (one expired, or a run's chunk written meanwhile).
// The records go first: a run still writing the user's export then fails
// its next checkpoint, finds the record gone and deletes its chunk, so
// nothing is left behind whichever finishes first.
type Eraser struct {
	Records   *Records
	Documents Documents
	// Hashes are the user's erasure hashes under each version of the key.
	Hashes func(ctx context.Context, user string) []string
}

// Name implements privacy.Part.
func (e *Eraser) Name() string { return "exports" }

// Erase implements privacy.Part.
func (e *Eraser) Erase(ctx context.Context, user string) (done bool, err error) {
	all, err := e.Records.OfUser(ctx, user)
	if err != nil {
		return false, err
	}
	ids := make([]string, 0, len(all))
	var prefixes []string
	for _, x := range all {
		ids = append(ids, x.ID)
		prefixes = append(prefixes, x.Prefix)
	}
	for _, h := range e.Hashes(ctx, user) {
		prefixes = append(prefixes, UserPrefix(h))
	}
	if err := e.Records.Delete(ctx, user, ids); err != nil {
		return false, err
	}
	slices.Sort(prefixes)
	for _, p := range slices.Compact(prefixes) {
		if !strings.HasPrefix(p, Prefix) || p == Prefix {
			continue // never the whole bucket
		}
		if err := e.Documents.DeletePrefix(ctx, p); err != nil {
			return false, fmt.Errorf("exports: erase a user's documents: %w", err)
		}
	}
	return true, nil
}
