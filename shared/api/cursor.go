package api

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"

	"github.com/rallyhq/rally/shared/errs"
)

// Cursors makes opaque, tamper-evident pagination cursors: the position is
// JSON, signed with HMAC-SHA256 over a scope (route and owner), so a cursor
// cannot be forged, edited, or replayed against another list.
type Cursors struct {
	Key []byte
}

const macLen = 16

// errNoKey refuses to sign with an empty key, which anyone could forge.
var errNoKey = errors.New("cursors: no signing key configured")

// Encode returns the cursor for position v within scope.
func (c Cursors) Encode(scope string, v any) (string, error) {
	if len(c.Key) == 0 {
		return "", errNoKey
	}
	payload, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	enc := base64.RawURLEncoding
	return enc.EncodeToString(payload) + "." + enc.EncodeToString(c.mac(scope, payload)), nil
}

// Decode verifies cursor for scope and parses its position into v.
func (c Cursors) Decode(scope, cursor string, v any) error {
	if len(c.Key) == 0 {
		return errNoKey
	}
	bad := errs.Field("cursor", "is not a valid cursor for this list")
	body, sig, ok := strings.Cut(cursor, ".")
	if !ok || len(cursor) > 2048 {
		return bad
	}
	enc := base64.RawURLEncoding
	payload, err := enc.DecodeString(body)
	if err != nil {
		return bad
	}
	mac, err := enc.DecodeString(sig)
	if err != nil || !hmac.Equal(mac, c.mac(scope, payload)) {
		return bad
	}
	if err := json.Unmarshal(payload, v); err != nil {
		return bad
	}
	return nil
}

func (c Cursors) mac(scope string, payload []byte) []byte {
	h := hmac.New(sha256.New, c.Key)
	h.Write([]byte(scope))
	h.Write([]byte{0})
	h.Write(payload)
	return h.Sum(nil)[:macLen]
}
