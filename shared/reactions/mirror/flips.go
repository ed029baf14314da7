package mirror

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rallyhq/rally/shared/reactions"
)

var _ reactions.FlipStore = (*Mirror)(nil)

// flipsKey holds how many times a player changed each of their edges in
// the clock hour of its latest change: one hash per player (so an erasure
// deletes one key), field {kind}#{target}, value {hour}:{changes}.
func flipsKey(user string) string { return "rally:flips:" + user }

// flipsTTL keeps a player's counts past the end of the hour of their latest
// change, whatever minute of it that was.
const flipsTTL = 2 * time.Hour

// flippedScript counts one change of an edge in an hour, starting again
// from one when the field holds an earlier hour. KEYS[1] the player's
// hash; ARGV[1] field, ARGV[2] hour, ARGV[3] ttl ms.
var flippedScript = redis.NewScript(`
local cur = redis.call('HGET', KEYS[1], ARGV[1])
local n = 1
if cur then
  local hour, count = string.match(cur, '^(%d+):(%d+)$')
  if hour == ARGV[2] then n = tonumber(count) + 1 end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ':' .. n)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return n`)

// Flips reads how many times ref changed within hour. It does not ask
// whether Redis is trusted: the counts are Redis's own, never mirrored
// from DynamoDB.
func (m *Mirror) Flips(ctx context.Context, ref reactions.Ref, hour reactions.BucketRef) (int64, error) {
	raw, err := m.Redis.HGet(ctx, flipsKey(ref.UserID), membershipField(ref.Kind, ref.TargetID)).Result()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read flips of %s: %w", ref, err)
	}
	at, count, ok := strings.Cut(raw, ":")
	if !ok || at != hour.Name() {
		return 0, nil
	}
	n, err := strconv.ParseInt(count, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("read flips of %s: %q is not a count", ref, raw)
	}
	return n, nil
}

// Flipped counts one more change of ref within hour.
func (m *Mirror) Flipped(ctx context.Context, ref reactions.Ref, hour reactions.BucketRef) error {
	err := flippedScript.Run(ctx, m.Redis, []string{flipsKey(ref.UserID)},
		membershipField(ref.Kind, ref.TargetID), hour.Name(), flipsTTL.Milliseconds()).Err()
	if err != nil {
		return fmt.Errorf("count a flip of %s: %w", ref, err)
	}
	return nil
}

// ForgetFlips drops a player's flip counts (erasure).
func (m *Mirror) ForgetFlips(ctx context.Context, user string) error {
	return m.Redis.Del(ctx, flipsKey(user)).Err()
}
