// Package accounts knows when Rally first saw each player, for the fraud
// controls: an account younger than a threshold (24 h by default) gets half
// of every budget, and its reactions count in counts but not in trending.
//
// The first-seen time is durable (the Accounts table, written once with
// if_not_exists) and never changes, so it is cached without expiry: in the
// instance, then in Redis, so a player costs DynamoDB one write the first
// time Rally sees them and almost never again.
package accounts

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/redis/go-redis/v9"

	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/schema"
)

// Store records and reads first-seen times.
type Store struct {
	DB    ddb.DB
	Table string // Accounts, physical name
	Redis redis.UniversalClient
	Clock clock.Clock

	mu   sync.Mutex
	seen map[string]time.Time
}

// cached bounds the first-seen times one instance keeps.
const cached = 100_000

func redisKey(player string) string { return "rally:seen:" + player }

// FirstSeen returns when Rally first saw player; ok is false when it
// never did (nothing is recorded: see Seen).
func (s *Store) FirstSeen(ctx context.Context, player string) (t time.Time, ok bool, err error) {
	s.mu.Lock()
	t, ok = s.seen[player]
	s.mu.Unlock()
	if ok {
		return t, true, nil
	}
	if ms, err := s.Redis.Get(ctx, redisKey(player)).Int64(); err == nil {
		t = time.UnixMilli(ms).UTC()
		s.remember(player, t)
		return t, true, nil
	}
	out, err := s.DB.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(s.Table), Key: key(player), ConsistentRead: aws.Bool(true),
		ProjectionExpression: aws.String("#f"), ExpressionAttributeNames: map[string]string{"#f": schema.AttrFirstSeen},
	})
	if err != nil {
		return time.Time{}, false, fmt.Errorf("accounts: read first seen: %w", err)
	}
	if len(out.Item) == 0 {
		return time.Time{}, false, nil
	}
	if t, err = firstSeen(out.Item); err != nil {
		return time.Time{}, false, err
	}
	s.cache(ctx, player, t)
	return t, true, nil
}

// Seen records now as player's first-seen time unless one is stored. It
// is called once a request has succeeded, so bad input records nothing.
func (s *Store) Seen(ctx context.Context, player string) error {
	t, err := s.record(ctx, player)
	if err != nil {
		return err
	}
	s.cache(ctx, player, t)
	return nil
}

// cache keeps t in the instance and in Redis. A failed Redis write only
// costs the next cold instance a DynamoDB read.
func (s *Store) cache(ctx context.Context, player string, t time.Time) {
	_ = s.Redis.Set(ctx, redisKey(player), t.UnixMilli(), 0).Err()
	s.remember(player, t)
}

// record writes now as player's first-seen time unless one is stored, and
// returns the stored one.
func (s *Store) record(ctx context.Context, player string) (time.Time, error) {
	now := s.Clock.Now().UTC()
	out, err := s.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.Table),
		Key:                       key(player),
		UpdateExpression:          aws.String("SET #f = if_not_exists(#f, :now)"),
		ExpressionAttributeNames:  map[string]string{"#f": schema.AttrFirstSeen},
		ExpressionAttributeValues: map[string]types.AttributeValue{":now": &types.AttributeValueMemberN{Value: strconv.FormatInt(now.UnixMilli(), 10)}},
		ReturnValues:              types.ReturnValueAllNew,
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("accounts: record first seen: %w", err)
	}
	return firstSeen(out.Attributes)
}

func firstSeen(item map[string]types.AttributeValue) (time.Time, error) {
	n, ok := item[schema.AttrFirstSeen].(*types.AttributeValueMemberN)
	if !ok {
		return time.Time{}, errors.New("accounts: stored first-seen time is not a number")
	}
	ms, err := strconv.ParseInt(n.Value, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("accounts: stored first-seen time %q: %w", n.Value, err)
	}
	return time.UnixMilli(ms).UTC(), nil
}

func (s *Store) remember(player string, t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen == nil || len(s.seen) >= cached {
		s.seen = map[string]time.Time{}
	}
	s.seen[player] = t
}

// forget drops player from the instance's cache.
func (s *Store) forget(player string) {
	s.mu.Lock()
	delete(s.seen, player)
	s.mu.Unlock()
}

func key(player string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{schema.AttrPlayerID: &types.AttributeValueMemberS{Value: player}}
}

// Age is what the request's account looks like to the fraud controls.
type Age struct {
	// FirstSeen is when Rally first saw the account; zero when it never
	// did (this request is its first) or could not tell.
	FirstSeen time.Time
	// Young is true below the young-account age: also for an account
	// never seen, and when the first-seen time could not be read, so an
	// outage errs on the side of the smaller budget.
	Young bool
}

// Of returns player's Age now, young below youngFor (0: nobody is young,
// and nothing is looked up).
func (s *Store) Of(ctx context.Context, player string, youngFor time.Duration) Age {
	if youngFor <= 0 {
		return Age{}
	}
	first, ok, err := s.FirstSeen(ctx, player)
	if err != nil || !ok {
		return Age{Young: true}
	}
	return Age{FirstSeen: first, Young: s.Clock.Now().Sub(first) < youngFor}
}

type ageKey struct{}

// With returns ctx carrying the caller's Age.
func With(ctx context.Context, a Age) context.Context { return context.WithValue(ctx, ageKey{}, a) }

// Young reports whether the request in ctx comes from a young account.
func Young(ctx context.Context) bool {
	a, _ := ctx.Value(ageKey{}).(Age)
	return a.Young
}

// Eraser erases a player's first-seen time (a part of shared/privacy's
// erasure job): an erased player who comes back is a new account.
type Eraser struct {
	Store *Store
}

// Name implements privacy.Part.
func (e *Eraser) Name() string { return "account" }

// Erase implements privacy.Part.
func (e *Eraser) Erase(ctx context.Context, user string) (done bool, err error) {
	if _, err := e.Store.DB.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(e.Store.Table), Key: key(user)}); err != nil {
		return false, fmt.Errorf("accounts: erase: %w", err)
	}
	if err := e.Store.Redis.Del(ctx, redisKey(user)).Err(); err != nil {
		return false, fmt.Errorf("accounts: erase cached first seen: %w", err)
	}
	e.Store.forget(user)
	return true, nil
}

// Export is the player's account in their export: when Rally first saw
// them, or null when it never did (a part of shared/exports, a Single).
type Export struct {
	Store *Store
}

// ExportedAccount is the player's account in their export.
type ExportedAccount struct {
	FirstSeen time.Time `json:"first_seen"`
}

// Name implements exports.Part.
func (e *Export) Name() string { return "account" }

// Single implements exports.Single.
func (e *Export) Single() {}

// Export implements exports.Part. It reads the table, not the caches: the
// export says what Rally keeps.
func (e *Export) Export(ctx context.Context, user, _ string, _ int) ([]any, string, error) {
	out, err := e.Store.DB.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(e.Store.Table), Key: key(user), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return nil, "", fmt.Errorf("accounts: export: %w", err)
	}
	if len(out.Item) == 0 {
		return nil, "", nil
	}
	t, err := firstSeen(out.Item)
	if err != nil {
		return nil, "", err
	}
	return []any{ExportedAccount{FirstSeen: t}}, "", nil
}
