// Package mirror keeps reactions in Redis: each player's own edges (for
// read-your-writes status checks), counts, and trending boards (hourly and
// daily buckets plus all-time, in the ranking engine). Every value is
// written with the version DynamoDB gave it, so stale or repeated writes
// change nothing, and every read refuses to answer while the cache
// generation says Redis may be behind, so callers fall back to DynamoDB.
// It also keeps each player's flip counts (flips.go), which are Redis's
// own and mirror nothing.
package mirror

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rallyhq/rally/shared/cache"
	"github.com/rallyhq/rally/shared/cachegen"
	freshmirror "github.com/rallyhq/rally/shared/freshness/mirror"
	"github.com/rallyhq/rally/shared/hotcache"
	"github.com/rallyhq/rally/shared/ranking"
	"github.com/rallyhq/rally/shared/reactions"
	"github.com/rallyhq/rally/shared/routes"
)

// ErrStale means Redis cannot be trusted for reactions right now.
var ErrStale = errors.New("reactions mirror: redis may be behind dynamodb")

// Scope is the cache generation scope of reactions.
const Scope = cachegen.ScopeReactions

// Retention of cached values that are read through from DynamoDB.
const (
	membershipTTL = 24 * time.Hour
	countTTL      = 7 * 24 * time.Hour
	hourlyTTL     = 26 * time.Hour
	dailyTTL      = 8 * 24 * time.Hour
	// windowTTL is how long a summed 24h/7d window is reused in Redis.
	windowTTL = 10 * time.Second
)

// Mirror is the Redis side of reactions.
type Mirror struct {
	Redis redis.UniversalClient
	Rank  *ranking.Engine
	Gen   *cachegen.Tracker
	// Tops caches trending lists in process for a few seconds.
	Tops *hotcache.Cache[reactions.Top]
}

// New returns a mirror over rdb, trusting it only while gen says so.
func New(rdb redis.UniversalClient, gen *cachegen.Tracker) *Mirror {
	return &Mirror{Redis: rdb, Rank: ranking.New(rdb), Gen: gen, Tops: hotcache.New[reactions.Top](2 * time.Second)}
}

var _ reactions.Mirror = (*Mirror)(nil)

// Key formats. Membership and counts are single keys; the trending boards
// of a kind share one hash tag so windows can be summed in one command.
func membershipKey(user string) string { return "rally:rx:" + user }

func membershipField(kind reactions.Kind, target string) string { return string(kind) + "#" + target }

func countKey(t reactions.Target) string { return "rally:count:" + string(t.Kind) + ":" + t.ID }

// watermarkKey holds the counter processor's watermark, which every count
// and trending read fetches in its own round trip: their as_of.
var watermarkKey = freshmirror.Key(routes.CounterProcessor.Function)

// newestChange reads a fetched watermark; zero when Redis had none.
func newestChange(raw string) time.Time {
	w, _ := freshmirror.Parse(raw)
	return w.NewestChange
}

func board(kind reactions.Kind, name string) ranking.Board {
	return ranking.Board{Tag: "trend:" + string(kind), Name: name, Order: ranking.Desc, Ties: ranking.Earliest}
}

// AllTimeBoard ranks targets by all-time trending total: their ACTIVE
// edges that count in trending.
func AllTimeBoard(kind reactions.Kind) ranking.Board { return board(kind, "all") }

// BucketBoard ranks targets by net change within one bucket.
func BucketBoard(kind reactions.Kind, b reactions.BucketRef) ranking.Board {
	return board(kind, string(b.Span)+":"+b.Name())
}

func (m *Mirror) trusted(ctx context.Context) error {
	if !m.Gen.Fresh(ctx) {
		return ErrStale
	}
	return nil
}

// Statuses reads the cached states of user's edges in one round trip.
func (m *Mirror) Statuses(ctx context.Context, user string, kind reactions.Kind, targets []string) (map[string]bool, error) {
	if err := m.trusted(ctx); err != nil {
		return nil, err
	}
	fields := make([]string, len(targets))
	for i, t := range targets {
		fields[i] = membershipField(kind, t)
	}
	vals, err := m.Redis.HMGet(ctx, membershipKey(user), fields...).Result()
	if err != nil {
		return nil, fmt.Errorf("read statuses of %s: %w", user, err)
	}
	out := make(map[string]bool, len(targets))
	for i, v := range vals {
		s, ok := v.(string)
		if !ok {
			continue
		}
		_, state, ok := strings.Cut(s, ":")
		if !ok {
			continue
		}
		out[targets[i]] = state == "1"
	}
	return out, nil
}

