// Package idempotency makes HTTP writes safe to retry: a request carrying an
// Idempotency-Key runs once, and every retry with the same key gets the first
// response. Records live in DynamoDB (IN_PROGRESS → COMPLETED, with expiry and
// an in-progress lease); the payload hash is checked even when the record
// already exists, so the same key with a different body is refused (422).
package idempotency

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/errs"
	"github.com/rallyhq/rally/shared/schema"
)

// Header is the request header carrying the key.
const Header = "Idempotency-Key"

// Record states.
const (
	InProgress = "IN_PROGRESS"
	Completed  = "COMPLETED"
)

// Store keeps idempotency records in one table.
type Store struct {
	DB    ddb.DB
	Table string
	Clock clock.Clock
	// Expiry is how long a completed response is replayed (default 24h).
	Expiry time.Duration
	// Lease is how long an in-progress claim blocks others before a crashed
	// attempt may be retried (default 30s).
	Lease time.Duration
	// Wait is how long a request that finds the key in progress waits for
	// the first to complete before answering 409 (default 3s).
	Wait time.Duration
}

// Key identifies one idempotent operation: the route, the caller and the
// client's key.
type Key struct {
	Route  string
	Caller string
	Value  string
}

func (k Key) id() string { return k.Route + "#" + k.Caller + "#" + k.Value }

// Result is a stored response.
type Result struct {
	Status int             `dynamodbav:"response_status"`
	Body   json.RawMessage `dynamodbav:"response_body"`
}

// Claim is an in-progress lease on a key, held by one request.
type Claim struct {
	key   Key
	token string
}

type record struct {
	PK          string `dynamodbav:"pk"`
	Status      string `dynamodbav:"status"`
	Hash        string `dynamodbav:"payload_hash"`
	Token       string `dynamodbav:"token"`
	LockedUntil int64  `dynamodbav:"locked_until_ms"`
	ExpiresAt   int64  `dynamodbav:"expires_at"`
	// Owner is the caller the record belongs to; it places the record in
	// the sparse by_owner index, so erasing a user finds their records.
	Owner string `dynamodbav:"owner,omitempty"`
	Result
}

// Hash fingerprints a request: method, path and the body as canonical JSON
// (so formatting differences do not count as a different request).
func Hash(method, path string, body []byte) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s %s\n", method, path)
	var v any
	if len(body) > 0 && json.Unmarshal(body, &v) == nil {
		canonical, _ := json.Marshal(v)
		h.Write(canonical)
	} else {
		h.Write(body)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Begin claims k for a request with the given payload hash. It returns the
// stored result when the key already completed with the same payload, a
// Claim when this request must do the work, or an error: KeyReused for a
// different payload, Conflict when another request still holds the key
// after waiting.
func (s *Store) Begin(ctx context.Context, k Key, hash string) (*Claim, *Result, error) {
	deadline := time.Now().Add(s.wait())
	for {
		claim, stored, err := s.tryBegin(ctx, k, hash)
		if err == nil || !errs.Is(err, errs.Conflict) || time.Now().After(deadline) {
			return claim, stored, err
		}
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(25 * time.Millisecond):
		}
	}
}

func (s *Store) tryBegin(ctx context.Context, k Key, hash string) (*Claim, *Result, error) {
	now := s.Clock.Now()
	token := newToken()
	rec := record{
		PK: k.id(), Owner: k.Caller, Status: InProgress, Hash: hash, Token: token,
		LockedUntil: now.Add(s.lease()).UnixMilli(),
		ExpiresAt:   now.Add(s.expiry()).Unix(),
	}
	item, err := attributevalue.MarshalMap(rec)
	if err != nil {
		return nil, nil, err
	}
	delete(item, schema.AttrResponseStatus)
	delete(item, schema.AttrResponseBody)
	// A record may be taken over when it never existed, when it expired
	// (TTL deletion is lazy), or when an in-progress lease ran out because
	// the request holding it crashed.
	free := expression.Or(
		expression.Name(schema.AttrPK).AttributeNotExists(),
		expression.Name(schema.TTL).LessThan(expression.Value(now.Unix())),
		expression.Name(schema.AttrStatus).Equal(expression.Value(InProgress)).
			And(expression.Name(schema.AttrLockedUntil).LessThan(expression.Value(now.UnixMilli()))),
	)
	in := ddb.PutInput(s.Table, item, ddb.MustBuild(expression.NewBuilder().WithCondition(free)))
	in.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
	_, err = s.DB.PutItem(ctx, in)
	if err == nil {
		return &Claim{key: k, token: token}, nil, nil
	}
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		return nil, nil, errs.Wrap(errs.Unavailable, err, "the idempotency store is unreachable")
	}
	var existing record
	if err := attributevalue.UnmarshalMap(ccf.Item, &existing); err != nil {
		return nil, nil, fmt.Errorf("idempotency: decode record %s: %w", k.id(), err)
	}
	if existing.Hash != hash {
		return nil, nil, errs.New(errs.KeyReused, "this Idempotency-Key was used with a different request")
	}
	if existing.Status == Completed {
		r := existing.Result
		return nil, &r, nil
	}
	return nil, nil, errs.New(errs.Conflict, "a request with this Idempotency-Key is still in progress; retry shortly")
}

