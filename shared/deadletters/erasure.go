package deadletters

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/schema"
)

// Erasure reaches the archive. A parked batch holds full stream images,
// so an erasure (shared/privacy) must scrub its user from every batch, and
// a redrive must never bring an erased user back:
//
//   - Every batch is indexed by the keyed hashes of the users its records
//     name (Archive.UserKeys), written before its records, so an erasure
//     finds every batch naming its user, even one being archived.
//   - The Eraser (the erasure's "deadletters" part) takes each such batch
//     under a lease, has the user's deletions applied (a parked deletion is
//     the compensation a count, a board or a streak board still waits
//     for), then puts the batch back without the user's records.
//   - A redrive takes the batch under the same lease and, once it holds it,
//     drops the records of users being erased (all but their deletions)
//     or erased since the records were written; the archiver does the same
//     with a batch parked after an erasure completed. Reading erasures
//     after taking the lease (or writing the index) is what makes this
//     exact: an erasure that starts later finds the batch, and waits for
//     the lease.

// Erasures tells which users are erased or being erased (shared/privacy's
// records).
type Erasures interface {
	// States returns the erasure state of each of users that has one.
	States(ctx context.Context, users []string) (map[string]ErasureState, error)
}

// ErasureState is where a user's last erasure stands.
type ErasureState struct {
	Pending bool
	// CompletedAt is when it completed (zero while pending).
	CompletedAt time.Time
}

// leaseFor bounds how long a redrive or an erasure holds a batch.
const leaseFor = 2 * time.Minute

// ErrLeased means another redrive or erasure holds the batch.
var ErrLeased = errors.New("deadletters: the batch is being redriven or scrubbed; try again shortly")

// UsersOf lists the users the records name (the values of the attributes
// that hold user ids, schema.UserIDAttrs, in their images), each once.
func UsersOf(records []events.DynamoDBEventRecord) []string {
	var users []string
	for _, r := range records {
		users = append(users, recordUsers(r)...)
	}
	slices.Sort(users)
	return slices.Compact(users)
}

func recordUsers(r events.DynamoDBEventRecord) []string {
	var users []string
	for _, img := range []map[string]events.DynamoDBAttributeValue{r.Change.Keys, r.Change.OldImage, r.Change.NewImage} {
		for _, attr := range schema.UserIDAttrs {
			v, ok := img[attr]
			if ok && v.DataType() == events.DataTypeString && v.String() != "" && !slices.Contains(users, v.String()) {
				users = append(users, v.String())
			}
		}
	}
	return users
}

// isDeletion reports whether a record is an item's deletion: it only takes
// away, and is what a count or a board waits for to forget an erased user.
func isDeletion(r events.DynamoDBEventRecord) bool {
	return r.Change.NewImage == nil && r.Change.OldImage != nil
}

// keep drops the records no redrive may apply: those of a user erased
// after they were written, and those of a user being erased, except
// (applying, when applying) the user's deletions.
func (a *Archive) keep(ctx context.Context, records []events.DynamoDBEventRecord, applying bool) ([]events.DynamoDBEventRecord, error) {
	if a.Erasures == nil || len(records) == 0 {
		return records, nil
	}
	states, err := a.Erasures.States(ctx, UsersOf(records))
	if err != nil {
		return nil, fmt.Errorf("deadletters: read erasures: %w", err)
	}
	if len(states) == 0 {
		return records, nil
	}
	kept := records[:0:0]
	for _, r := range records {
		ok := true
		for _, u := range recordUsers(r) {
			st, erased := states[u]
			switch {
			case !erased:
			case st.Pending:
				ok = ok && (isDeletion(r) || !applying)
			default:
				ok = ok && r.Change.ApproximateCreationDateTime.After(st.CompletedAt)
			}
		}
		if ok {
			kept = append(kept, r)
		}
	}
	return kept, nil
}

// lease takes b for one redrive or erasure, until leaseFor from now; it
// returns the owner token to release it with, ErrLeased when someone else
// holds it, ErrNotFound when it is gone.
func (a *Archive) lease(ctx context.Context, b Batch) (string, error) {
	now := clock.Now(a.Clock)
	owner := rand.Text()
	until, expires := expression.Name(schema.AttrLeaseUntil), expression.Value(ddb.FormatTime(now))
	cond := expression.Name(schema.AttrPK).AttributeExists().And(until.AttributeNotExists().Or(until.LessThan(expires)))
	update := expression.Set(until, expression.Value(ddb.FormatTime(now.Add(leaseFor)))).
		Set(expression.Name(attrLeaseOwner), expression.Value(owner))
	_, err := a.DB.UpdateItem(ctx, ddb.UpdateInput(a.Table, summaryKey(b.Function, b.ArchivedAt, b.ID),
		ddb.MustBuild(expression.NewBuilder().WithCondition(cond).WithUpdate(update))))
	if ddb.IsConditionFailed(err) {
		if _, gone := a.summary(ctx, b); errors.Is(gone, ErrNotFound) {
			return "", ErrNotFound
		}
		return "", ErrLeased
	}
	if err != nil {
		return "", fmt.Errorf("deadletters: lease %s: %w", b.ID, err)
	}
	return owner, nil
}

// release gives b back, if owner still holds it.
func (a *Archive) release(ctx context.Context, b Batch, owner string) error {
	cond := expression.Name(attrLeaseOwner).Equal(expression.Value(owner))
	update := expression.Remove(expression.Name(schema.AttrLeaseUntil)).Remove(expression.Name(attrLeaseOwner))
	_, err := a.DB.UpdateItem(ctx, ddb.UpdateInput(a.Table, summaryKey(b.Function, b.ArchivedAt, b.ID),
		ddb.MustBuild(expression.NewBuilder().WithCondition(cond).WithUpdate(update))))
	if err != nil && !ddb.IsConditionFailed(err) {
		return fmt.Errorf("deadletters: release %s: %w", b.ID, err)
	}
	return nil
}

