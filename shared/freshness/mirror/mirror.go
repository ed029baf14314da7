// Package mirror keeps the processors' watermarks (shared/freshness) in
// Redis, one small key per processor, where every read of derived data
// fetches it in the same pipeline as the data itself (no extra round
// trip). Each key only moves forward, in one script.
package mirror

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rallyhq/rally/shared/freshness"
)

// Key is the Redis key of a processor's watermark. Its value is
// "<newest change unix ms>:<applied at unix ms>". It has no hash tag: reads
// fetch it beside their data in a pipeline, never inside a script.
func Key(processor string) string { return "rally:watermark:" + processor }

// Parse reads a watermark value as Key holds it; ok is false for a missing
// ("") or malformed one.
func Parse(raw string) (w freshness.Watermark, ok bool) {
	newest, applied, found := strings.Cut(raw, ":")
	if !found {
		return freshness.Watermark{}, false
	}
	n, err1 := strconv.ParseInt(newest, 10, 64)
	a, err2 := strconv.ParseInt(applied, 10, 64)
	if err1 != nil || err2 != nil {
		return freshness.Watermark{}, false
	}
	return freshness.Watermark{NewestChange: time.UnixMilli(n).UTC(), AppliedAt: time.UnixMilli(a).UTC()}, true
}

func format(w freshness.Watermark) string {
	return strconv.FormatInt(w.NewestChange.UnixMilli(), 10) + ":" + strconv.FormatInt(w.AppliedAt.UnixMilli(), 10)
}

// advanceScript stores a watermark only when its newest change is later
// than the stored one's. KEYS[1] key; ARGV[1] newest change ms; ARGV[2]
// the value.
var advanceScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur then
  local n = tonumber(string.match(cur, '^(-?%d+):'))
  if n and n >= tonumber(ARGV[1]) then return 0 end
end
redis.call('SET', KEYS[1], ARGV[2])
return 1`)

// Watermarks is the Redis copy of the watermarks.
type Watermarks struct {
	Redis redis.UniversalClient
}

var _ freshness.Advancer = Watermarks{}

// Advance moves the processor's watermark forward to w (to the
// millisecond); an older or equal one changes nothing.
func (m Watermarks) Advance(ctx context.Context, processor string, w freshness.Watermark) error {
	err := advanceScript.Run(ctx, m.Redis, []string{Key(processor)}, w.NewestChange.UnixMilli(), format(w)).Err()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("advance watermark of %s in redis: %w", processor, err)
	}
	return nil
}

// Get reads a processor's watermark on its own (reads fetch it with their
// data instead, see Key).
func (m Watermarks) Get(ctx context.Context, processor string) (freshness.Watermark, bool, error) {
	raw, err := m.Redis.Get(ctx, Key(processor)).Result()
	if errors.Is(err, redis.Nil) {
		return freshness.Watermark{}, false, nil
	}
	if err != nil {
		return freshness.Watermark{}, false, fmt.Errorf("read watermark of %s from redis: %w", processor, err)
	}
	w, ok := Parse(raw)
	return w, ok, nil
}
