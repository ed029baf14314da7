package streams

import (
	"time"

	"github.com/aws/aws-lambda-go/events"
)

// The loop every processor starts with: decode a batch into domain records
// with the decoder of the store that wrote them, stopping at the first
// record that cannot be read, then keep the newest record of each key.
//
// One rule for deletions holds in every decoder: a deleted item (an
// erasure, an expiry) decodes as its old image marked deleted, one version
// past the version it had. So the newest record of a key is its latest
// state, deletion included, and no older record of the same batch (or a
// redelivered one) can bring a deleted item back.

// Decoder reads one stream record into a domain record; ok is false for a
// record that carries nothing for this processor.
type Decoder[T any] func(events.DynamoDBEventRecord) (rec T, ok bool, err error)

// Decoded is a batch decoded up to its first unreadable record.
type Decoded[T any] struct {
	// Records are the domain records of the records before the first
	// unreadable one, in stream order.
	Records []T
	stopAt  int
	err     error
}

// Decode decodes records in order. What comes before an unreadable record
// is still applied by the processor; Err then names that record, so the
// event source mapping retries from it (and finally dead-letters it).
func Decode[T any](records []events.DynamoDBEventRecord, decode Decoder[T]) Decoded[T] {
	d := Decoded[T]{Records: make([]T, 0, len(records)), stopAt: -1}
	for i, rec := range records {
		r, ok, err := decode(rec)
		if err != nil {
			d.stopAt, d.err = i, err
			break
		}
		if ok {
			d.Records = append(d.Records, r)
		}
	}
	return d
}

// Err is nil when every record was decoded, else a *PartialError from the
// first record that was not.
func (d Decoded[T]) Err() error {
	if d.err == nil {
		return nil
	}
	return &PartialError{From: d.stopAt, Err: d.err}
}

// NewestChange is the time of the newest of the decoded records by at (a
// record's own stored time), the zero time when there are none: what a
// processor records as its watermark (shared/freshness) once it applied
// them. Decoded records are exactly those a processor applies before its
// first unreadable one, so a partial failure still records what applied.
func (d Decoded[T]) NewestChange(at func(T) time.Time) time.Time {
	var newest time.Time
	for _, r := range d.Records {
		if t := at(r); t.After(newest) {
			newest = t
		}
	}
	return newest
}

// Newest keeps the newest record of each key (by version; see the rule for
// deletions above), in the order the keys first appear. merge, when not
// nil, carries what a processor needs from an older record into the newer
// one that replaces it (a streak's region moves, say); it is not called
// for records that lose to a newer one already kept.
func Newest[T any, K comparable](records []T, key func(T) K, version func(T) int64, merge func(older, newer T) T) []T {
	at := make(map[K]int, len(records))
	out := make([]T, 0, len(records))
	for _, r := range records {
		k := key(r)
		i, seen := at[k]
		switch {
		case !seen:
			at[k] = len(out)
			out = append(out, r)
		case version(out[i]) < version(r):
			if merge != nil {
				r = merge(out[i], r)
			}
			out[i] = r
		}
	}
	return out
}
