package dynamo

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/schema"
	"github.com/rallyhq/rally/shared/streaks"
)

// getItem reads one item strongly consistently; nil when absent.
func (s *Store) getItem(ctx context.Context, op, table string, key map[string]types.AttributeValue) (map[string]types.AttributeValue, error) {
	m := &meter{}
	defer s.report(op, m)
	out, err := s.DB.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(table), Key: key, ConsistentRead: aws.Bool(true),
		ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal,
	})
	if err != nil {
		return nil, err
	}
	m.add(out.ConsumedCapacity)
	if len(out.Item) == 0 {
		return nil, nil
	}
	return out.Item, nil
}

// Get returns the player's streak record; ok is false when they have none.
func (s *Store) Get(ctx context.Context, user string) (streaks.State, bool, error) {
	item, err := s.getItem(ctx, "get", s.Streaks, userKey(user))
	if err != nil {
		return streaks.State{}, false, unavailable(err, "read streak of "+user)
	}
	if item == nil {
		return streaks.State{}, false, nil
	}
	st, err := decodeState(item)
	if err != nil {
		return streaks.State{}, false, fmt.Errorf("decode streak of %s: %w", user, err)
	}
	return st, true, nil
}

// Day returns the player's totals on date; zero totals when they have none.
func (s *Store) Day(ctx context.Context, user, date string) (streaks.Day, error) {
	item, err := s.getItem(ctx, "day", s.Activity, activityKey(user, DaySK(date)))
	if err != nil {
		return streaks.Day{}, unavailable(err, fmt.Sprintf("read day %s of %s", date, user))
	}
	if item == nil {
		return streaks.Day{Date: date, ByType: map[streaks.EventType]int64{}}, nil
	}
	var it dayItem
	if err := attributevalue.UnmarshalMap(item, &it); err != nil {
		return streaks.Day{}, fmt.Errorf("decode day %s of %s: %w", date, user, err)
	}
	return it.day(), nil
}

// Replay returns the stored record of the player's idempotency key.
func (s *Store) Replay(ctx context.Context, user, key string) (streaks.Replay, bool, error) {
	item, err := s.getItem(ctx, "replay", s.Activity, activityKey(user, KeySK(key)))
	if err != nil {
		return streaks.Replay{}, false, unavailable(err, fmt.Sprintf("read idempotency key %s/%s", user, key))
	}
	if item == nil {
		return streaks.Replay{}, false, nil
	}
	r, err := decodeReplay(item)
	if err != nil {
		return streaks.Replay{}, false, fmt.Errorf("decode idempotency key %s/%s: %w", user, key, err)
	}
	return r, true, nil
}

// History returns the player's days with activity from..to (inclusive),
// oldest first.
func (s *Store) History(ctx context.Context, user, from, to string) ([]streaks.Day, error) {
	what := fmt.Sprintf("read days %s..%s of %s", from, to, user)
	m := &meter{}
	defer s.report("history", m)
	in := ddb.QueryInput(s.Activity, ddb.MustBuild(expression.NewBuilder().WithKeyCondition(
		expression.Key(schema.AttrUserID).Equal(expression.Value(user)).
			And(expression.Key(schema.AttrSK).Between(expression.Value(DaySK(from)), expression.Value(DaySK(to)))))))
	in.ConsistentRead = aws.Bool(true)
	in.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
	days := []streaks.Day{}
	for {
		out, err := s.DB.Query(ctx, in)
		if err != nil {
			return nil, unavailable(err, what)
		}
		m.add(out.ConsumedCapacity)
		for _, item := range out.Items {
			var it dayItem
			if err := attributevalue.UnmarshalMap(item, &it); err != nil {
				return nil, fmt.Errorf("decode %s: %w", what, err)
			}
			days = append(days, it.day())
		}
		if len(out.LastEvaluatedKey) == 0 {
			return days, nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}
