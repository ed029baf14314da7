package privacy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/errs"
	"github.com/rallyhq/rally/shared/schema"
)

// Records keeps erasure records in the Erasures table:
//
//	user_hash  erasure_id  status  requested_at  completed_at
//	user_id, pending, lease_until   (only while PENDING)
//
// pending ("PENDING") exists only while the erasure is pending, so the
// by_pending index lists exactly the erasures still to finish. Times are
// stored as ddb.FormatTime writes them, so they compare as strings in
// condition expressions (leases, the analytics guard).
type Records struct {
	DB    ddb.DB
	Table string
	// Hasher makes the hashes records are kept under.
	Hasher *Hasher
}

type record struct {
	UserHash    string `dynamodbav:"user_hash"`
	ID          string `dynamodbav:"erasure_id"`
	Status      string `dynamodbav:"status"`
	RequestedAt string `dynamodbav:"requested_at"`
	CompletedAt string `dynamodbav:"completed_at,omitempty"`
	UserID      string `dynamodbav:"user_id,omitempty"`
	Pending     string `dynamodbav:"pending,omitempty"`
	LeaseUntil  string `dynamodbav:"lease_until,omitempty"`
}

func (r record) erasure() Erasure {
	e := Erasure{ID: r.ID, Hash: r.UserHash, Status: Status(r.Status), UserID: r.UserID}
	e.RequestedAt, e.CompletedAt = ddb.ParseTime(r.RequestedAt), ddb.ParseTime(r.CompletedAt)
	return e
}

func (s *Records) key(hash string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{schema.AttrUserHash: ddb.S(hash)}
}

// noneOpen is the condition for a new erasure record: none exists, or the
// last one completed.
var noneOpen = expression.Name(schema.AttrUserHash).AttributeNotExists().
	Or(expression.Name(schema.AttrStatus).Equal(expression.Value(string(Completed))))

// thisErasure is the condition that the record is still e's.
func thisErasure(e Erasure) expression.ConditionBuilder {
	return expression.Name(schema.AttrErasureID).Equal(expression.Value(e.ID))
}

func newID() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("privacy: new erasure id: %w", err)
	}
	return "er_" + hex.EncodeToString(b), nil
}

// Request records an erasure of user and returns it: the pending one if
// there is one, else a new one (also after a completed erasure, since the
// user may have come back since).
func (s *Records) Request(ctx context.Context, user string, now time.Time) (Erasure, error) {
	hashes := s.Hasher.Hashes(ctx, user)
	// One pending under the key's previous version is the user's erasure
	// still: a request made across a rotation does not start a second.
	for _, earlier := range hashes[1:] {
		e, ok, err := s.Get(ctx, earlier)
		if err != nil {
			return Erasure{}, err
		}
		if ok && e.Status == Pending {
			return e, nil
		}
	}
	hash := hashes[0]
	for attempt := 0; attempt < 3; attempt++ {
		id, err := newID()
		if err != nil {
			return Erasure{}, err
		}
		r := record{
			UserHash: hash, ID: id, Status: string(Pending), RequestedAt: ddb.FormatTime(now),
			UserID: user, Pending: schema.ErasurePending,
		}
		item, err := attributevalue.MarshalMap(r)
		if err != nil {
			return Erasure{}, fmt.Errorf("privacy: encode erasure: %w", err)
		}
		_, err = s.DB.PutItem(ctx, ddb.PutInput(s.Table, item, ddb.MustBuild(expression.NewBuilder().WithCondition(noneOpen))))
		if err == nil {
			return r.erasure(), nil
		}
		if !ddb.IsConditionFailed(err) {
			return Erasure{}, errs.Wrap(errs.Unavailable, err, "the erasure could not be recorded")
		}
		// One is pending: that is the answer (unless it completed meanwhile).
		cur, ok, err := s.Get(ctx, hash)
		if err != nil {
			return Erasure{}, err
		}
		if ok && cur.Status == Pending {
			return cur, nil
		}
	}
	return Erasure{}, errs.New(errs.Unavailable, "the erasure could not be recorded; retry")
}

