package dynamo

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/errs"
	"github.com/rallyhq/rally/shared/schema"
	"github.com/rallyhq/rally/shared/streaks"
)

// maxItemSize is DynamoDB's item size limit.
const maxItemSize = 400 * 1024

// The items of a commit's transaction, in order; cancellation reasons come
// back in the same order.
const (
	keyItemAt = iota
	eventItemAt
	dayItemAt
	streakItemAt
)

// Commit writes the activity c in one transaction: the idempotency record
// and the event (both new only), the day's totals, and the streak guarded
// by the version c.Prev was read at. The guard serializes a player's
// activities, so the day needs no condition of its own.
func (s *Store) Commit(ctx context.Context, c streaks.Commit) error {
	user := c.Next.UserID
	what := fmt.Sprintf("commit activity %s/%s", user, c.Key)
	items, err := s.transaction(c)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	m := &meter{}
	defer s.report("commit", m)
	out, err := s.DB.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{
		TransactItems: items, ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal,
	})
	if err == nil {
		m.addAll(out.ConsumedCapacity)
		return nil
	}
	switch keyUsed, conflict := cancelled(err); {
	case keyUsed:
		return fmt.Errorf("%s: %w", what, streaks.ErrKeyUsed)
	case conflict:
		return fmt.Errorf("%s: %w", what, streaks.ErrConflict)
	}
	return unavailable(err, what)
}

// transaction checks c against DynamoDB's limits and builds its items.
func (s *Store) transaction(c streaks.Commit) ([]types.TransactWriteItem, error) {
	user := c.Next.UserID
	if err := checkCommit(c); err != nil {
		return nil, err
	}
	keyAV, err := keyRecord(user, c, s.now())
	if err != nil {
		return nil, fmt.Errorf("encode idempotency record: %w", err)
	}
	eventAV, err := attributevalue.MarshalMap(eventItemOf(user, c.Event))
	if err != nil {
		return nil, fmt.Errorf("encode event: %w", err)
	}
	day, err := dayItemOf(user, c.Day)
	if err != nil {
		return nil, err
	}
	dayAV, err := attributevalue.MarshalMap(day)
	if err != nil {
		return nil, fmt.Errorf("encode day: %w", err)
	}
	streakAV, err := attributevalue.MarshalMap(streakItemOf(c.Next))
	if err != nil {
		return nil, fmt.Errorf("encode streak: %w", err)
	}
	for name, item := range map[string]map[string]types.AttributeValue{
		"idempotency record": keyAV, "event": eventAV, "day": dayAV, "streak": streakAV,
	} {
		if size := ddb.ItemSize(item); size > maxItemSize {
			return nil, fmt.Errorf("the %s item is %d bytes, over DynamoDB's %d", name, size, maxItemSize)
		}
	}
	guard := expression.Name(schema.AttrUserID).AttributeNotExists()
	if c.Prev.Version != 0 {
		guard = expression.Name(schema.AttrStreakVersion).Equal(expression.Value(c.Prev.Version))
	}
	newKey := ddb.MustBuild(expression.NewBuilder().WithCondition(expression.Name(schema.AttrSK).AttributeNotExists()))
	items := make([]types.TransactWriteItem, streakItemAt+1)
	items[keyItemAt] = types.TransactWriteItem{Put: ddb.TransactPut(s.Activity, keyAV, newKey)}
	items[eventItemAt] = types.TransactWriteItem{Put: ddb.TransactPut(s.Activity, eventAV, newKey)}
	items[dayItemAt] = types.TransactWriteItem{Put: &types.Put{TableName: aws.String(s.Activity), Item: dayAV}}
	items[streakItemAt] = types.TransactWriteItem{Update: streakUpdate(s.Streaks, streakAV, c.Next.Region, guard)}
	return items, nil
}

// streakAttrs are the attribute names of a streak item but its key and
// its regions, read from streakItem's tags.
var streakAttrs = func() []string {
	var names []string
	t := reflect.TypeFor[streakItem]()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("dynamodbav"), ",")
		if name != schema.AttrUserID && name != schema.AttrRegions {
			names = append(names, name)
		}
	}
	return names
}()

