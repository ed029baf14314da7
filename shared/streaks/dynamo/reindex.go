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

var _ streaks.JobStore = (*Store)(nil)

// Reindex reads a page of Streaks after the user after ("" from the
// start) and rewrites the board index entries (breaks_at, live_pk,
// region_live_pk, live_sk) of every streak whose entries are not what its
// state gives, on condition that the state is unchanged. It returns how
// many it read and rewrote and the user to continue after ("" at the end).
func (s *Store) Reindex(ctx context.Context, after string) (read, rewritten int, next string, err error) {
	in := &dynamodb.ScanInput{TableName: aws.String(s.Streaks), Limit: aws.Int32(500), ConsistentRead: aws.Bool(true)}
	if after != "" {
		in.ExclusiveStartKey = userKey(after)
	}
	out, err := s.DB.Scan(ctx, in)
	if err != nil {
		return 0, 0, "", unavailable(err, "scan streaks")
	}
	for _, raw := range out.Items {
		var stored streakItem
		if err := attributevalue.UnmarshalMap(raw, &stored); err != nil {
			return 0, 0, "", fmt.Errorf("decode streak: %w", err)
		}
		read++
		want := streakItemOf(stored.state())
		if sameIndex(stored, want) {
			continue
		}
		if err := s.rewriteIndex(ctx, want); err != nil {
			return 0, 0, "", err
		}
		rewritten++
	}
	if last, ok := out.LastEvaluatedKey[schema.AttrUserID].(*types.AttributeValueMemberS); ok {
		next = last.Value
	}
	return read, rewritten, next, nil
}

func sameIndex(a, b streakItem) bool {
	same := func(x, y *int64) bool { return (x == nil) == (y == nil) && (x == nil || *x == *y) }
	return same(a.BreaksAt, b.BreaksAt) && a.LivePK == b.LivePK && a.RegionPK == b.RegionPK && a.LiveSK == b.LiveSK
}

// rewriteIndex sets (or removes) want's index attributes, if the streak
// still has want's version.
func (s *Store) rewriteIndex(ctx context.Context, want streakItem) error {
	var upd expression.UpdateBuilder
	set := func(name, v string) {
		if v == "" {
			upd = upd.Remove(expression.Name(name))
		} else {
			upd = upd.Set(expression.Name(name), expression.Value(v))
		}
	}
	if want.BreaksAt != nil {
		upd = upd.Set(expression.Name(schema.AttrBreaksAt), expression.Value(*want.BreaksAt))
	} else {
		upd = upd.Remove(expression.Name(schema.AttrBreaksAt))
	}
	set(schema.AttrLivePK, want.LivePK)
	set(schema.AttrRegionPK, want.RegionPK)
	set(schema.AttrLiveSK, want.LiveSK)
	cond := expression.Name(schema.AttrStreakVersion).Equal(expression.Value(want.Version))
	_, err := s.DB.UpdateItem(ctx, ddb.UpdateInput(s.Streaks, userKey(want.UserID), ddb.MustBuild(expression.NewBuilder().WithCondition(cond).WithUpdate(upd))))
	if ddb.IsConditionFailed(err) {
		return nil // changed meanwhile: its own commit wrote the entries
	}
	if err != nil {
		return unavailable(err, "reindex streak")
	}
	return nil
}
