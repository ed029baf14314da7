package dynamo

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/schema"
)

// Reverse friend entries. Every friend list has, per distinct friend, one
// item in Players keyed "listed#<friend>#<player>" that carries listed_id
// (the friend) and listed_by (the player): the by_listed index, keyed by
// listed_id, answers "whose lists name this player" with a Query. Player
// ids never hold '#', so no entry's key is a player's.
//
// A list and its entries change in one transaction, conditioned on the
// list read before: at every committed state the entries are exactly the
// list's distinct members, whatever PUTs race or repeat. A change larger
// than one transaction (99 entries besides the list) is committed in steps,
// each a consistent state: readers may see an intermediate list during such
// a PUT, and a retry continues from wherever the last one stopped.
//
// Lists written before the index existed carry no friends_indexed mark:
// their entries are put (the friends recompute, or the list's next PUT
// that adds a friend) before the mark is set, and until then they are
// a subset of the list, so removals keep them exact.

// listedPrefix begins the key of a reverse entry.
const listedPrefix = schema.PlayersListedPrefix

// maxEntriesPerStep is how many reverse entries one transaction writes
// besides the list (DynamoDB's limit is 100 items).
const maxEntriesPerStep = 99

// friendEditAttempts bounds the rewrites of one friend list that keeps
// changing under an edit.
const friendEditAttempts = 16

// listedKey is the key of the reverse entry saying that by lists friend.
func listedKey(friend, by string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{schema.AttrPlayerID: ddb.S(listedPrefix + friend + "#" + by)}
}

// isListedEntry tells a reverse entry's key from a player's.
func isListedEntry(id string) bool { return strings.HasPrefix(id, listedPrefix) }

func listedItem(friend, by string) map[string]types.AttributeValue {
	it := listedKey(friend, by)
	it[schema.AttrListedID] = ddb.S(friend)
	it[schema.AttrListedBy] = ddb.S(by)
	return it
}

// friendState is a player's list as read, and whether its entries are
// all written.
type friendState struct {
	List    []string
	Indexed bool
	Exists  bool
}

func (s *Players) friendState(ctx context.Context, player string) (friendState, error) {
	p := ddb.MustBuild(expression.NewBuilder().WithProjection(expression.NamesList(
		expression.Name(schema.AttrPlayerID), expression.Name(schema.AttrFriendIDs), expression.Name(schema.AttrFriendsIndexed))))
	out, err := s.DB.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(s.Table), Key: s.key(player), ConsistentRead: aws.Bool(true),
		ProjectionExpression: p.Projection(), ExpressionAttributeNames: p.Names(),
	})
	if err != nil {
		return friendState{}, unavailable(err, "read the friend list of "+player)
	}
	var it struct {
		FriendIDs []string `dynamodbav:"friend_ids"`
		Indexed   bool     `dynamodbav:"friends_indexed"`
	}
	if err := attributevalue.UnmarshalMap(out.Item, &it); err != nil {
		return friendState{}, fmt.Errorf("decode the friend list of %s: %w", player, err)
	}
	return friendState{List: it.FriendIDs, Indexed: it.Indexed, Exists: len(out.Item) > 0}, nil
}

// editFriends moves player's list to what edit makes of it, its reverse
// entries with it, and deletes the entries naming drop (of this player)
// in the same write. Unless touch, a list edit makes no change leaves the
// item alone (an erasure never creates an item).
func (s *Players) editFriends(ctx context.Context, player string, edit func([]string) []string, drop []string, touch bool) error {
	what := "edit the friend list of " + player
	for attempt := 0; attempt < friendEditAttempts; attempt++ {
		if err := ddb.Pause(ctx, attempt); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		st, err := s.friendState(ctx, player)
		if err != nil {
			return err
		}
		want := edit(slices.Clone(st.List))
		if !st.Indexed && len(st.List) > 0 && len(added(st.List, want)) > 0 {
			// An older list gets its entries before anything is added.
			if _, err := s.indexFriends(ctx, player, st.List); err != nil {
				return err
			}
			continue
		}
		ok, err := s.moveFriends(ctx, player, st, want, drop, touch)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if ok {
			return nil
		}
	}
	return unavailable(fmt.Errorf("the list kept changing for %d attempts", friendEditAttempts), what)
}

