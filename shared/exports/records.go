package exports

import (
	"context"
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

// Records keeps export records in the Exports table, one item per export
// under its user's partition:
//
//	user_id  export_id  status  prefix  requested_at  expires_at (TTL, epoch seconds)
//	ready_at, object                                  (once READY)
//	pending, part, cursor, opened, written, chunks    (while PENDING: by_pending and the checkpoint)
//	lease_until, leased_by, retry_at, failures        (while a run holds it, or after a failed one)
//
// Times are stored as ddb.FormatTime writes them, so leases compare as
// strings in conditions.
type Records struct {
	DB    ddb.DB
	Table string
	// Hash is the user's erasure hash under the key's current version:
	// a new export's documents are kept under it (UserPrefix).
	Hash func(user string) string
}

type record struct {
	UserID      string `dynamodbav:"user_id"`
	ID          string `dynamodbav:"export_id"`
	Status      string `dynamodbav:"status"`
	Prefix      string `dynamodbav:"prefix"`
	RequestedAt string `dynamodbav:"requested_at"`
	ReadyAt     string `dynamodbav:"ready_at,omitempty"`
	Object      string `dynamodbav:"object,omitempty"`
	ExpiresAt   int64  `dynamodbav:"expires_at"`
	Pending     string `dynamodbav:"pending,omitempty"`
	Part        int    `dynamodbav:"part,omitempty"`
	Cursor      string `dynamodbav:"cursor,omitempty"`
	Opened      bool   `dynamodbav:"opened,omitempty"`
	Written     int64  `dynamodbav:"written,omitempty"`
	Chunks      int    `dynamodbav:"chunks,omitempty"`
	LeaseUntil  string `dynamodbav:"lease_until,omitempty"`
	LeasedBy    string `dynamodbav:"leased_by,omitempty"`
	RetryAt     string `dynamodbav:"retry_at,omitempty"`
	Failures    int    `dynamodbav:"failures,omitempty"`
}

func (r record) export() Export {
	return Export{
		ID: r.ID, UserID: r.UserID, Status: Status(r.Status), Prefix: r.Prefix,
		RequestedAt: ddb.ParseTime(r.RequestedAt), ReadyAt: ddb.ParseTime(r.ReadyAt), Object: r.Object,
		ExpiresAt:  time.Unix(r.ExpiresAt, 0).UTC(),
		Checkpoint: Checkpoint{Part: r.Part, Cursor: r.Cursor, Opened: r.Opened, Written: r.Written, Chunks: r.Chunks},
		RetryAt:    ddb.ParseTime(r.RetryAt), Failures: r.Failures,
		LeaseUntil: ddb.ParseTime(r.LeaseUntil), LeasedBy: r.LeasedBy,
	}
}

func decode(item map[string]types.AttributeValue) (Export, error) {
	var r record
	if err := attributevalue.UnmarshalMap(item, &r); err != nil {
		return Export{}, fmt.Errorf("exports: decode an export record: %w", err)
	}
	return r.export(), nil
}

func key(user, id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{schema.AttrUserID: ddb.S(user), schema.AttrExportID: ddb.S(id)}
}

func unavailable(err error, what string) error {
	return errs.Wrap(errs.Unavailable, fmt.Errorf("exports: %s: %w", what, err), "the exports store is unreachable")
}

// Request records a new export of user and returns it; while one is
// pending, that one is the answer (asking twice does not export twice).
func (s *Records) Request(ctx context.Context, user string, now time.Time) (Export, error) {
	open, ok, err := s.pending(ctx, user)
	if err != nil || ok {
		return open, err
	}
	id, err := newID()
	if err != nil {
		return Export{}, err
	}
	r := record{
		UserID: user, ID: id, Status: string(Pending), Prefix: UserPrefix(s.Hash(user)), RequestedAt: ddb.FormatTime(now),
		ExpiresAt: now.Add(Retention).Unix(), Pending: schema.ErasurePending,
	}
	item, err := attributevalue.MarshalMap(r)
	if err != nil {
		return Export{}, fmt.Errorf("exports: encode an export record: %w", err)
	}
	fresh := ddb.MustBuild(expression.NewBuilder().WithCondition(expression.Name(schema.AttrExportID).AttributeNotExists()))
	if _, err := s.DB.PutItem(ctx, ddb.PutInput(s.Table, item, fresh)); err != nil {
		return Export{}, unavailable(err, "record an export")
	}
	return r.export(), nil
}

// pending finds user's export still pending, if any.
func (s *Records) pending(ctx context.Context, user string) (Export, bool, error) {
	all, err := s.OfUser(ctx, user)
	if err != nil {
		return Export{}, false, err
	}
	for _, e := range all {
		if e.Status == Pending {
			return e, true, nil
		}
	}
	return Export{}, false, nil
}

// OfUser lists every export record of user (a few: they expire within
// days), oldest id first.
func (s *Records) OfUser(ctx context.Context, user string) ([]Export, error) {
	in := ddb.QueryInput(s.Table, ddb.MustBuild(expression.NewBuilder().WithKeyCondition(
		expression.Key(schema.AttrUserID).Equal(expression.Value(user)))))
	in.ConsistentRead = aws.Bool(true)
	var out []Export
	for {
		page, err := s.DB.Query(ctx, in)
		if err != nil {
			return nil, unavailable(err, "list a user's exports")
		}
		for _, it := range page.Items {
			e, err := decode(it)
			if err != nil {
				return nil, err
			}
			out = append(out, e)
		}
		if len(page.LastEvaluatedKey) == 0 {
			return out, nil
		}
		in.ExclusiveStartKey = page.LastEvaluatedKey
	}
}

// Get reads user's export id.
func (s *Records) Get(ctx context.Context, user, id string) (Export, bool, error) {
	out, err := s.DB.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(s.Table), Key: key(user, id), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return Export{}, false, unavailable(err, "read an export")
	}
	if len(out.Item) == 0 {
		return Export{}, false, nil
	}
	e, err := decode(out.Item)
	return e, err == nil, err
}

