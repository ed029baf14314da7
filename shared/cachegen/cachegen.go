// Package cachegen tells whether Redis still mirrors DynamoDB for a scope
// (reactions, a leaderboard, streaks). DynamoDB holds a generation number
// that is bumped, after recording which keys went dirty, whenever a write to
// Redis was lost; Redis holds the generation it was last brought up to date
// with. Redis is trusted only when its generation exists (a Redis that lost
// its data has none) and is not behind. Readers ask Fresh, which is cached
// for a moment so the check costs nothing on the hot path; processors repair
// the dirty keys (or rebuild everything) and then advance Redis's generation.
package cachegen

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/redis/go-redis/v9"

	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/schema"
)

// Tracker tracks one scope. Its durable items live in the Counters table
// (schema.CountersCachePrefix).
type Tracker struct {
	DB    ddb.DB
	Table string // physical name of schema.Counters
	Redis redis.UniversalClient
	Scope string
	// CheckEvery is how long a Fresh answer is reused (default 1s).
	CheckEvery time.Duration

	mu        sync.Mutex
	checkedAt time.Time
	fresh     bool
}

// State is the generation pair of a scope.
type State struct {
	// Durable is DynamoDB's generation (0 when never bumped).
	Durable int64
	// Mirror is Redis's generation; MirrorKnown is false when Redis has
	// none (empty, restarted, or never built).
	Mirror      int64
	MirrorKnown bool
}

// Fresh reports whether Redis can be trusted for this scope.
func (s State) Fresh() bool { return s.MirrorKnown && s.Mirror >= s.Durable }

// Marker is one dirty key: a key whose Redis value may be wrong.
type Marker struct {
	Key string
	At  string
}

func (t *Tracker) genKey() map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		schema.AttrPK: ddb.S(schema.CountersCachePrefix + t.Scope),
		schema.AttrSK: ddb.S(schema.CountersGenSK),
	}
}

func (t *Tracker) dirtyPK() string {
	return schema.CountersCachePrefix + t.Scope + schema.CountersDirtySuffix
}

func (t *Tracker) markerKey(key string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{schema.AttrPK: ddb.S(t.dirtyPK()), schema.AttrSK: ddb.S(key)}
}

// RedisKey is the key holding Redis's generation for the scope.
func (t *Tracker) RedisKey() string { return "rally:gen:" + t.Scope }

// Fresh reports whether Redis can be trusted, re-checking at most every
// CheckEvery. Any failure to check counts as not fresh.
func (t *Tracker) Fresh(ctx context.Context) bool {
	every := t.CheckEvery
	if every == 0 {
		every = time.Second
	}
	t.mu.Lock()
	if time.Since(t.checkedAt) < every {
		f := t.fresh
		t.mu.Unlock()
		return f
	}
	t.mu.Unlock()
	st, err := t.State(ctx)
	fresh := err == nil && st.Fresh()
	t.mu.Lock()
	t.fresh, t.checkedAt = fresh, time.Now()
	t.mu.Unlock()
	return fresh
}

// Forget drops the cached Fresh answer, e.g. after a Redis failure.
func (t *Tracker) Forget() {
	t.mu.Lock()
	t.checkedAt = time.Time{}
	t.fresh = false
	t.mu.Unlock()
}

// State reads both generations.
func (t *Tracker) State(ctx context.Context) (State, error) {
	var st State
	out, err := t.DB.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(t.Table), Key: t.genKey(), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return st, fmt.Errorf("cachegen %s: read durable generation: %w", t.Scope, err)
	}
	if v, ok := out.Item[schema.AttrGen].(*types.AttributeValueMemberN); ok {
		if st.Durable, err = strconv.ParseInt(v.Value, 10, 64); err != nil {
			return st, fmt.Errorf("cachegen %s: bad generation %q", t.Scope, v.Value)
		}
	}
	mirror, err := t.Redis.Get(ctx, t.RedisKey()).Int64()
	switch {
	case errors.Is(err, redis.Nil):
	case err != nil:
		return st, fmt.Errorf("cachegen %s: read redis generation: %w", t.Scope, err)
	default:
		st.Mirror, st.MirrorKnown = mirror, true
	}
	return st, nil
}