// added is the distinct members of to that from lacks, in to's order.
func added(from, to []string) []string {
	var out []string
	for _, f := range to {
		if !slices.Contains(from, f) && !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out
}

// moveFriends commits the move from st to want in as many steps as the
// entries need. It returns false when the list changed since st was read
// (nothing of this step was written; the caller reads again).
func (s *Players) moveFriends(ctx context.Context, player string, st friendState, want, drop []string, touch bool) (bool, error) {
	for {
		removed := added(want, st.List)
		for _, d := range drop {
			if !slices.Contains(removed, d) && !slices.Contains(want, d) {
				removed = append(removed, d)
			}
		}
		puts := added(st.List, want)
		if len(removed) == 0 && len(puts) == 0 && !touch {
			return true, nil
		}
		next, last := want, true
		if len(removed)+len(puts) > maxEntriesPerStep {
			// A step: some removals, then some additions, on the list.
			last = false
			n := min(len(removed), maxEntriesPerStep)
			removed = removed[:n]
			puts = puts[:min(len(puts), maxEntriesPerStep-n)]
			next = slices.DeleteFunc(slices.Clone(st.List), func(f string) bool { return slices.Contains(removed, f) })
			next = append(next, puts...)
		}
		// The entries cover the list after the step when they covered it
		// before, or when there was none to cover.
		indexed := st.Indexed || len(st.List) == 0 || len(next) == 0
		writes := make([]types.TransactWriteItem, 0, 1+len(removed)+len(puts))
		if touch || !slices.Equal(next, st.List) || (indexed != st.Indexed && st.Exists) {
			writes = append(writes, types.TransactWriteItem{Update: ddb.TransactUpdate(s.Table, s.key(player),
				ddb.MustBuild(expression.NewBuilder().WithUpdate(listUpdate(next, indexed, clock.Now(s.Clock))).WithCondition(listIs(st))))})
		} else {
			// Only entries to delete (an erasure's, of a list that no
			// longer names the player): the item stays as it is.
			indexed = st.Indexed
			writes = append(writes, types.TransactWriteItem{ConditionCheck: ddb.TransactCheck(s.Table, s.key(player),
				ddb.MustBuild(expression.NewBuilder().WithCondition(listIs(st))))})
		}
		for _, f := range removed {
			writes = append(writes, types.TransactWriteItem{Delete: &types.Delete{TableName: aws.String(s.Table), Key: listedKey(f, player)}})
		}
		for _, f := range puts {
			writes = append(writes, types.TransactWriteItem{Put: &types.Put{TableName: aws.String(s.Table), Item: listedItem(f, player)}})
		}
		if ok, err := s.commit(ctx, writes); !ok || err != nil {
			return ok, err
		}
		if last {
			return true, nil
		}
		st = friendState{List: next, Indexed: indexed, Exists: true}
	}
}

// listIs holds while the list and its mark are still st's.
func listIs(st friendState) expression.ConditionBuilder {
	list := expression.Name(schema.AttrFriendIDs).AttributeNotExists()
	if len(st.List) > 0 {
		list = expression.Name(schema.AttrFriendIDs).Equal(expression.Value(st.List))
	}
	mark := expression.Name(schema.AttrFriendsIndexed).AttributeNotExists()
	if st.Indexed {
		mark = expression.Name(schema.AttrFriendsIndexed).AttributeExists()
	}
	return list.And(mark)
}

// listUpdate writes the friend list (removing the attribute when empty)
// and, once its entries are all written, the mark.
func listUpdate(friends []string, indexed bool, at time.Time) expression.UpdateBuilder {
	update := friendsUpdate(friends, at)
	if indexed {
		update = update.Set(expression.Name(schema.AttrFriendsIndexed), expression.Value(true))
	}
	return update
}

// commit writes one step: a single update alone, or a transaction. It
// returns false when a condition failed or the transaction met another.
func (s *Players) commit(ctx context.Context, writes []types.TransactWriteItem) (bool, error) {
	var err error
	if len(writes) == 1 && writes[0].Update != nil {
		u := writes[0].Update
		_, err = s.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: u.TableName, Key: u.Key, UpdateExpression: u.UpdateExpression, ConditionExpression: u.ConditionExpression,
			ExpressionAttributeNames: u.ExpressionAttributeNames, ExpressionAttributeValues: u.ExpressionAttributeValues,
		})
	} else {
		_, err = s.DB.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: writes})
	}
	if err == nil {
		return true, nil
	}
	var conflict *types.TransactionConflictException
	if _, cancelled := ddb.CancelledBy(err); cancelled || ddb.IsConditionFailed(err) || errors.As(err, &conflict) {
		return false, nil
	}
	return false, unavailable(err, "write a friend list")
}

// indexFriends puts the reverse entries of a list written before the
// index existed, then marks it indexed, each step on condition that the
// list is still list and unmarked. It returns false when the list changed
// meanwhile (whoever changed it indexed it).
func (s *Players) indexFriends(ctx context.Context, player string, list []string) (bool, error) {
	st := friendState{List: list, Exists: true}
	friends := added(nil, list)
	for {
		n := min(len(friends), maxEntriesPerStep)
		writes := make([]types.TransactWriteItem, 0, 1+n)
		if n == len(friends) {
			mark := expression.Set(expression.Name(schema.AttrFriendsIndexed), expression.Value(true))
			writes = append(writes, types.TransactWriteItem{Update: ddb.TransactUpdate(s.Table, s.key(player),
				ddb.MustBuild(expression.NewBuilder().WithUpdate(mark).WithCondition(listIs(st))))})
		} else {
			writes = append(writes, types.TransactWriteItem{ConditionCheck: ddb.TransactCheck(s.Table, s.key(player),
				ddb.MustBuild(expression.NewBuilder().WithCondition(listIs(st))))})
		}
		for _, f := range friends[:n] {
			writes = append(writes, types.TransactWriteItem{Put: &types.Put{TableName: aws.String(s.Table), Item: listedItem(f, player)}})
		}
		ok, err := s.commit(ctx, writes)
		if !ok || err != nil {
			return ok, err
		}
		friends = friends[n:]
		if len(friends) == 0 {
			return true, nil
		}
	}
}
