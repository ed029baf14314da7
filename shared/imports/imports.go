// Package imports runs the import job (POST /v1/ops/jobs with kind
// "import"): a JSON Lines file, read from S3 or, on the local stack, from
// a local path, loaded as if each line had been submitted through the API.
// It owns reading the file a chunk of lines at a time, the job's
// checkpoint (the byte offset and line number reached), the lines it
// refuses and the catch-up of derived state when the file is read. The
// features own their lines: each registers an Importer for its types
// (score, favorite, like, streak) that decodes, validates and applies
// them in batches. The format is described in docs/IMPORT.md.
package imports

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/rallyhq/rally/shared/jobs"
)

// Line is one line of an import file, decoded as far as its type.
type Line struct {
	// No is the line's number in the file, from 1.
	No int64
	// Type is the line's "type".
	Type string
	// Raw is the whole line, for its importer to decode.
	Raw json.RawMessage
	// ID names the line for good: the same for the same line of the same
	// file, whichever job reads it. A line that carries no id of its own
	// (a score's match_id) takes this one, so running a file again
	// applies nothing twice.
	ID string
}

// Batch is a chunk of lines of one importer's types, in file order.
type Batch struct {
	Lines []Line
	// At is when the import started: the time of a line that gives none
	// (the same on every run of one job).
	At time.Time
	// Job is the import job's id (jobs.Work.Job): with the batch's first
	// line, it names the chunk for good, so an importer that counts what
	// a chunk adds can count it once however often the chunk is applied.
	Job string
}

// Rejection is a line an importer refused, and why.
type Rejection struct {
	Line   int64
	Reason string
}

// Importer loads the lines of its types.
type Importer interface {
	// Name names the importer in the job's checkpoint.
	Name() string
	// Types lists the line types it loads.
	Types() []string
	// Import applies a batch. It reports the lines it refused (nothing
	// of them is written) and names what it touched (board periods,
	// targets), for CatchUp. Applying a batch again, whole or after a
	// run cut short while writing it, gives the same result.
	Import(ctx context.Context, b Batch) (rejected []Rejection, touched []string, err error)
	// CatchUp brings the derived state of what the import touched up to
	// date (Redis boards, counts) and forgets what it kept to apply
	// chunks once, once the whole file is in. It may be run again.
	CatchUp(ctx context.Context, touched []string, w *jobs.Work) error
}

// LineID is the ID of line no of the file at source.
func LineID(source string, no int64) string {
	sum := sha256.Sum256([]byte(source))
	return fmt.Sprintf("import-%s-%d", hex.EncodeToString(sum[:6]), no)
}