// rememberScript sets hash fields "version:state" only where the version is
// newer than the cached one. KEYS[1] hash; ARGV[1] ttl ms; then triples of
// field, version, state.
var rememberScript = redis.NewScript(`
for i = 2, #ARGV, 3 do
  local cur = redis.call('HGET', KEYS[1], ARGV[i])
  local v = tonumber(ARGV[i+1])
  if not cur or tonumber(string.match(cur, '^(%d+):')) < v then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i+1] .. ':' .. ARGV[i+2])
  end
end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1`)

// Remember caches edges (grouped by user, one script per user, one round
// trip in all). Older versions never overwrite newer ones.
func (m *Mirror) Remember(ctx context.Context, edges []reactions.Edge) error {
	if len(edges) == 0 {
		return nil
	}
	byUser := map[string][]any{}
	var users []string
	for _, e := range edges {
		if _, ok := byUser[e.UserID]; !ok {
			users = append(users, e.UserID)
			byUser[e.UserID] = []any{membershipTTL.Milliseconds()}
		}
		state := "0"
		if e.Active() {
			state = "1"
		}
		byUser[e.UserID] = append(byUser[e.UserID], membershipField(e.Kind, e.TargetID), e.Version, state)
	}
	calls := make([]cache.ScriptCall, 0, len(users))
	for _, u := range users {
		calls = append(calls, cache.ScriptCall{Script: rememberScript, Keys: []string{membershipKey(u)}, Args: byUser[u]})
	}
	if _, err := cache.RunScripts(ctx, m.Redis, calls); err != nil {
		return fmt.Errorf("remember %d edges: %w", len(edges), err)
	}
	return nil
}

// ForgetUser drops a user's cached edges; they are read through again.
func (m *Mirror) ForgetUser(ctx context.Context, user string) error {
	return m.Redis.Del(ctx, membershipKey(user)).Err()
}

// ForgetEdges drops deleted edges (erasure) from their users' cached edges,
// one HDEL per user, all in one round trip. It writes nothing else, so a
// user whose every cached edge goes is left with no key at all (Redis
// drops an emptied hash).
func (m *Mirror) ForgetEdges(ctx context.Context, refs []reactions.Ref) error {
	if len(refs) == 0 {
		return nil
	}
	fields := map[string][]string{}
	for _, r := range refs {
		fields[r.UserID] = append(fields[r.UserID], membershipField(r.Kind, r.TargetID))
	}
	pipe := m.Redis.Pipeline()
	for user, fs := range fields {
		pipe.HDel(ctx, membershipKey(user), fs...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("forget %d deleted edges: %w", len(refs), err)
	}
	return nil
}

// Count reads a cached count and the counter processor's watermark (its
// as_of, also on a miss) in one round trip.
func (m *Mirror) Count(ctx context.Context, t reactions.Target) (reactions.Count, bool, error) {
	if err := m.trusted(ctx); err != nil {
		return reactions.Count{}, false, err
	}
	pipe := m.Redis.Pipeline()
	count, mark := pipe.Get(ctx, countKey(t)), pipe.Get(ctx, watermarkKey)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return reactions.Count{}, false, fmt.Errorf("read count of %s: %w", t, err)
	}
	asOf := newestChange(mark.Val())
	c, ok := parseCount(count.Val())
	if !ok {
		return reactions.Count{AsOf: asOf}, false, nil
	}
	c.AsOf = asOf
	return c, true, nil
}

// count values are "count:version:updated_at_unix_ms" (the durable count's
// updated_at; reads answer with the watermark instead).
func formatCount(c reactions.Count) string {
	return strconv.FormatInt(c.N, 10) + ":" + strconv.FormatInt(c.Version, 10) + ":" + strconv.FormatInt(c.AsOf.UnixMilli(), 10)
}

func parseCount(s string) (reactions.Count, bool) {
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return reactions.Count{}, false
	}
	n, err1 := strconv.ParseInt(parts[0], 10, 64)
	v, err2 := strconv.ParseInt(parts[1], 10, 64)
	ms, err3 := strconv.ParseInt(parts[2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return reactions.Count{}, false
	}
	return reactions.Count{N: n, Version: v, AsOf: time.UnixMilli(ms).UTC()}, true
}

