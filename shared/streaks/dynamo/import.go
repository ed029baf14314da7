package dynamo

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/schema"
	"github.com/rallyhq/rally/shared/streaks"
)

var _ streaks.StreakImports = (*Store)(nil)

// Held implements streaks.StreakImports: the players' streaks, read in
// parallel batches, with every region each was ever in.
func (s *Store) Held(ctx context.Context, users []string) (map[string]streaks.State, error) {
	keys := make([]map[string]types.AttributeValue, len(users))
	for i, u := range users {
		keys[i] = map[string]types.AttributeValue{schema.AttrUserID: ddb.S(u)}
	}
	items, err := ddb.BatchGetAll(ctx, s.DB, s.Streaks, keys, true)
	if err != nil {
		return nil, unavailable(err, "read the streaks an import sets")
	}
	held := make(map[string]streaks.State, len(items))
	for _, raw := range items {
		var it streakItem
		if err := attributevalue.UnmarshalMap(raw, &it); err != nil {
			return nil, fmt.Errorf("decode streak: %w", err)
		}
		st := it.state()
		st.Regions = it.Regions
		held[it.UserID] = st
	}
	return held, nil
}

// Import implements streaks.StreakImports: each streak item written as a
// commit leaves it (the live index keys included), its regions kept, in
// parallel batches.
func (s *Store) Import(ctx context.Context, states []streaks.State) error {
	reqs := make([]types.WriteRequest, len(states))
	for i, st := range states {
		it := streakItemOf(st)
		it.Regions = st.Regions
		av, err := attributevalue.MarshalMap(it)
		if err != nil {
			return fmt.Errorf("encode streak %s: %w", st.UserID, err)
		}
		reqs[i] = types.WriteRequest{PutRequest: &types.PutRequest{Item: av}}
	}
	if err := ddb.BatchWriteAll(ctx, s.DB, s.Streaks, reqs); err != nil {
		return unavailable(err, "write the streaks of an import")
	}
	return nil
}