// Complete stores the result for the claim, making it the answer to every
// retry.
func (s *Store) Complete(ctx context.Context, c *Claim, r Result) error {
	_, err := s.DB.UpdateItem(ctx, ddb.UpdateInput(s.Table, s.key(c), complete(c, r)))
	if err != nil {
		return fmt.Errorf("idempotency: complete %s: %w", c.key.id(), err)
	}
	return nil
}

// CompleteUpdate is Complete as a transaction item, for operations whose
// effect and idempotency record must commit together (exactly once even if
// the process dies between them).
func (s *Store) CompleteUpdate(c *Claim, r Result) *types.Update {
	return ddb.TransactUpdate(s.Table, s.key(c), complete(c, r))
}

// complete stores r as the claim's result, while the claim still holds.
func complete(c *Claim, r Result) expression.Expression {
	update := expression.Set(expression.Name(schema.AttrStatus), expression.Value(Completed)).
		Set(expression.Name(schema.AttrResponseStatus), expression.Value(r.Status)).
		Set(expression.Name(schema.AttrResponseBody), expression.Value(&types.AttributeValueMemberB{Value: r.Body}))
	return ddb.MustBuild(expression.NewBuilder().WithUpdate(update).WithCondition(c.held()))
}

// held is the condition that the claim still holds its key.
func (c *Claim) held() expression.ConditionBuilder {
	return expression.Name(schema.AttrToken).Equal(expression.Value(c.token))
}

func (s *Store) key(c *Claim) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{schema.AttrPK: ddb.S(c.key.id())}
}

// Release gives up a claim after a failure so the client may retry at once.
func (s *Store) Release(ctx context.Context, c *Claim) error {
	held := ddb.MustBuild(expression.NewBuilder().WithCondition(c.held()))
	_, err := s.DB.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName:                 aws.String(s.Table),
		Key:                       s.key(c),
		ConditionExpression:       held.Condition(),
		ExpressionAttributeNames:  held.Names(),
		ExpressionAttributeValues: held.Values(),
	})
	var ccf *types.ConditionalCheckFailedException
	if err != nil && !errors.As(err, &ccf) {
		return fmt.Errorf("idempotency: release %s: %w", c.key.id(), err)
	}
	return nil
}

// Run executes fn at most once per key: the first call runs it and stores
// its result; retries get the stored result. If fn fails, the claim is
// released and the error returned, so a retry runs fn again.
func (s *Store) Run(ctx context.Context, k Key, hash string, fn func(context.Context) (Result, error)) (Result, bool, error) {
	claim, stored, err := s.Begin(ctx, k, hash)
	if err != nil {
		return Result{}, false, err
	}
	if stored != nil {
		return *stored, true, nil
	}
	res, err := fn(ctx)
	if err != nil {
		if rerr := s.Release(context.WithoutCancel(ctx), claim); rerr != nil {
			err = errors.Join(err, rerr)
		}
		return Result{}, false, err
	}
	if err := s.Complete(ctx, claim, res); err != nil {
		return Result{}, false, err
	}
	return res, false, nil
}

func (s *Store) expiry() time.Duration {
	if s.Expiry > 0 {
		return s.Expiry
	}
	return 24 * time.Hour
}

func (s *Store) lease() time.Duration {
	if s.Lease > 0 {
		return s.Lease
	}
	return 30 * time.Second
}

func (s *Store) wait() time.Duration {
	if s.Wait > 0 {
		return s.Wait
	}
	return 3 * time.Second
}

func newToken() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// EraseOwner deletes every record of user (see Key.Caller) and returns how
// many it deleted. It finds them by the by_owner index, which is
// eventually consistent: a record written a moment before may be missed,
// and a later run deletes it. Safe to run again; errors never name the
// user.
func (s *Store) EraseOwner(ctx context.Context, user string) (int, error) {
	in := ddb.QueryInput(s.Table, ddb.MustBuild(expression.NewBuilder().WithKeyCondition(
		expression.Key(schema.AttrOwner).Equal(expression.Value(user)))))
	in.IndexName = aws.String(schema.IndexIdempotencyByOwner)
	erased := 0
	for {
		out, err := s.DB.Query(ctx, in)
		if err != nil {
			return erased, errs.Wrap(errs.Unavailable, fmt.Errorf("idempotency: list an owner's records: %w", err), "the idempotency store is unreachable")
		}
		reqs := make([]types.WriteRequest, 0, len(out.Items))
		for _, it := range out.Items {
			reqs = append(reqs, types.WriteRequest{DeleteRequest: &types.DeleteRequest{
				Key: map[string]types.AttributeValue{schema.AttrPK: it[schema.AttrPK]},
			}})
		}
		if err := ddb.BatchWrite(ctx, s.DB, s.Table, reqs); err != nil {
			return erased, errs.Wrap(errs.Unavailable, fmt.Errorf("idempotency: erase an owner's records: %w", err), "the idempotency store is unreachable")
		}
		erased += len(reqs)
		if len(out.LastEvaluatedKey) == 0 {
			return erased, nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}
