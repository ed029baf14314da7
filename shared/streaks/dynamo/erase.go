package dynamo

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/schema"
)

// ErasePlayer deletes the user's streak item and every Activity item of
// theirs (points events, daily totals, idempotency records). The streak
// goes first: an activity racing the erasure then fails its version guard
// instead of landing after the Activity items are gone. Safe to run again
// after a crash; errors never name the user, since they reach the logs.
func (s *Store) ErasePlayer(ctx context.Context, user string) error {
	streak := []types.WriteRequest{{DeleteRequest: &types.DeleteRequest{
		Key: map[string]types.AttributeValue{schema.AttrUserID: ddb.S(user)},
	}}}
	if err := ddb.BatchWrite(ctx, s.DB, s.Streaks, streak); err != nil {
		return unavailable(err, "erase a player's streak")
	}
	in := ddb.QueryInput(s.Activity, ddb.MustBuild(expression.NewBuilder().
		WithKeyCondition(expression.Key(schema.AttrUserID).Equal(expression.Value(user))).
		WithProjection(expression.NamesList(expression.Name(schema.AttrUserID), expression.Name(schema.AttrSK)))))
	in.ConsistentRead = aws.Bool(true)
	for {
		out, err := s.DB.Query(ctx, in)
		if err != nil {
			return unavailable(err, "erase a player's activity: list it")
		}
		reqs := make([]types.WriteRequest, 0, len(out.Items))
		for _, key := range out.Items {
			reqs = append(reqs, types.WriteRequest{DeleteRequest: &types.DeleteRequest{Key: key}})
		}
		if err := ddb.BatchWrite(ctx, s.DB, s.Activity, reqs); err != nil {
			return unavailable(err, "erase a player's activity")
		}
		if len(out.LastEvaluatedKey) == 0 {
			return nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}
