package ranking

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"time"
)

// maxReachedMillis keeps the first byte of a member prefix zero, which is
// how scripts tell a lookup value holding a prefix from a bare tombstone
// version (see prelude.lua). It is about year 2.28 million.
const maxReachedMillis = 1<<56 - 1

// reachedMillis maps a ReachedAt to the milliseconds stored in members: the
// zero time is 0, like the Unix epoch; earlier times are refused because
// they would not sort before later ones.
func reachedMillis(t time.Time) (uint64, error) {
	if t.IsZero() {
		return 0, nil
	}
	ms := t.UnixMilli()
	if ms < 0 || ms > maxReachedMillis {
		return 0, invalid("reached_at %s outside 1970..year 2 million", t.Format(time.RFC3339Nano))
	}
	return uint64(ms), nil
}

func reachedTime(ms uint64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(int64(ms)).UTC()
}

const prefixLen = 8

// prefix is the fixed-width big-endian ReachedAt that starts a member, so
// the members of equal scores sort by ReachedAt and then by ID.
func prefix(ms uint64) string {
	var b [prefixLen]byte
	binary.BigEndian.PutUint64(b[:], ms)
	return string(b[:])
}

// zeroPrefix starts the members of items whose ReachedAt is zero; Sum'd
// boards hold only such members and keep no lookup.
var zeroPrefix = prefix(0)

func splitMember(m string) (ms uint64, id string, err error) {
	if len(m) <= prefixLen {
		return 0, "", fmt.Errorf("ranking: malformed member %q", m)
	}
	return binary.BigEndian.Uint64([]byte(m[:prefixLen])), m[prefixLen:], nil
}

// zscore is the sorted-set score of a score: Redis ranks ascending, so Desc
// boards store the negation.
func zscore(o Order, score int64) string { return strconv.FormatInt(flip(o, score), 10) }

// parseZScore reverses zscore. Redis prints integral doubles up to 2^53 as
// plain integers; anything else means the board holds a sum out of range.
func parseZScore(o Order, s string) (int64, error) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("ranking: score %q is not a number", s)
	}
	v, err := integral(f)
	if o == Desc {
		v = -v
	}
	return v, err
}

func integral(f float64) (int64, error) {
	if f != math.Trunc(f) || math.Abs(f) > 1<<62 {
		return 0, fmt.Errorf("ranking: score %v is not an integer", f)
	}
	return int64(f), nil
}