// Waiting is a pending export, as by_pending lists it.
type Waiting struct {
	UserID, ID  string
	RequestedAt time.Time
}

// Pending lists up to limit pending exports, oldest first.
func (s *Records) Pending(ctx context.Context, limit int32) ([]Waiting, error) {
	in := ddb.QueryInput(s.Table, ddb.MustBuild(expression.NewBuilder().WithKeyCondition(
		expression.Key(schema.AttrPending).Equal(expression.Value(schema.ErasurePending)))))
	in.IndexName, in.Limit = aws.String(schema.IndexExportsPending), aws.Int32(limit)
	out, err := s.DB.Query(ctx, in)
	if err != nil {
		return nil, fmt.Errorf("exports: list pending exports: %w", err)
	}
	waiting := make([]Waiting, 0, len(out.Items))
	for _, it := range out.Items {
		var r record
		if err := attributevalue.UnmarshalMap(it, &r); err != nil {
			return nil, fmt.Errorf("exports: decode a pending export: %w", err)
		}
		waiting = append(waiting, Waiting{UserID: r.UserID, ID: r.ID, RequestedAt: ddb.ParseTime(r.RequestedAt)})
	}
	return waiting, nil
}

// Lease outcomes a run must tell apart.
var (
	// errLeased means another run holds the export, or it is held back
	// after a failure, or it is no longer pending.
	errLeased = errors.New("exports: the export is leased, held back or done")
	// errGone means the export's record is gone: the user was erased.
	errGone = errors.New("exports: the export's record is gone")
)

var (
	leaseAttr = expression.Name(schema.AttrLeaseUntil)
	leasedBy  = expression.Name(schema.AttrLeasedBy)
	isPending = expression.Name(schema.AttrStatus).Equal(expression.Value(string(Pending)))
)

// Lease claims user's pending export id for owner until until, unless a
// run holds it or it is held back after a failure past now, and returns
// it as it stands.
func (s *Records) Lease(ctx context.Context, user, id, owner string, now, until time.Time) (Export, error) {
	t := expression.Value(ddb.FormatTime(now))
	retry := expression.Name(schema.AttrRetryAt)
	free := isPending.
		And(leaseAttr.AttributeNotExists().Or(leaseAttr.LessThan(t))).
		And(retry.AttributeNotExists().Or(retry.LessThanEqual(t)))
	in := ddb.UpdateInput(s.Table, key(user, id), ddb.MustBuild(expression.NewBuilder().
		WithUpdate(expression.Set(leaseAttr, expression.Value(ddb.FormatTime(until))).Set(leasedBy, expression.Value(owner))).
		WithCondition(free)))
	in.ReturnValues = types.ReturnValueAllNew
	in.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
	out, err := s.DB.UpdateItem(ctx, in)
	if err != nil {
		return Export{}, s.conditionFailure(err, "lease an export")
	}
	return decode(out.Attributes)
}