const attrLeaseOwner = "lease_owner"

// Eraser is the erasure's part of the archive (shared/privacy's Part):
// it scrubs a user from every parked batch, having the user's parked
// deletions applied first.
type Eraser struct {
	Archive *Archive
	Invoker Invoker
	// Compensates tells whether a processor's derived state waits for its
	// stream's deletions (routes.Processor.Compensates).
	Compensates func(function string) bool
}

// Name implements privacy.Part.
func (e *Eraser) Name() string { return "deadletters" }

// Gates implements privacy.Gate: the other parts wait for the archive.
func (e *Eraser) Gates() bool { return true }

// Erase implements privacy.Part: done once no parked batch names the user.
// A batch a redrive holds, or one still being archived, is waited for.
func (e *Eraser) Erase(ctx context.Context, user string) (bool, error) {
	a := e.Archive
	if a.UserKeys == nil {
		return true, nil
	}
	done := true
	for _, key := range a.UserKeys(ctx, user) {
		scrubbed, err := e.scrubAll(ctx, user, key)
		if err != nil {
			return false, err
		}
		done = done && scrubbed
	}
	return done, nil
}

// scrubAll scrubs user from every batch indexed under key.
func (e *Eraser) scrubAll(ctx context.Context, user, key string) (bool, error) {
	a := e.Archive
	in := ddb.QueryInput(a.Table, ddb.MustBuild(expression.NewBuilder().WithKeyCondition(
		expression.Key(schema.AttrPK).Equal(expression.Value(userPrefix+key)))))
	in.ConsistentRead = aws.Bool(true)
	done := true
	for pages := dynamodb.NewQueryPaginator(a.DB, in); pages.HasMorePages(); {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return false, fmt.Errorf("deadletters: list a user's batches: %w", err)
		}
		for _, it := range page.Items {
			sk, _ := it[schema.AttrSK].(*types.AttributeValueMemberS)
			if sk == nil {
				continue
			}
			function, id, _ := strings.Cut(sk.Value, "#")
			scrubbed, err := e.scrub(ctx, user, key, function, id)
			if err != nil {
				return false, err
			}
			done = done && scrubbed
		}
	}
	return done, nil
}

// scrub removes user from one batch; false when it must wait (a lease, a
// batch still being archived, a deletion its processor did not take).
func (e *Eraser) scrub(ctx context.Context, user, key, function, id string) (bool, error) {
	a := e.Archive
	b, err := a.Get(ctx, function, id)
	if errors.Is(err, ErrNotFound) {
		return e.forgetIndex(ctx, key, function, id)
	}
	if err != nil {
		return false, err
	}
	owner, err := a.lease(ctx, b)
	switch {
	case errors.Is(err, ErrLeased):
		return false, nil
	case errors.Is(err, ErrNotFound):
		return e.forgetIndex(ctx, key, function, id)
	case err != nil:
		return false, err
	}
	records, err := a.Records(ctx, b)
	if err != nil {
		return false, errors.Join(err, a.release(ctx, b, owner))
	}
	var mine, deletions, rest []events.DynamoDBEventRecord
	for _, r := range records {
		if !slices.Contains(recordUsers(r), user) {
			rest = append(rest, r)
			continue
		}
		mine = append(mine, r)
		if isDeletion(r) {
			deletions = append(deletions, r)
		}
	}
	if len(deletions) > 0 && e.Compensates != nil && e.Compensates(function) {
		resp, err := e.Invoker.Invoke(ctx, function, events.DynamoDBEvent{Records: deletions})
		if err != nil || len(resp.BatchItemFailures) > 0 {
			// The processor fails on them still: the erasure waits, and
			// the batch stays for a redrive to apply them.
			return false, a.release(ctx, b, owner)
		}
	}
	if len(mine) == 0 {
		// An index item left by a batch the user's records were taken
		// out of by a redrive: the batch no longer names them.
		if err := a.release(ctx, b, owner); err != nil {
			return false, err
		}
		return e.forgetIndex(ctx, key, function, id)
	}
	next := b
	next.Size = len(rest)
	if _, err := a.replace(ctx, b, next, rest); err != nil {
		return false, err
	}
	return true, nil
}

// forgetIndex deletes an index item whose batch is gone, unless the batch
// is being archived (its records are written, its summary not yet).
func (e *Eraser) forgetIndex(ctx context.Context, key, function, id string) (bool, error) {
	a := e.Archive
	out, err := a.DB.Query(ctx, &dynamodb.QueryInput{
		TableName: aws.String(a.Table), KeyConditionExpression: aws.String("#pk = :pk"), Limit: aws.Int32(1),
		ExpressionAttributeNames:  map[string]string{"#pk": schema.AttrPK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": ddb.S(chunkPrefix + id)},
		ConsistentRead:            aws.Bool(true),
	})
	if err != nil {
		return false, fmt.Errorf("deadletters: look for a batch's records: %w", err)
	}
	if len(out.Items) > 0 {
		return false, nil
	}
	if _, err := a.DB.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(a.Table), Key: map[string]types.AttributeValue{
		schema.AttrPK: ddb.S(userPrefix + key), schema.AttrSK: ddb.S(indexSK(function, id)),
	}}); err != nil {
		return false, fmt.Errorf("deadletters: forget an index item: %w", err)
	}
	return true, nil
}
