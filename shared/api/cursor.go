package api

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/errs"
	"github.com/rallyhq/rally/shared/secrets"
)

// DefaultCursorTTL is how long a cursor stays valid unless configured
// otherwise (RALLY_CURSOR_TTL).
const DefaultCursorTTL = 24 * time.Hour

// Cursors makes opaque, tamper-evident pagination cursors: the position is
// JSON, stamped with the time it was issued and signed with HMAC-SHA256
// over a scope (route and owner), so a cursor cannot be forged, edited,
// replayed against another list, or used once it is older than TTL.
type Cursors struct {
	// Keys sign new cursors (the current key) and verify them (the current
	// or the previous one, so a rotation does not break cursors in flight);
	// nil signs none.
	Keys *secrets.Ring
	// Clock dates cursors; nil is the wall clock.
	Clock clock.Clock
	// TTL is how long a cursor is valid; 0 is DefaultCursorTTL.
	TTL time.Duration
}

const (
	macLen = 16
	// cursorVersion leads every payload, so the layout can change.
	cursorVersion = 1
	headerLen     = 1 + 8 // version, issue time (Unix seconds)
)

// errNoKey refuses to sign with an empty key, which anyone could forge.
var errNoKey = errors.New("cursors: no signing key configured")

// Encode returns the cursor for position v within scope.
func (c Cursors) Encode(scope string, v any) (string, error) {
	key, _ := c.Keys.Keys()
	if len(key) == 0 {
		return "", errNoKey
	}
	body, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	payload := make([]byte, headerLen, headerLen+len(body))
	payload[0] = cursorVersion
	binary.BigEndian.PutUint64(payload[1:headerLen], uint64(c.now().Unix()))
	payload = append(payload, body...)
	enc := base64.RawURLEncoding
	return enc.EncodeToString(payload) + "." + enc.EncodeToString(mac(key, scope, payload)), nil
}

// Decode verifies cursor for scope and parses its position into v. A
// cursor signed under neither key, or for another scope, is invalid; one
// older than the TTL has expired. Both answer 400 on field "cursor".
func (c Cursors) Decode(ctx context.Context, scope, cursor string, v any) error {
	if key, _ := c.Keys.Keys(); len(key) == 0 {
		return errNoKey
	}
	bad := errs.Field("cursor", "is not a valid cursor for this list")
	body, sig, ok := strings.Cut(cursor, ".")
	if !ok || len(cursor) > 2048 {
		return bad
	}
	enc := base64.RawURLEncoding
	payload, err := enc.DecodeString(body)
	if err != nil || len(payload) < headerLen || payload[0] != cursorVersion {
		return bad
	}
	got, err := enc.DecodeString(sig)
	if err != nil || !verify(ctx, c.Keys, scope, payload, got) {
		return bad
	}
	issued := time.Unix(int64(binary.BigEndian.Uint64(payload[1:headerLen])), 0)
	if c.now().Sub(issued) > c.ttl() {
		return &errs.Error{Kind: errs.Invalid, Detail: "cursor expired", Fields: []errs.FieldError{{
			Field: "cursor", Message: fmt.Sprintf("expired (cursors last %s): start again from the first page", c.ttl()),
		}}}
	}
	if err := json.Unmarshal(payload[headerLen:], v); err != nil {
		return bad
	}
	return nil
}

func (c Cursors) now() time.Time {
	if c.Clock == nil {
		return time.Now()
	}
	return c.Clock.Now()
}

func (c Cursors) ttl() time.Duration {
	if c.TTL > 0 {
		return c.TTL
	}
	return DefaultCursorTTL
}

func mac(key []byte, scope string, payload []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(scope))
	h.Write([]byte{0})
	h.Write(payload)
	return h.Sum(nil)[:macLen]
}

// verify reports whether sig is the MAC of payload under the current or
// the previous key, reading the keys again once (at most once a minute)
// when neither matches: the secret may have been rotated since this
// instance read it, and a cursor signed by a newer instance must still
// verify here.
func verify(ctx context.Context, keys *secrets.Ring, scope string, payload, sig []byte) bool {
	matches := func() bool {
		current, previous := keys.Keys()
		for _, key := range [][]byte{current, previous} {
			if len(key) > 0 && hmac.Equal(sig, mac(key, scope, payload)) {
				return true
			}
		}
		return false
	}
	if matches() {
		return true
	}
	return keys.Reload(ctx) && matches()
}
