package dynamo

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/schema"
)

// A player's profile and friend list in their export (shared/exports
// Parts). The analytics secret a deployment may still keep in Players is
// never read: it is the key of the pseudonyms, not the player's data.

// ExportedProfile is a player's profile in their export. UpdatedAt is the
// last write of the player's item (profile or friend list).
type ExportedProfile struct {
	DisplayName string    `json:"display_name"`
	AvatarURL   string    `json:"avatar_url"`
	Region      string    `json:"region"`
	UpdatedAt   time.Time `json:"updated_at"`
}

// ProfileExport is a player's profile, or null when none was set (an
// exports.Single).
type ProfileExport struct{ Players *Players }

// Name implements exports.Part.
func (ProfileExport) Name() string { return "profile" }

// Single implements exports.Single.
func (ProfileExport) Single() {}

// Export implements exports.Part.
func (e ProfileExport) Export(ctx context.Context, player, _ string, _ int) ([]any, string, error) {
	it, err := e.Players.exported(ctx, player, schema.AttrDisplayName, schema.AttrAvatarURL, schema.AttrRegion, schema.AttrUpdatedAt)
	if err != nil || it.DisplayName == nil {
		return nil, "", err
	}
	return []any{ExportedProfile{
		DisplayName: *it.DisplayName, AvatarURL: it.AvatarURL, Region: it.Region, UpdatedAt: ddb.ParseTime(it.UpdatedAt),
	}}, "", nil
}

// FriendsExport is a player's friend list as last synced, [] when none
// (an exports.Single).
type FriendsExport struct{ Players *Players }

// Name implements exports.Part.
func (FriendsExport) Name() string { return "friends" }

// Single implements exports.Single.
func (FriendsExport) Single() {}

// Export implements exports.Part.
func (e FriendsExport) Export(ctx context.Context, player, _ string, _ int) ([]any, string, error) {
	it, err := e.Players.exported(ctx, player, schema.AttrFriendIDs)
	if err != nil {
		return nil, "", err
	}
	friends := it.FriendIDs
	if friends == nil {
		friends = []string{}
	}
	return []any{friends}, "", nil
}

// exported reads the named attributes of a player's item (zero when none).
func (s *Players) exported(ctx context.Context, player string, attrs ...string) (playerItem, error) {
	names := expression.NamesList(expression.Name(attrs[0]))
	for _, a := range attrs[1:] {
		names = names.AddNames(expression.Name(a))
	}
	p := ddb.MustBuild(expression.NewBuilder().WithProjection(names))
	out, err := s.DB.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(s.Table), Key: s.key(player), ConsistentRead: aws.Bool(true),
		ProjectionExpression: p.Projection(), ExpressionAttributeNames: p.Names(),
	})
	if err != nil {
		return playerItem{}, unavailable(err, "export a player's item")
	}
	var it playerItem
	if err := attributevalue.UnmarshalMap(out.Item, &it); err != nil {
		return playerItem{}, fmt.Errorf("export a player's item: decode: %w", err)
	}
	return it, nil
}
