// Package privacy erases users. A request is recorded in the Erasures
// table under a keyed hash of the user id (Hasher) and answered at once;
// the erasure processor then removes the user from every table and from
// Redis — each part idempotent, so a run a crash interrupted is finished
// by the next — and completes the record, which from then on holds only
// the hash, the erasure id and its times.
package privacy

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"time"

	"github.com/rallyhq/rally/shared/schema"
	"github.com/rallyhq/rally/shared/secrets"
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

// Hasher makes the hashes erasure records, and whatever else must name an
// erased user without naming them, are kept under: HMAC-SHA256 of the user
// id under the erasure key (routes.ErasureKey). Unkeyed, anyone who can
// read the Erasures table could test whether a known id was erased; keyed,
// only who also reads the erasure key's secret can.
//
// The key rotates: hashes are written under its current version and
// looked up under the current one, then the previous one, so a record
// written before a rotation is still found after it (one written two
// rotations ago is not: rotate no more often than records must be found).
type Hasher struct {
	keys *secrets.Ring
}

// NewHasher hashes under keys. Without keys (nil) it hashes nothing: Hash
// panics, as only a function that never looks an erasure up, and so
// declares no routes.ErasureKey, may have none.
func NewHasher(keys *secrets.Ring) *Hasher { return &Hasher{keys: keys} }

// erasureLabel separates these hashes from any other made with the key.
const erasureLabel = "rally/erasure\x00"

func hash(key []byte, user string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(erasureLabel))
	m.Write([]byte(user))
	return hex.EncodeToString(m.Sum(nil))
}

// Hash is the hash of user under the key's current version: what a new
// record is written under. Other packages take it as a
// func(user string) string.
func (h *Hasher) Hash(user string) string {
	current, _ := h.ring().Keys()
	return hash(mustKey(current), user)
}

// mustKey refuses to hash without a key: a hash anyone could compute.
func mustKey(key []byte) []byte {
	if len(key) == 0 {
		panic("privacy: no erasure key: the function must declare routes.ErasureKey in its Uses.Secrets")
	}
	return key
}

// Hashes are the hashes of user under the key's current version, then its
// previous one (when there is one): what a lookup tries, in order. Keys
// held longer than secrets.MaxAge are read again first, so a rotation
// reaches this instance's lookups within minutes.
func (h *Hasher) Hashes(ctx context.Context, user string) []string {
	h.ring().Refresh(ctx)
	current, previous := h.ring().Keys()
	out := []string{hash(mustKey(current), user)}
	if len(previous) > 0 && !hmac.Equal(previous, current) {
		out = append(out, hash(previous, user))
	}
	return out
}

// Reload reads the key again (at most once a minute) and reports whether
// it changed: a lookup that found nothing may have missed a record a
// newer instance wrote under a key this one has not read yet.
func (h *Hasher) Reload(ctx context.Context) bool { return h.ring().Reload(ctx) }

// ring is the key's versions; a nil Hasher holds none.
func (h *Hasher) ring() *secrets.Ring {
	if h == nil {
		return nil
	}
	return h.keys
}

// ErrNotYet means a part of an erasure waits on a stream processor: the
// run stops there and a later one resumes.
var ErrNotYet = errors.New("privacy: waiting for a stream processor to catch up")
