package privacy

import (
	"context"
	"time"
)

// ExportedErasure is a user's last erasure in their export: a user erased
// who came back has one (a user whose erasure is under way is not
// exported at all).
type ExportedErasure struct {
	ErasureID   string     `json:"erasure_id"`
	Status      Status     `json:"status"`
	RequestedAt time.Time  `json:"requested_at"`
	CompletedAt *time.Time `json:"completed_at"`
}

// Export is the user's erasure record, found by their hash, or null (a
// part of shared/exports, a Single).
type Export struct {
	Records *Records
}

// Name implements exports.Part.
func (e *Export) Name() string { return "erasure" }

// Single implements exports.Single.
func (e *Export) Single() {}

// Export implements exports.Part.
func (e *Export) Export(ctx context.Context, user, _ string, _ int) ([]any, string, error) {
	er, ok, err := e.Records.Find(ctx, user)
	if err != nil || !ok {
		return nil, "", err
	}
	b := bodyOf(er)
	return []any{ExportedErasure(b)}, "", nil
}
