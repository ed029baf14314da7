// Package obs owns Rally's observability: JSON logs with request ids
// (log/slog), CloudWatch Embedded Metric Format lines, and X-Ray tracing of
// AWS SDK calls and Redis commands. Tracing is off locally.
package obs

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"

	"github.com/aws/aws-lambda-go/lambdacontext"
)

type requestIDKey struct{}

// WithRequestID returns ctx carrying a request id that every log line made
// with it will include.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}

// RequestID returns the request id carried by ctx: Rally's own, else the
// Lambda invocation's.
func RequestID(ctx context.Context) string {
	if id, ok := ctx.Value(requestIDKey{}).(string); ok {
		return id
	}
	if lc, ok := lambdacontext.FromContext(ctx); ok {
		return lc.AwsRequestID
	}
	return ""
}

// NewLogger returns a JSON logger at the named level that adds the request
// id found in each call's context and never writes a user id: it writes
// the user's keyed hash (UserHash under key) instead, for
//
//   - attributes made with User, or keyed user, user_id, player or
//     player_id;
//   - every occurrence, in the message and in any string or error
//     attribute, of the user ids the call's context is about (WithUsers):
//     an error that names a player ("decode score b/p/alice") is logged as
//     "decode score b/p/user:3fa9…".
//
// Erasure cannot reach logs; what they hold cannot name anyone without
// the key.
func NewLogger(w io.Writer, level string, key []byte) *slog.Logger {
	var l slog.Level
	switch strings.ToLower(level) {
	case "debug":
		l = slog.LevelDebug
	case "warn":
		l = slog.LevelWarn
	case "error":
		l = slog.LevelError
	default:
		l = slog.LevelInfo
	}
	return slog.New(handler{Handler: slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l}), key: key})
}

// handler adds request ids and hashes user ids.
type handler struct {
	slog.Handler
	key []byte
}

func (h handler) Handle(ctx context.Context, r slog.Record) error {
	ids := usersOf(ctx)
	out := slog.NewRecord(r.Time, r.Level, h.text(r.Message, ids), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.attr(a, ids))
		return true
	})
	if id := RequestID(ctx); id != "" {
		out.AddAttrs(slog.String("request_id", id))
	}
	return h.Handler.Handle(ctx, out)
}

func (h handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	clean := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		clean[i] = h.attr(a, nil)
	}
	return handler{Handler: h.Handler.WithAttrs(clean), key: h.key}
}

func (h handler) WithGroup(name string) slog.Handler {
	return handler{Handler: h.Handler.WithGroup(name), key: h.key}
}

// userKeys are attribute keys whose string value is a user id.
var userKeys = map[string]bool{"user": true, "user_id": true, "player": true, "player_id": true}

func (h handler) attr(a slog.Attr, ids []string) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindGroup:
		group := v.Group()
		out := make([]slog.Attr, len(group))
		for i, g := range group {
			out[i] = h.attr(g, ids)
		}
		return slog.Attr{Key: a.Key, Value: slog.GroupValue(out...)}
	case slog.KindString:
		if userKeys[a.Key] {
			return slog.String(a.Key, h.mark(v.String()))
		}
		return slog.String(a.Key, h.text(v.String(), ids))
	case slog.KindAny:
		switch x := v.Any().(type) {
		case UserID:
			return slog.String(a.Key, h.mark(string(x)))
		case error:
			return slog.String(a.Key, h.text(x.Error(), ids))
		case fmt.Stringer:
			return slog.String(a.Key, h.text(x.String(), ids))
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}

// mark is how a log names a user: "user:" and the keyed hash.
func (h handler) mark(id string) string { return "user:" + UserHash(h.key, id) }

// text replaces each occurrence of ids in s (longest first, so an id that
// holds another is replaced whole) that no letter or digit adjoins.
func (h handler) text(s string, ids []string) string {
	for _, id := range ids {
		if !strings.Contains(s, id) {
			continue
		}
		var b strings.Builder
		rest := s
		for {
			i := strings.Index(rest, id)
			if i < 0 {
				b.WriteString(rest)
				break
			}
			end := i + len(id)
			if (i > 0 && alnum(rest[i-1])) || (end < len(rest) && alnum(rest[end])) {
				b.WriteString(rest[:end])
			} else {
				b.WriteString(rest[:i])
				b.WriteString(h.mark(id))
			}
			rest = rest[end:]
		}
		s = b.String()
	}
	return s
}

func alnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// UserHashLen is the length of a user's hash in logs: 96 bits in hex.
const UserHashLen = 24

// UserHash is how logs name user id: the hex of HMAC-SHA256(key, id), cut
// to UserHashLen characters. An operator with the key finds a user's log
// lines by it (see README, "Private data").
func UserHash(key []byte, id string) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id))
	return hex.EncodeToString(mac.Sum(nil))[:UserHashLen]
}

// UserID is a user id in a log attribute (User), written as its hash.
type UserID string

// User is a log attribute naming a user by their hash.
func User(id string) slog.Attr { return slog.Any("user", UserID(id)) }

type usersKey struct{}

// WithUsers returns ctx carrying user ids its work is about (the caller,
// the ids in a request's path or body, the users of a stream batch): every
// log line made with it writes their hashes wherever they appear.
func WithUsers(ctx context.Context, ids ...string) context.Context {
	prev := usersOf(ctx)
	all := make([]string, 0, len(prev)+len(ids))
	all = append(all, prev...)
	seen := make(map[string]bool, cap(all))
	for _, id := range prev {
		seen[id] = true
	}
	for _, id := range ids {
		if id != "" && !seen[id] {
			seen[id] = true
			all = append(all, id)
		}
	}
	if len(all) == len(prev) {
		return ctx
	}
	// Longest first: an id that contains another is replaced whole.
	slices.SortStableFunc(all, func(a, b string) int { return len(b) - len(a) })
	return context.WithValue(ctx, usersKey{}, all)
}

func usersOf(ctx context.Context) []string {
	ids, _ := ctx.Value(usersKey{}).([]string)
	return ids
}