// MarkDirty records that the Redis values of keys may be wrong, then bumps
// the durable generation so every reader stops trusting Redis until a
// repair. Markers are written first: a repair that sees the new generation
// is sure to see them.
func (t *Tracker) MarkDirty(ctx context.Context, keys []string, at time.Time) error {
	stamp := ddb.S(ddb.FormatTime(at))
	seen := map[string]bool{}
	var reqs []types.WriteRequest
	for _, k := range keys {
		if seen[k] {
			continue
		}
		seen[k] = true
		item := t.markerKey(k)
		item[schema.AttrMarkedAt] = stamp
		reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: item}})
	}
	if err := ddb.BatchWrite(ctx, t.DB, t.Table, reqs); err != nil {
		return fmt.Errorf("cachegen %s: mark dirty: %w", t.Scope, err)
	}
	return t.Bump(ctx)
}

// Bump advances the durable generation: Redis is stale until repaired.
func (t *Tracker) Bump(ctx context.Context) error {
	bump := ddb.MustBuild(expression.NewBuilder().WithUpdate(expression.Add(expression.Name(schema.AttrGen), expression.Value(1))))
	_, err := t.DB.UpdateItem(ctx, ddb.UpdateInput(t.Table, t.genKey(), bump))
	if err != nil {
		return fmt.Errorf("cachegen %s: bump generation: %w", t.Scope, err)
	}
	t.Forget()
	return nil
}

// Dirty returns up to limit dirty markers.
func (t *Tracker) Dirty(ctx context.Context, limit int32) ([]Marker, error) {
	in := ddb.QueryInput(t.Table, ddb.MustBuild(expression.NewBuilder().WithKeyCondition(
		expression.Key(schema.AttrPK).Equal(expression.Value(t.dirtyPK())))))
	in.ConsistentRead, in.Limit = aws.Bool(true), aws.Int32(limit)
	out, err := t.DB.Query(ctx, in)
	if err != nil {
		return nil, fmt.Errorf("cachegen %s: list dirty keys: %w", t.Scope, err)
	}
	markers := make([]Marker, 0, len(out.Items))
	for _, it := range out.Items {
		var m Marker
		if v, ok := it[schema.AttrSK].(*types.AttributeValueMemberS); ok {
			m.Key = v.Value
		}
		if v, ok := it[schema.AttrMarkedAt].(*types.AttributeValueMemberS); ok {
			m.At = v.Value
		}
		markers = append(markers, m)
	}
	return markers, nil
}

// Clear removes repaired markers, unless one was marked again meanwhile.
func (t *Tracker) Clear(ctx context.Context, markers []Marker) error {
	for _, m := range markers {
		unchanged := ddb.MustBuild(expression.NewBuilder().WithCondition(
			expression.Name(schema.AttrMarkedAt).Equal(expression.Value(m.At))))
		_, err := t.DB.DeleteItem(ctx, &dynamodb.DeleteItemInput{
			TableName:                 aws.String(t.Table),
			Key:                       t.markerKey(m.Key),
			ConditionExpression:       unchanged.Condition(),
			ExpressionAttributeNames:  unchanged.Names(),
			ExpressionAttributeValues: unchanged.Values(),
		})
		var ccf *types.ConditionalCheckFailedException
		if err != nil && !errors.As(err, &ccf) {
			return fmt.Errorf("cachegen %s: clear %s: %w", t.Scope, m.Key, err)
		}
	}
	return nil
}

// Drop removes markers whatever they say (an erasure: the user they name
// has nothing left to repair).
func (t *Tracker) Drop(ctx context.Context, keys ...string) error {
	for _, k := range keys {
		_, err := t.DB.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(t.Table), Key: t.markerKey(k)})
		if err != nil {
			return fmt.Errorf("cachegen %s: drop a marker: %w", t.Scope, err)
		}
	}
	return nil
}

// advanceScript sets the generation only forward, so a slow repair cannot
// move it back past a newer one.
var advanceScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur == false or tonumber(cur) < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1])
  return 1
end
return 0`)

// Advance records that Redis now mirrors DynamoDB up to generation gen.
func (t *Tracker) Advance(ctx context.Context, gen int64) error {
	if err := advanceScript.Run(ctx, t.Redis, []string{t.RedisKey()}, gen).Err(); err != nil {
		return fmt.Errorf("cachegen %s: advance redis generation: %w", t.Scope, err)
	}
	t.Forget()
	return nil
}

// The scopes: each feature that mirrors DynamoDB in Redis has one.
const (
	ScopeReactions    = "reactions"
	ScopeLeaderboards = "leaderboards"
	ScopeStreaks      = "streaks"
)

// Scopes lists every scope (a health check asks each whether Redis can
// be trusted).
func Scopes() []string { return []string{ScopeReactions, ScopeLeaderboards, ScopeStreaks} }
