package dynamo

import (
	"context"
	"fmt"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/schema"
)

// listedPage is how many reverse entries one Query of an erasure reads.
const listedPage = 100

// ErasePlayer deletes the player's item (profile, friend list and every
// other attribute stored there, such as the analytics secret) with the
// reverse entries of their list, and takes the player out of every other
// player's friend list.
//
// The lists that name the player are found through the by_listed index,
// one Query per page of them: the work is O(lists naming the player),
// whatever the table's size. Each list loses the player in one
// transaction with its reverse entry, so the index itself is the
// checkpoint: a run cut short leaves exactly the entries still to do.
// done is false when ctx ended first, or when the index, read again at the
// end, still shows entries (it is eventually consistent): the next run
// continues.
func (s *Players) ErasePlayer(ctx context.Context, player string) (done bool, err error) {
	if err := s.editFriends(ctx, player, func([]string) []string { return nil }, nil, false); err != nil {
		return false, fmt.Errorf("erase a player's friend list: %w", err)
	}
	del := []types.WriteRequest{{DeleteRequest: &types.DeleteRequest{Key: s.key(player)}}}
	if err := ddb.BatchWrite(ctx, s.DB, s.Table, del); err != nil {
		return false, unavailable(err, "erase a player's profile")
	}
	var from map[string]types.AttributeValue
	again := false
	for {
		if ctx.Err() != nil {
			return false, nil
		}
		listers, next, err := s.listedBy(ctx, player, from)
		if err != nil {
			return false, err
		}
		for _, by := range listers {
			if ctx.Err() != nil {
				return false, nil
			}
			if err := s.unfriend(ctx, by, player); err != nil {
				return false, err
			}
		}
		switch {
		case next != nil:
			from = next
		case from == nil && len(listers) == 0:
			return true, nil
		case again:
			return false, nil
		default:
			// Once more from the start, for entries the index showed late.
			from, again = nil, true
		}
	}
}

// listedBy reads a page of the players whose lists name player, from the
// index position from (nil: the start).
func (s *Players) listedBy(ctx context.Context, player string, from map[string]types.AttributeValue) ([]string, map[string]types.AttributeValue, error) {
	out, err := s.DB.Query(ctx, &dynamodb.QueryInput{
		TableName: aws.String(s.Table), IndexName: aws.String(schema.IndexPlayersByListed),
		KeyConditionExpression:    aws.String("#listed = :player"),
		ExpressionAttributeNames:  map[string]string{"#listed": schema.AttrListedID},
		ExpressionAttributeValues: map[string]types.AttributeValue{":player": ddb.S(player)},
		ExclusiveStartKey:         from,
		Limit:                     aws.Int32(listedPage),
	})
	if err != nil {
		return nil, nil, unavailable(err, "erase a player from friend lists: read whose lists name them")
	}
	listers := make([]string, 0, len(out.Items))
	for _, it := range out.Items {
		if by, ok := it[schema.AttrListedBy].(*types.AttributeValueMemberS); ok {
			listers = append(listers, by.Value)
		}
	}
	return listers, out.LastEvaluatedKey, nil
}

// unfriend takes player out of by's list and deletes the reverse entry,
// in one write conditioned on the list read.
func (s *Players) unfriend(ctx context.Context, by, player string) error {
	without := func(list []string) []string {
		return slices.DeleteFunc(list, func(f string) bool { return f == player })
	}
	if err := s.editFriends(ctx, by, without, []string{player}, false); err != nil {
		return fmt.Errorf("erase a player from the friend list of %s: %w", by, err)
	}
	return nil
}
