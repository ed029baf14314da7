// Package privacy erases users. A request is recorded in the Erasures
// table under a hash of the user id and answered at once; the erasure
// processor then removes the user from every table and from Redis — each
// part idempotent, so a run a crash interrupted is finished by the next —
// and completes the record, which from then on holds only the hash, the
// erasure id and its times.
package privacy

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"time"

	"github.com/rallyhq/rally/shared/schema"
)

// Status is where an erasure stands.
type Status string

// Statuses.
const (
	Pending   Status = schema.ErasurePending
	Completed Status = "COMPLETED"
)

// Erasure is one erasure of one user.
type Erasure struct {
	ID          string
	Hash        string
	Status      Status
	RequestedAt time.Time
	CompletedAt time.Time // zero while pending
	// UserID is known only while the erasure is pending.
	UserID string
}

// Hash is the key of a user's erasure record: the hex SHA-256 of the user
// id. It tells whether a given id was erased, and nothing else.
func Hash(user string) string {
	sum := sha256.Sum256([]byte("rally/erasure\x00" + user))
	return hex.EncodeToString(sum[:])
}

// ErrNotYet means a part of an erasure waits on a stream processor: the
// run stops there and a later one resumes.
var ErrNotYet = errors.New("privacy: waiting for a stream processor to catch up")
