package dynamo

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/shared/players"
	"github.com/rallyhq/rally/shared/schema"
)

var _ players.JobStore = (*Players)(nil)

// IndexFriends reads a page of Players after the item after ("" from the
// start) and writes the reverse entries of every friend list written
// before the by_listed index existed (no friends_indexed mark), on
// condition that the list is unchanged. It returns how many lists it read
// and indexed, and the item to continue after ("" at the end).
func (s *Players) IndexFriends(ctx context.Context, after string) (read, indexed int, next string, err error) {
	in := &dynamodb.ScanInput{TableName: aws.String(s.Table), Limit: aws.Int32(500), ConsistentRead: aws.Bool(true)}
	if after != "" {
		in.ExclusiveStartKey = s.key(after)
	}
	out, err := s.DB.Scan(ctx, in)
	if err != nil {
		return 0, 0, "", unavailable(err, "scan players")
	}
	for _, raw := range out.Items {
		var it struct {
			PlayerID  string   `dynamodbav:"player_id"`
			FriendIDs []string `dynamodbav:"friend_ids"`
			Indexed   bool     `dynamodbav:"friends_indexed"`
		}
		if err := attributevalue.UnmarshalMap(raw, &it); err != nil {
			return 0, 0, "", fmt.Errorf("decode a player: %w", err)
		}
		if isListedEntry(it.PlayerID) || len(it.FriendIDs) == 0 {
			continue
		}
		read++
		if it.Indexed {
			continue
		}
		ok, err := s.indexFriends(ctx, it.PlayerID, it.FriendIDs)
		if err != nil {
			return 0, 0, "", fmt.Errorf("index the friend list of %s: %w", it.PlayerID, err)
		}
		if ok {
			indexed++
		}
	}
	if last, ok := out.LastEvaluatedKey[schema.AttrPlayerID].(*types.AttributeValueMemberS); ok {
		next = last.Value
	}
	return read, indexed, next, nil
}
