package dynamo

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/players"
	"github.com/rallyhq/rally/shared/schema"
)

// Imported is a player as a bulk load writes it: the profile and the
// friend list PutProfile and PutFriends would leave.
type Imported struct {
	Profile players.Profile
	// Friends are distinct, and not the player.
	Friends []string
}

// Import writes players in parallel batches: each player's item (profile,
// friend list, marked indexed) and the reverse entries of the list, the
// items PutProfile and PutFriends leave. It is for loading a table that
// nobody writes meanwhile (the benches' seeds): the writes are not
// conditional, and a player's earlier list's entries are not removed.
func (s *Players) Import(ctx context.Context, ps []Imported) error {
	reqs := make([]types.WriteRequest, 0, len(ps)*4)
	for _, p := range ps {
		name := p.Profile.DisplayName
		it, err := attributevalue.MarshalMap(playerItem{
			PlayerID: p.Profile.PlayerID, DisplayName: &name, AvatarURL: p.Profile.AvatarURL, Region: p.Profile.Region,
			FriendIDs: p.Friends, UpdatedAt: ddb.FormatTime(p.Profile.UpdatedAt),
		})
		if err != nil {
			return fmt.Errorf("encode player %s: %w", p.Profile.PlayerID, err)
		}
		if len(p.Friends) == 0 {
			delete(it, schema.AttrFriendIDs)
		}
		it[schema.AttrFriendsIndexed] = &types.AttributeValueMemberBOOL{Value: true}
		reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: it}})
		for _, f := range p.Friends {
			reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: listedItem(f, p.Profile.PlayerID)}})
		}
	}
	if err := ddb.BatchWriteAll(ctx, s.DB, s.Table, reqs); err != nil {
		return unavailable(err, "write the players of an import")
	}
	return nil
}
