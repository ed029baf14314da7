package ddb

import (
	"fmt"
	"time"
)

// ReadTime reads a stored time strictly, for decoders that must refuse a
// malformed item rather than date it at the zero time: an empty value is
// the zero time, a malformed one an error.
func ReadTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("time %q: %w", s, err)
	}
	if t.Year() <= 1 {
		return time.Time{}, nil
	}
	return t.UTC(), nil
}

// Missing returns the first of names the item (or stream image) lacks, or
// "" when it has them all: decoders refuse an item without what they need.
func Missing[V any](item map[string]V, names ...string) string {
	for _, n := range names {
		if _, ok := item[n]; !ok {
			return n
		}
	}
	return ""
}