// streakUpdate writes the streak item as a Put of item would (attributes
// item lacks are removed, which keeps the indexes sparse), except that the
// region is added to the item's regions set rather than written: the set
// only grows, so it holds every region the streak was ever in, whatever
// the state the commit was computed from carried.
func streakUpdate(table string, item map[string]types.AttributeValue, region string, guard expression.ConditionBuilder) *types.Update {
	var update expression.UpdateBuilder
	for _, attr := range streakAttrs {
		if v, ok := item[attr]; ok {
			update = update.Set(expression.Name(attr), expression.Value(v))
		} else {
			update = update.Remove(expression.Name(attr))
		}
	}
	if region != "" {
		update = update.Add(expression.Name(schema.AttrRegions), expression.Value(&types.AttributeValueMemberSS{Value: []string{region}}))
	}
	key := map[string]types.AttributeValue{schema.AttrUserID: item[schema.AttrUserID]}
	return ddb.TransactUpdate(table, key, ddb.MustBuild(expression.NewBuilder().WithUpdate(update).WithCondition(guard)))
}

// checkCommit refuses what DynamoDB would refuse, or what the keys could
// not represent, before anything is sent.
func checkCommit(c streaks.Commit) error {
	user := c.Next.UserID
	switch {
	case user == "":
		return errs.Field("user_id", "is required")
	case len(user) > maxUserID:
		return errs.Field("user_id", fmt.Sprintf("must be at most %d bytes", maxUserID))
	case c.Key == "":
		return errs.Field("Idempotency-Key", "is required")
	case len(KeySK(c.Key)) > maxSortKey:
		return errs.Field("Idempotency-Key", fmt.Sprintf("must be at most %d bytes", maxSortKey-len(keyPrefix)))
	}
	if (c.Prev.UserID != "" && c.Prev.UserID != user) || (c.Event.UserID != "" && c.Event.UserID != user) {
		return fmt.Errorf("the commit mixes players %q, %q and %q", c.Prev.UserID, user, c.Event.UserID)
	}
	if c.Next.Version <= c.Prev.Version {
		return fmt.Errorf("version %d does not follow %d", c.Next.Version, c.Prev.Version)
	}
	if err := checkRankable(c.Next); err != nil {
		return err
	}
	if c.Event.ID == "" {
		return errors.New("the event has no id")
	}
	if ms := c.Event.OccurredAt.UnixMilli(); ms < 0 || ms > 9_999_999_999_999 {
		return fmt.Errorf("event time %s is outside 1970..2286", ddb.FormatTime(c.Event.OccurredAt))
	}
	if len(EventSK(c.Event)) > maxSortKey {
		return fmt.Errorf("event id is longer than %d bytes", maxSortKey)
	}
	if _, err := time.Parse(streaks.DateLayout, c.Day.Date); err != nil {
		return fmt.Errorf("day %q: %w", c.Day.Date, err)
	}
	return nil
}

// cancelled reads why a commit's transaction did not apply: keyUsed when
// the idempotency record exists (whatever else failed), conflict when the
// streak moved past c.Prev or a concurrent transaction touched an item.
func cancelled(err error) (keyUsed, conflict bool) {
	var tc *types.TransactionConflictException
	if errors.As(err, &tc) {
		return false, true
	}
	var tce *types.TransactionCanceledException
	if !errors.As(err, &tce) {
		return false, false
	}
	reasons := tce.CancellationReasons
	if len(reasons) > keyItemAt && aws.ToString(reasons[keyItemAt].Code) == "ConditionalCheckFailed" {
		return true, false
	}
	if len(reasons) > streakItemAt && aws.ToString(reasons[streakItemAt].Code) == "ConditionalCheckFailed" {
		return false, true
	}
	for _, r := range reasons {
		if aws.ToString(r.Code) == "TransactionConflict" {
			return false, true
		}
	}
	return false, false
}
