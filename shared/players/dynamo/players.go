// Package dynamo stores players in the Players table: profiles and friend
// lists, each written by its own update so neither undoes the other, and
// the reverse entries that say whose lists name a player.
package dynamo

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/errs"
	"github.com/rallyhq/rally/shared/players"
	"github.com/rallyhq/rally/shared/schema"
)

// Players stores profiles and friend lists in the Players table. Each write
// updates only its own attributes, so a profile sync and a friends sync of
// the same player never undo each other.
type Players struct {
	DB    ddb.DB
	Table string
	// Clock stamps updated_at when the write carries no time; nil means the
	// wall clock.
	Clock clock.Clock
}

var _ players.Store = (*Players)(nil)

type playerItem struct {
	PlayerID    string   `dynamodbav:"player_id"`
	DisplayName *string  `dynamodbav:"display_name"`
	AvatarURL   string   `dynamodbav:"avatar_url"`
	Region      string   `dynamodbav:"region"`
	FriendIDs   []string `dynamodbav:"friend_ids"`
	UpdatedAt   string   `dynamodbav:"updated_at"`
}

func (s *Players) key(player string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{schema.AttrPlayerID: ddb.S(player)}
}

// PutProfile sets the player's display name, avatar and region.
func (s *Players) PutProfile(ctx context.Context, p players.Profile) error {
	at := p.UpdatedAt
	if at.IsZero() {
		at = clock.Now(s.Clock)
	}
	profile := expression.Set(expression.Name(schema.AttrDisplayName), expression.Value(p.DisplayName)).
		Set(expression.Name(schema.AttrAvatarURL), expression.Value(p.AvatarURL)).
		Set(expression.Name(schema.AttrRegion), expression.Value(p.Region)).
		Set(expression.Name(schema.AttrUpdatedAt), expression.Value(ddb.FormatTime(at)))
	_, err := s.DB.UpdateItem(ctx, ddb.UpdateInput(s.Table, s.key(p.PlayerID),
		ddb.MustBuild(expression.NewBuilder().WithUpdate(profile))))
	if err != nil {
		return unavailable(err, "put profile of "+p.PlayerID)
	}
	return nil
}

// Profiles returns the profiles of the given players; players without one
// are absent.
func (s *Players) Profiles(ctx context.Context, ids []string) (map[string]players.Profile, error) {
	var keys []map[string]types.AttributeValue
	seen := map[string]bool{}
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			keys = append(keys, s.key(id))
		}
	}
	raw, err := ddb.BatchGet(ctx, s.DB, s.Table, keys, false,
		schema.AttrPlayerID, schema.AttrDisplayName, schema.AttrAvatarURL, schema.AttrRegion, schema.AttrUpdatedAt)
	if err != nil {
		return nil, unavailable(err, "read profiles")
	}
	out := make(map[string]players.Profile, len(raw))
	for _, r := range raw {
		var it playerItem
		if err := attributevalue.UnmarshalMap(r, &it); err != nil {
			return nil, fmt.Errorf("decode profile: %w", err)
		}
		if it.DisplayName == nil {
			continue // only friends were synced for this player
		}
		out[it.PlayerID] = players.Profile{
			PlayerID: it.PlayerID, DisplayName: *it.DisplayName, AvatarURL: it.AvatarURL,
			Region: it.Region, UpdatedAt: ddb.ParseTime(it.UpdatedAt),
		}
	}
	return out, nil
}

// PutFriends replaces the player's friend list, and its reverse entries
// with it (see listedKey).
func (s *Players) PutFriends(ctx context.Context, player string, friends []string) error {
	err := s.editFriends(ctx, player, func([]string) []string { return friends }, nil, true)
	if err != nil {
		return fmt.Errorf("put friends of %s: %w", player, err)
	}
	return nil
}

// friendsUpdate writes the friend list, removing the attribute when the
// list is empty.
func friendsUpdate(friends []string, at time.Time) expression.UpdateBuilder {
	update := expression.Set(expression.Name(schema.AttrUpdatedAt), expression.Value(ddb.FormatTime(at)))
	if len(friends) == 0 {
		return update.Remove(expression.Name(schema.AttrFriendIDs))
	}
	return update.Set(expression.Name(schema.AttrFriendIDs), expression.Value(friends))
}

// Friends returns the player's friend list (nil when none was synced).
func (s *Players) Friends(ctx context.Context, player string) ([]string, error) {
	list := ddb.MustBuild(expression.NewBuilder().WithProjection(expression.NamesList(expression.Name(schema.AttrFriendIDs))))
	out, err := s.DB.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:                aws.String(s.Table),
		Key:                      s.key(player),
		ProjectionExpression:     list.Projection(),
		ExpressionAttributeNames: list.Names(),
		ConsistentRead:           aws.Bool(true),
	})
	if err != nil {
		return nil, unavailable(err, "read friends of "+player)
	}
	var it playerItem
	if err := attributevalue.UnmarshalMap(out.Item, &it); err != nil {
		return nil, fmt.Errorf("decode friends of %s: %w", player, err)
	}
	return it.FriendIDs, nil
}

// unavailable classifies a DynamoDB failure: the source of truth cannot be
// reached, which callers answer with 503.
func unavailable(err error, what string) error {
	return errs.Wrap(errs.Unavailable, fmt.Errorf("%s: %w", what, err), "the players store is unreachable")
}