// Find reads the latest erasure record of user: the one under the key's
// current version, else the one under its previous version. When there
// is neither it reads the key again (at most once a minute), since a
// newer instance may have written the record under a key this one has
// not read yet.
func (s *Records) Find(ctx context.Context, user string) (Erasure, bool, error) {
	for attempt := 0; attempt < 2; attempt++ {
		for _, h := range s.Hasher.Hashes(ctx, user) {
			e, ok, err := s.Get(ctx, h)
			if err != nil || ok {
				return e, ok, err
			}
		}
		if !s.Hasher.Reload(ctx) {
			break
		}
	}
	return Erasure{}, false, nil
}

// Get reads the erasure record of a user hash.
func (s *Records) Get(ctx context.Context, hash string) (Erasure, bool, error) {
	out, err := s.DB.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(s.Table), Key: s.key(hash), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return Erasure{}, false, errs.Wrap(errs.Unavailable, err, "the erasure record could not be read")
	}
	if out.Item == nil {
		return Erasure{}, false, nil
	}
	var r record
	if err := attributevalue.UnmarshalMap(out.Item, &r); err != nil {
		return Erasure{}, false, fmt.Errorf("privacy: decode erasure: %w", err)
	}
	return r.erasure(), true, nil
}

// States reads the erasure records of users: the last erasure of each
// user that has one, under the key's current version, else its previous
// one. When some user has neither it reads the key again (at most once a
// minute), as Find does.
func (s *Records) States(ctx context.Context, users []string) (map[string]Erasure, error) {
	for attempt := 0; ; attempt++ {
		out, err := s.states(ctx, users)
		if err != nil || len(out) == len(users) || attempt == 1 || !s.Hasher.Reload(ctx) {
			return out, err
		}
	}
}

func (s *Records) states(ctx context.Context, users []string) (map[string]Erasure, error) {
	type owner struct {
		user string
		rank int // 0 under the key's current version
	}
	byHash := make(map[string]owner, 2*len(users))
	keys := make([]map[string]types.AttributeValue, 0, 2*len(users))
	for _, u := range users {
		for rank, h := range s.Hasher.Hashes(ctx, u) {
			if _, ok := byHash[h]; !ok {
				byHash[h] = owner{u, rank}
				keys = append(keys, s.key(h))
			}
		}
	}
	items, err := ddb.BatchGet(ctx, s.DB, s.Table, keys, true)
	if err != nil {
		return nil, errs.Wrap(errs.Unavailable, err, "the erasure records could not be read")
	}
	out := make(map[string]Erasure, len(items))
	ranks := make(map[string]int, len(items))
	for _, it := range items {
		var r record
		if err := attributevalue.UnmarshalMap(it, &r); err != nil {
			return nil, fmt.Errorf("privacy: decode erasure: %w", err)
		}
		o, ok := byHash[r.UserHash]
		if !ok {
			continue
		}
		if rank, seen := ranks[o.user]; !seen || o.rank < rank {
			out[o.user], ranks[o.user] = r.erasure(), o.rank
		}
	}
	return out, nil
}

// Waiting is an erasure still pending, as the by_pending index lists it.
type Waiting struct {
	Hash        string
	RequestedAt time.Time
}

// Pending lists up to limit erasures still pending, oldest first.
func (s *Records) Pending(ctx context.Context, limit int32) ([]Waiting, error) {
	in := ddb.QueryInput(s.Table, ddb.MustBuild(expression.NewBuilder().WithKeyCondition(
		expression.Key(schema.AttrPending).Equal(expression.Value(schema.ErasurePending)))))
	in.IndexName, in.Limit = aws.String(schema.IndexErasuresPending), aws.Int32(limit)
	out, err := s.DB.Query(ctx, in)
	if err != nil {
		return nil, fmt.Errorf("privacy: list pending erasures: %w", err)
	}
	waiting := make([]Waiting, 0, len(out.Items))
	for _, it := range out.Items {
		var r record
		if err := attributevalue.UnmarshalMap(it, &r); err != nil {
			return nil, fmt.Errorf("privacy: decode pending erasure: %w", err)
		}
		waiting = append(waiting, Waiting{Hash: r.UserHash, RequestedAt: ddb.ParseTime(r.RequestedAt)})
	}
	return waiting, nil
}

