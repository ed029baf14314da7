package dynamo

import (
	"crypto/sha256"
	"encoding/base64"
	"strconv"
	"strings"
	"time"

	"github.com/rallyhq/rally/shared/reactions"
)

// flipMark is one flip an edge remembers: the Idempotency-Key that made
// it (a digest), the request's fingerprint (a prefix), the state it left
// and when. Stored as "key|hash|state|unix seconds": about 40 bytes, so
// an edge with all FlipMemory of them stays under the 1 KB a write unit
// covers.
type flipMark struct {
	key, hash string
	state     reactions.State
	at        time.Time
}

// flipKey is a key's digest: keys are up to 255 characters, and only
// their identity matters.
func flipKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return base64.RawURLEncoding.EncodeToString(sum[:12])
}

// flipHash is the part of a request's fingerprint a mark keeps: enough
// to tell two requests apart.
func flipHash(hash string) string { return hash[:min(len(hash), 12)] }

func (m flipMark) String() string {
	return m.key + "|" + m.hash + "|" + string(m.state) + "|" + strconv.FormatInt(m.at.Unix(), 10)
}

func parseFlip(s string) (flipMark, bool) {
	parts := strings.Split(s, "|")
	if len(parts) != 4 {
		return flipMark{}, false
	}
	unix, err := strconv.ParseInt(parts[3], 10, 64)
	if err != nil {
		return flipMark{}, false
	}
	return flipMark{key: parts[0], hash: parts[1], state: reactions.State(parts[2]), at: time.Unix(unix, 0)}, true
}

// findFlip finds the flip key made among an edge's marks, if it made one
// within FlipMemoryFor of now.
func findFlip(marks []string, key string, now time.Time) (flipMark, bool) {
	digest := flipKey(key)
	for i := len(marks) - 1; i >= 0; i-- {
		if m, ok := parseFlip(marks[i]); ok && m.key == digest {
			return m, now.Sub(m.at) < reactions.FlipMemoryFor
		}
	}
	return flipMark{}, false
}

// remember adds m to an edge's marks, dropping those older than
// FlipMemoryFor and the oldest past FlipMemory.
func remember(marks []string, m flipMark) []string {
	out := make([]string, 0, reactions.FlipMemory)
	for _, s := range marks {
		if old, ok := parseFlip(s); ok && m.at.Sub(old.at) < reactions.FlipMemoryFor {
			out = append(out, s)
		}
	}
	out = append(out, m.String())
	return out[max(0, len(out)-reactions.FlipMemory):]
}