// conditionFailure tells a failed condition on an export's record apart:
// errGone when the record is gone, errLeased when another run holds it.
func (s *Records) conditionFailure(err error, what string) error {
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		if len(ccf.Item) == 0 {
			return errGone
		}
		return errLeased
	}
	return unavailable(err, what)
}

// held is the condition that owner still holds the export.
func held(owner string) expression.ConditionBuilder {
	return isPending.And(leasedBy.Equal(expression.Value(owner)))
}

// checkpoint sets e's checkpoint in an update.
func checkpoint(u expression.UpdateBuilder, c Checkpoint) expression.UpdateBuilder {
	return u.Set(expression.Name(schema.AttrPart), expression.Value(c.Part)).
		Set(expression.Name(schema.AttrCursor), expression.Value(c.Cursor)).
		Set(expression.Name(schema.AttrOpened), expression.Value(c.Opened)).
		Set(expression.Name(schema.AttrWritten), expression.Value(c.Written)).
		Set(expression.Name(schema.AttrChunks), expression.Value(c.Chunks))
}

func (s *Records) update(ctx context.Context, user, id string, u expression.UpdateBuilder, cond expression.ConditionBuilder, what string) error {
	in := ddb.UpdateInput(s.Table, key(user, id), ddb.MustBuild(expression.NewBuilder().WithUpdate(u).WithCondition(cond)))
	in.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
	if _, err := s.DB.UpdateItem(ctx, in); err != nil {
		return s.conditionFailure(err, what)
	}
	return nil
}

// Save records c as the checkpoint of the export owner holds, keeping
// the lease.
func (s *Records) Save(ctx context.Context, e Export, owner string, c Checkpoint) error {
	return s.update(ctx, e.UserID, e.ID, checkpoint(expression.UpdateBuilder{}, c), held(owner), "checkpoint an export")
}

// Release records c and gives owner's lease up: the export's stream
// record continues it at once, unless retryAt holds it back (a failed
// run; failures counts them).
func (s *Records) Release(ctx context.Context, e Export, owner string, c Checkpoint, retryAt time.Time, failures int) error {
	u := checkpoint(expression.Remove(leaseAttr).Remove(leasedBy), c).
		Set(expression.Name(schema.AttrFailures), expression.Value(failures))
	if retryAt.IsZero() {
		u = u.Remove(expression.Name(schema.AttrRetryAt))
	} else {
		u = u.Set(expression.Name(schema.AttrRetryAt), expression.Value(ddb.FormatTime(retryAt)))
	}
	return s.update(ctx, e.UserID, e.ID, u, held(owner), "release an export")
}

// Complete marks the export READY with its document at object, kept
// until expires, and drops the checkpoint and lease.
func (s *Records) Complete(ctx context.Context, e Export, owner, object string, readyAt, expires time.Time) error {
	u := expression.Set(expression.Name(schema.AttrStatus), expression.Value(string(Ready))).
		Set(expression.Name(schema.AttrReadyAt), expression.Value(ddb.FormatTime(readyAt))).
		Set(expression.Name(schema.AttrObject), expression.Value(object)).
		Set(expression.Name(schema.TTL), expression.Value(expires.Unix()))
	for _, a := range []string{schema.AttrPending, schema.AttrPart, schema.AttrCursor, schema.AttrOpened, schema.AttrWritten,
		schema.AttrChunks, schema.AttrLeaseUntil, schema.AttrLeasedBy, schema.AttrRetryAt, schema.AttrFailures} {
		u = u.Remove(expression.Name(a))
	}
	return s.update(ctx, e.UserID, e.ID, u, held(owner), "complete an export")
}

// Delete deletes user's export records ids.
func (s *Records) Delete(ctx context.Context, user string, ids []string) error {
	reqs := make([]types.WriteRequest, 0, len(ids))
	for _, id := range ids {
		reqs = append(reqs, types.WriteRequest{DeleteRequest: &types.DeleteRequest{Key: key(user, id)}})
	}
	if err := ddb.BatchWrite(ctx, s.DB, s.Table, reqs); err != nil {
		return fmt.Errorf("exports: delete %d export records: %w", len(reqs), err)
	}
	return nil
}