// errLeased means another run holds the erasure.
var errLeased = errors.New("privacy: another run holds this erasure")

// Lease claims a pending erasure for one run until until, so two runs (the
// stream's and the schedule's) never work on it at once. A lease that ran
// out (its run crashed) can be taken.
func (s *Records) Lease(ctx context.Context, e Erasure, now, until time.Time) error {
	lease := expression.Name(schema.AttrLeaseUntil)
	free := thisErasure(e).
		And(expression.Name(schema.AttrStatus).Equal(expression.Value(string(Pending)))).
		And(lease.AttributeNotExists().Or(lease.LessThan(expression.Value(ddb.FormatTime(now)))))
	_, err := s.DB.UpdateItem(ctx, ddb.UpdateInput(s.Table, s.key(e.Hash), ddb.MustBuild(expression.NewBuilder().
		WithUpdate(expression.Set(lease, expression.Value(ddb.FormatTime(until)))).
		WithCondition(free))))
	if ddb.IsConditionFailed(err) {
		return errLeased
	}
	if err != nil {
		return fmt.Errorf("privacy: lease erasure: %w", err)
	}
	return nil
}

// Release gives a lease up, leaving the erasure pending for a later run.
func (s *Records) Release(ctx context.Context, e Erasure) error {
	_, err := s.DB.UpdateItem(ctx, ddb.UpdateInput(s.Table, s.key(e.Hash), ddb.MustBuild(expression.NewBuilder().
		WithUpdate(expression.Remove(expression.Name(schema.AttrLeaseUntil))).
		WithCondition(thisErasure(e)))))
	if err != nil && !ddb.IsConditionFailed(err) {
		return fmt.Errorf("privacy: release erasure: %w", err)
	}
	return nil
}

// Complete marks the erasure done and drops everything but the hash, the
// erasure id and its times.
func (s *Records) Complete(ctx context.Context, e Erasure, now time.Time) error {
	complete := expression.Set(expression.Name(schema.AttrStatus), expression.Value(string(Completed))).
		Set(expression.Name(schema.AttrCompletedAt), expression.Value(ddb.FormatTime(now))).
		Remove(expression.Name(schema.AttrUserID)).
		Remove(expression.Name(schema.AttrPending)).
		Remove(expression.Name(schema.AttrLeaseUntil))
	_, err := s.DB.UpdateItem(ctx, ddb.UpdateInput(s.Table, s.key(e.Hash), ddb.MustBuild(expression.NewBuilder().
		WithUpdate(complete).
		WithCondition(thisErasure(e)))))
	if err != nil && !ddb.IsConditionFailed(err) {
		return fmt.Errorf("privacy: complete erasure: %w", err)
	}
	return nil
}

// Unerased are the transaction items that hold while no erasure of user
// was requested at or after since, one for each version of the key a
// record may be kept under: the analytics shipper creates a user's secret
// only with them, so an erased user's secret never comes back for events
// from before the erasure.
func (s *Records) Unerased(ctx context.Context, user string, since time.Time) []types.TransactWriteItem {
	unerased := ddb.MustBuild(expression.NewBuilder().WithCondition(
		expression.Name(schema.AttrUserHash).AttributeNotExists().
			Or(expression.Name(schema.AttrAskedAt).LessThan(expression.Value(ddb.FormatTime(since))))))
	var items []types.TransactWriteItem
	for _, h := range s.Hasher.Hashes(ctx, user) {
		items = append(items, types.TransactWriteItem{ConditionCheck: ddb.TransactCheck(s.Table, s.key(h), unerased)})
	}
	return items
}