// setCountScript stores a count only if its version is newer.
// KEYS[1] key; ARGV[1] value; ARGV[2] version; ARGV[3] ttl ms.
var setCountScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur then
  local v = tonumber(string.match(cur, '^-?%d+:(%d+):'))
  if v and v >= tonumber(ARGV[2]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
    return 0
  end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
return 1`)

// StoreCount caches a count read from DynamoDB.
func (m *Mirror) StoreCount(ctx context.Context, t reactions.Target, c reactions.Count, version int64) error {
	c.Version = version
	return setCountScript.Run(ctx, m.Redis, []string{countKey(t)}, formatCount(c), version, countTTL.Milliseconds()).Err()
}

// Apply mirrors durable tallies (counts, all-time trending totals and
// bucket boards) and edge states into Redis. Versions make it safe to
// apply in any order and any number of times.
func (m *Mirror) Apply(ctx context.Context, tallies []reactions.Tally, edges []reactions.Edge) error {
	var counts []cache.ScriptCall
	allTime := map[reactions.Kind][]ranking.Item{}
	buckets := map[ranking.Board][]ranking.Item{}
	ttls := map[ranking.Board]time.Duration{}
	for _, t := range tallies {
		if t.HasTotal {
			c := reactions.Count{N: t.Count, Version: t.Version, AsOf: t.UpdatedAt}
			counts = append(counts, cache.ScriptCall{Script: setCountScript, Keys: []string{countKey(t.Target)},
				Args: []any{formatCount(c), t.Version, countTTL.Milliseconds()}})
			allTime[t.Target.Kind] = append(allTime[t.Target.Kind], ranking.Item{ID: t.Target.ID, Score: t.Trending, Version: t.Version})
		}
		for _, b := range t.Buckets {
			bb := BucketBoard(t.Target.Kind, b.BucketRef)
			buckets[bb] = append(buckets[bb], ranking.Item{ID: t.Target.ID, Score: b.Delta, Version: b.Version})
			ttl := hourlyTTL
			if b.Span == reactions.Daily {
				ttl = dailyTTL
			}
			ttls[bb] = time.Until(b.Start.Add(ttl))
		}
	}
	if _, err := cache.RunScripts(ctx, m.Redis, counts); err != nil {
		return fmt.Errorf("mirror counts: %w", err)
	}
	for kind, items := range allTime {
		if _, err := m.Rank.UpsertMany(ctx, AllTimeBoard(kind), items); err != nil {
			return fmt.Errorf("mirror all-time %s board: %w", kind, err)
		}
	}
	for b, items := range buckets {
		if _, err := m.Rank.UpsertMany(ctx, b, items); err != nil {
			return fmt.Errorf("mirror bucket %s: %w", b.Name, err)
		}
		if ttls[b] > 0 {
			if err := m.Rank.Expire(ctx, b, ttls[b]); err != nil {
				return fmt.Errorf("expire bucket %s: %w", b.Name, err)
			}
		}
	}
	return m.Remember(ctx, edges)
}

// Top returns the trending list of a window, from the in-process cache when
// it is a couple of seconds old at most.
func (m *Mirror) Top(ctx context.Context, kind reactions.Kind, w reactions.Window, limit int, now time.Time) (reactions.Top, error) {
	if err := m.trusted(ctx); err != nil {
		return reactions.Top{}, err
	}
	top, _, err := m.Tops.Get(ctx, string(kind)+"/"+string(w), func(ctx context.Context) (reactions.Top, error) {
		return m.ComputeTop(ctx, kind, w, maxTop, now)
	})
	if err != nil {
		return reactions.Top{}, err
	}
	if len(top.Items) > limit {
		top.Items = top.Items[:limit]
	}
	return top, nil
}

// maxTop is the longest trending list Rally serves.
const maxTop = 100

// ComputeTop reads a window's list from Redis without the in-process cache:
// all-time directly; 24h and 7d as the sum of their buckets.
func (m *Mirror) ComputeTop(ctx context.Context, kind reactions.Kind, w reactions.Window, limit int, now time.Time) (reactions.Top, error) {
	b := AllTimeBoard(kind)
	if w != reactions.AllTime {
		refs := reactions.Buckets(w, now)
		srcs := make([]ranking.Board, len(refs))
		for i, r := range refs {
			srcs[i] = BucketBoard(kind, r)
		}
		b = board(kind, "w"+string(w)+":"+refs[0].Name())
		if err := m.Rank.Sum(ctx, b, srcs, windowTTL); err != nil {
			return reactions.Top{}, fmt.Errorf("sum %s window: %w", w, err)
		}
	}
	var mark string
	entries, _, err := m.Rank.Top(ctx, b, limit, ranking.Also(watermarkKey, &mark))
	if err != nil {
		return reactions.Top{}, fmt.Errorf("read %s top: %w", w, err)
	}
	top := reactions.Top{Window: w, AsOf: newestChange(mark)}
	for _, e := range entries {
		// Targets whose net change is zero or negative are not trending.
		if e.Score <= 0 {
			break
		}
		top.Items = append(top.Items, reactions.Ranked{Rank: len(top.Items) + 1, ID: e.ID, Score: e.Score})
	}
	return top, nil
}
