package dynamo

import (
	"context"
	"fmt"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"golang.org/x/sync/errgroup"

	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/schema"
)

// friendsScanSegments is how many segments scan the Players table in
// parallel for friend lists naming an erased player.
const friendsScanSegments = 4

// friendEditAttempts bounds the rewrites of one friend list that keeps
// changing under the erasure.
const friendEditAttempts = 16

// ErasePlayer deletes the player's item (profile, friend list and every
// other attribute stored there, such as the analytics secret) and takes the
// player out of every other player's friend list.
//
// Friend lists are not indexed by member, so finding the lists that name
// the player scans the whole table: O(players) reads per erasure. That is
// acceptable because erasure is rare and runs asynchronously, off every
// request path; the scan is spread over parallel segments, filtered and
// projected to the key and the list so little is returned, and a re-run
// simply finds nothing left to change.
func (s *Players) ErasePlayer(ctx context.Context, player string) error {
	del := []types.WriteRequest{{DeleteRequest: &types.DeleteRequest{Key: s.key(player)}}}
	if err := ddb.BatchWrite(ctx, s.DB, s.Table, del); err != nil {
		return unavailable(err, "erase a player's profile")
	}
	g, ctx := errgroup.WithContext(ctx)
	for seg := range friendsScanSegments {
		g.Go(func() error { return s.unfriendSegment(ctx, player, seg) })
	}
	return g.Wait()
}

// unfriendSegment takes the player out of every friend list in one scan
// segment.
func (s *Players) unfriendSegment(ctx context.Context, player string, seg int) error {
	lists := ddb.MustBuild(expression.NewBuilder().
		WithFilter(expression.Name(schema.AttrFriendIDs).Contains(player)).
		WithProjection(expression.NamesList(expression.Name(schema.AttrPlayerID), expression.Name(schema.AttrFriendIDs))))
	in := &dynamodb.ScanInput{
		TableName:                 aws.String(s.Table),
		Segment:                   aws.Int32(int32(seg)),
		TotalSegments:             aws.Int32(friendsScanSegments),
		FilterExpression:          lists.Filter(),
		ProjectionExpression:      lists.Projection(),
		ExpressionAttributeNames:  lists.Names(),
		ExpressionAttributeValues: lists.Values(),
		ConsistentRead:            aws.Bool(true),
	}
	for {
		out, err := s.DB.Scan(ctx, in)
		if err != nil {
			return unavailable(err, fmt.Sprintf("erase a player from friend lists: scan segment %d", seg))
		}
		for _, raw := range out.Items {
			var it playerItem
			if err := attributevalue.UnmarshalMap(raw, &it); err != nil {
				return fmt.Errorf("erase a player from friend lists: decode a friend list: %w", err)
			}
			if err := s.unfriend(ctx, it.PlayerID, it.FriendIDs, player); err != nil {
				return err
			}
		}
		if len(out.LastEvaluatedKey) == 0 {
			return nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// unfriend rewrites owner's friend list without player, on the condition
// that the list is still the one read; when it changed meanwhile, it reads
// the list again and retries.
func (s *Players) unfriend(ctx context.Context, owner string, friends []string, player string) error {
	what := "erase a player from the friend list of " + owner
	for attempt := 0; attempt < friendEditAttempts; attempt++ {
		if err := ddb.Pause(ctx, attempt); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if !slices.Contains(friends, player) {
			return nil
		}
		kept := slices.DeleteFunc(slices.Clone(friends), func(f string) bool { return f == player })
		unchanged := expression.Name(schema.AttrFriendIDs).Equal(expression.Value(friends))
		edit := ddb.MustBuild(expression.NewBuilder().WithUpdate(friendsUpdate(kept, clock.Now(s.Clock))).WithCondition(unchanged))
		_, err := s.DB.UpdateItem(ctx, ddb.UpdateInput(s.Table, s.key(owner), edit))
		if err == nil {
			return nil
		}
		if !ddb.IsConditionFailed(err) {
			return unavailable(err, what)
		}
		if friends, err = s.Friends(ctx, owner); err != nil {
			return err
		}
	}
	return unavailable(fmt.Errorf("the list kept changing for %d attempts", friendEditAttempts), what)
}
