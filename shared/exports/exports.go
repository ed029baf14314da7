// Package exports answers a user's right of access and portability: one
// JSON document with everything Rally holds about them, each feature
// writing its own part (Part). A request is recorded in the Exports table
// and answered at once; the export processor (Job) then writes the
// document a bounded slice at a time — each run appends what it read as a
// chunk and checkpoints, so a user with 100k favorites exports across
// invocations — joins the chunks into one document in the exports bucket
// (locally, files under .local/exports), and marks the export READY. The
// status route signs a link to the document (an S3 presigned GET; locally a
// /_local/exports link the local gateway serves until it expires).
//
// Exports run on a processor of their own, in the erasure processor's
// pattern (a table of requests, its stream, a lease and a checkpoint per
// record, a tick that resumes what a crash left), not as a job kind of the
// job runner (shared/jobs):
//   - an export belongs to its user: its record is keyed by the user, so an
//     erasure finds and deletes every export of theirs with one query; the
//     Jobs table is keyed by job and would need a new index to do that, and
//     its operators' views (GET /v1/ops/jobs, health's jobs_running) would
//     list players' exports beside rebuilds;
//   - least privilege: the export processor alone reads every feature's
//     items of a user and writes the exports bucket; the job runner keeps
//     the grants of derived state, and neither holds the other's;
//   - capacity: a burst of players asking for their data waits behind its
//     own reserved concurrency, never in front of an operator's rebuild
//     (the job runner runs its few jobs one after another).
//
// What the job runner offers that matters here, a run bounded by the
// invocation's deadline that checkpoints and is continued by its own
// stream record, is what Job does too.
package exports

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/rallyhq/rally/shared/schema"
)

// Status is where an export stands.
type Status string

// Statuses.
const (
	Pending Status = schema.ErasurePending
	Ready   Status = "READY"
)

// Retention is how long an export's document (and its record) is kept
// once ready; the exports bucket's lifecycle expires documents after
// the same time (a day later at most, as S3 counts days).
const Retention = 3 * 24 * time.Hour

// LinkValidity is how long a link to a document reads it (at most: never
// past the document's own expiry).
const LinkValidity = 24 * time.Hour

// FormatVersion is the version of the document's layout.
const FormatVersion = 1

// Export is one export of one user's data.
type Export struct {
	ID     string
	UserID string
	Status Status
	// Prefix is where its document and chunks are written (UserPrefix).
	Prefix      string
	RequestedAt time.Time
	// ReadyAt and Object are set once the document is written.
	ReadyAt time.Time
	Object  string
	// ExpiresAt is when the record goes (its TTL), and with it the
	// document: the request time plus Retention while pending, the ready
	// time plus Retention once ready.
	ExpiresAt time.Time
	// Checkpoint is how far the document is written, while pending.
	Checkpoint Checkpoint
	// RetryAt holds a failed export back until then; Failures counts the
	// failed runs in a row.
	RetryAt  time.Time
	Failures int
	// LeaseUntil and LeasedBy name the run working on it, if any.
	LeaseUntil time.Time
	LeasedBy   string
}

// Checkpoint is where a pending export's document stands: its first Chunks
// chunks are written, and they end inside the part numbered Part (its
// opening written when Opened, followed by Written of its items), whose
// next items come from Cursor.
type Checkpoint struct {
	Part    int
	Cursor  string
	Opened  bool
	Written int64
	Chunks  int
}

// Part is one feature's part of a user's export, under its Name in the
// document. Export returns the user's items from cursor on ("" at the
// start), at most limit of them, and the cursor that continues after them
// ("" once none are left); called again with the same cursor it returns
// the same items (a run cut short does that). Each item is encoded as
// JSON, in order, into the part's list.
//
// Each feature implements its parts in its own package (reactions/dynamo,
// leaderboards/dynamo, streaks/dynamo, players/dynamo, accounts, privacy);
// shared/app/all lists them. Adding a part is one type there and one line
// in that list.
type Part interface {
	Name() string
	Export(ctx context.Context, user, cursor string, limit int) (items []any, next string, err error)
}

// Single is a Part that holds one value (a profile, a streak): the
// document holds its first item, or null, in place of a list.
type Single interface {
	Part
	Single()
}

// Where documents live in the exports bucket (or the local directory):
//
//	exports/{hash of the user}/{export id}/chunk-000000   a run's chunk, until the document is joined
//	exports/{hash of the user}/{export id}/rally-export.json   the document
//
// Keys carry the user's erasure hash (privacy.Hasher, under the erasure
// key's version current when the export was asked for, kept on the
// record), not the id, so a key names nobody; an erasure deletes
// everything under the user's prefixes (each of its records' and one per
// version of the key), records or not.
const Prefix = "exports/"

// UserPrefix is where every document of the user whose erasure hash is
// hash lives.
func UserPrefix(hash string) string { return Prefix + hash + "/" }

func exportPrefix(e Export) string { return e.Prefix + e.ID + "/" }

func chunkKey(e Export, n int) string {
	return exportPrefix(e) + fmt.Sprintf("chunk-%06d", n)
}

// DocumentKey is where the document of export e is.
func DocumentKey(e Export) string { return exportPrefix(e) + "rally-export.json" }

func chunkKeys(e Export, n int) []string {
	keys := make([]string, n)
	for i := range n {
		keys[i] = chunkKey(e, i)
	}
	return keys
}

// Documents stores export documents: S3 in AWS, files locally
// (shared/exports/objects).
type Documents interface {
	// Put writes the object at key.
	Put(ctx context.Context, key string, data []byte) error
	// Get reads the object at key whole.
	Get(ctx context.Context, key string) ([]byte, error)
	// Join writes the object at key as the objects at parts, in order.
	Join(ctx context.Context, key string, parts []string) error
	// Delete deletes the objects at keys; a missing one is no error.
	Delete(ctx context.Context, keys ...string) error
	// DeletePrefix deletes every object whose key starts with prefix.
	DeletePrefix(ctx context.Context, prefix string) error
	// Link returns a URL that reads the object at key until until.
	Link(ctx context.Context, key string, until time.Time) (string, error)
}

func newID() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("exports: new export id: %w", err)
	}
	return "ex_" + hex.EncodeToString(b), nil
}
