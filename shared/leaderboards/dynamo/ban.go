package dynamo

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/leaderboards"
	"github.com/rallyhq/rally/shared/schema"
)

// Bans. A banned player's marker is a Scores item under BanPrefix + its id, which
// every submission checks in its own transaction: once the marker is
// written, no score of theirs can change. Each score they already have is
// then hidden: marked banned, out of the score index (no rank keys), out
// of its period's member count, and, from the stream, out of Redis. The
// scores stay, so an unban puts them back as they were.

// BanPrefix starts the Scores partition key of a player's ban marker:
// one partition per player, so the check every submission makes spreads
// like the players do instead of reading one hot partition. Board ids
// cannot start with '#', so it never collides with a board period.
const BanPrefix = "#ban#"

func banKey(player string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{schema.AttrPK: ddb.S(BanPrefix + player), schema.AttrPlayerID: ddb.S(player)}
}

// notBanned is a submission's check that the player is not banned.
func (s *Scores) notBanned(player string) types.TransactWriteItem {
	cond := ddb.MustBuild(expression.NewBuilder().WithCondition(expression.Name(schema.AttrPK).AttributeNotExists()))
	return types.TransactWriteItem{ConditionCheck: ddb.TransactCheck(s.Table, banKey(player), cond)}
}

// Ban records the ban (keeping the first time), then hides every score
// the player has on boards (the caller passes every defined board) and
// their regional views. It returns the board periods whose score it hid,
// for Redis. Running it again hides what a crash left visible.
func (s *Scores) Ban(ctx context.Context, player string, boards []string) (time.Time, []leaderboards.BoardPeriod, error) {
	at := expression.Name(schema.AttrBannedAt)
	mark := ddb.MustBuild(expression.NewBuilder().WithUpdate(
		expression.Set(at, expression.IfNotExists(at, expression.Value(ddb.FormatTime(clock.Now(s.Clock)))))))
	in := ddb.UpdateInput(s.Table, banKey(player), mark)
	in.ReturnValues = types.ReturnValueAllNew
	out, err := s.DB.UpdateItem(ctx, in)
	if err != nil {
		return time.Time{}, nil, unavailable(err, "record a ban")
	}
	since := time.Time{}
	if v, ok := out.Attributes[schema.AttrBannedAt].(*types.AttributeValueMemberS); ok {
		since = ddb.ParseTime(v.Value)
	}
	periods, err := s.scorePeriods(ctx, player, boards, func(string) bool { return true })
	if err != nil {
		return time.Time{}, nil, err
	}
	var hidden []leaderboards.BoardPeriod
	for _, bp := range periods {
		ok, err := s.setBanned(ctx, bp, player, true, "")
		if err != nil {
			return time.Time{}, nil, err
		}
		if ok {
			hidden = append(hidden, bp)
		}
	}
	return since, hidden, nil
}

// Unban lifts the ban and puts every hidden score back: in the score
// index (ordered by order, the board's), the member count and, from the
// stream, Redis. It returns the scores it restored.
func (s *Scores) Unban(ctx context.Context, player string, boards []string, order func(board string) leaderboards.Order) ([]leaderboards.Score, error) {
	if _, err := s.DB.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(s.Table), Key: banKey(player)}); err != nil {
		return nil, unavailable(err, "lift a ban")
	}
	periods, err := s.scorePeriods(ctx, player, boards, func(string) bool { return true })
	if err != nil {
		return nil, err
	}
	var restored []leaderboards.Score
	for _, bp := range periods {
		base, _, _ := leaderboards.SplitView(bp.Board)
		ok, err := s.setBanned(ctx, bp, player, false, order(base))
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		sc, err := s.read(ctx, bp.Board, bp.Period, player)
		if err != nil {
			return nil, err
		}
		if sc != nil {
			restored = append(restored, *sc)
		}
	}
	return restored, nil
}

// setBanned hides (banned) or restores a score and moves its period's
// member count with it, in one transaction conditioned on the version
// read, retried when it races a write. ok is false when there was nothing
// to change: no score, or one already in that state.
func (s *Scores) setBanned(ctx context.Context, bp leaderboards.BoardPeriod, player string, banned bool, o leaderboards.Order) (bool, error) {
	what := fmt.Sprintf("ban a score in %s/%s", bp.Board, bp.Period)
	for attempt := 0; attempt < eraseAttempts; attempt++ {
		if err := ddb.Pause(ctx, attempt); err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		it, err := s.item(ctx, bp.Board, bp.Period, player)
		if err != nil || it == nil || it.Banned == banned {
			return false, err
		}
		ver := expression.Name(schema.AttrVer)
		upd := expression.Set(ver, expression.Value(it.Ver+1))
		delta := 1
		if banned {
			upd = upd.Set(expression.Name(schema.AttrBanned), expression.Value(true)).
				Remove(expression.Name(schema.AttrRankPK)).Remove(expression.Name(schema.AttrRankSK))
			delta = -1
		} else {
			sc := it.score()
			upd = upd.Remove(expression.Name(schema.AttrBanned)).
				Set(expression.Name(schema.AttrRankPK), expression.Value(RankPartition(bp.Board, bp.Period, ShardOf(player)))).
				Set(expression.Name(schema.AttrRankSK), expression.Value(RankKey(o, sc.Score, sc.ReachedAt, player)))
		}
		guard := ddb.MustBuild(expression.NewBuilder().WithUpdate(upd).WithCondition(ver.Equal(expression.Value(it.Ver))))
		members := ddb.MustBuild(expression.NewBuilder().WithUpdate(expression.Add(expression.Name(schema.AttrMembers), expression.Value(delta))))
		_, err = s.DB.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
			{Update: ddb.TransactUpdate(s.Table, s.key(bp.Board, bp.Period, player), guard)},
			{Update: ddb.TransactUpdate(s.Table, s.key(bp.Board, bp.Period, MetaID), members)},
		}})
		if err == nil {
			return true, nil
		}
		if repeated, raced := cancelled(err); repeated == nil && !raced {
			return false, unavailable(err, what)
		}
	}
	return false, unavailable(fmt.Errorf("still racing after %d attempts", eraseAttempts), what)
}
