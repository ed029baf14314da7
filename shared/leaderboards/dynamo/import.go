package dynamo

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"golang.org/x/sync/errgroup"

	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/leaderboards"
	"github.com/rallyhq/rally/shared/schema"
)

var _ leaderboards.ScoreImports = (*Scores)(nil)

// Held implements leaderboards.ScoreImports: three batch reads at once
// (the scores, the matches, the ban marks), each in parallel batches.
func (s *Scores) Held(ctx context.Context, refs []leaderboards.ScoreRef, matches []leaderboards.MatchRef, players []string) (leaderboards.Held, error) {
	held := leaderboards.Held{
		Scores: map[leaderboards.ScoreRef]leaderboards.Score{}, Recorded: map[leaderboards.MatchRef]bool{}, Banned: map[string]bool{},
	}
	var scoreKeys, eventKeys, banKeys []map[string]types.AttributeValue
	for _, r := range refs {
		scoreKeys = append(scoreKeys, s.key(r.Board, r.Period, r.Player))
	}
	seenMatch := map[leaderboards.MatchRef]bool{}
	for _, m := range matches {
		if !seenMatch[m] {
			seenMatch[m] = true
			eventKeys = append(eventKeys, map[string]types.AttributeValue{
				schema.AttrPK: ddb.S(EventKey(m.Board, m.Player)), schema.AttrMatchID: ddb.S(m.MatchID),
			})
		}
	}
	seenPlayer := map[string]bool{}
	for _, p := range players {
		if !seenPlayer[p] {
			seenPlayer[p] = true
			banKeys = append(banKeys, banKey(p))
		}
	}
	var scores, events, bans []map[string]types.AttributeValue
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() (err error) {
		scores, err = ddb.BatchGetAll(gctx, s.DB, s.Table, scoreKeys, true)
		return err
	})
	g.Go(func() (err error) {
		events, err = ddb.BatchGetAll(gctx, s.DB, s.Events, eventKeys, true, schema.AttrBoard, schema.AttrPlayerID, schema.AttrMatchID)
		return err
	})
	g.Go(func() (err error) {
		bans, err = ddb.BatchGetAll(gctx, s.DB, s.Table, banKeys, true, schema.AttrPlayerID)
		return err
	})
	if err := g.Wait(); err != nil {
		return leaderboards.Held{}, unavailable(err, "read the scores an import changes")
	}
	for _, raw := range scores {
		var it scoreItem
		if err := attributevalue.UnmarshalMap(raw, &it); err != nil {
			return leaderboards.Held{}, fmt.Errorf("decode score: %w", err)
		}
		sc := it.score()
		held.Scores[leaderboards.ScoreRef{Board: sc.Board, Period: sc.Period, Player: sc.PlayerID}] = sc
	}
	for _, raw := range events {
		var ev eventItem
		if err := attributevalue.UnmarshalMap(raw, &ev); err != nil {
			return leaderboards.Held{}, fmt.Errorf("decode score event: %w", err)
		}
		held.Recorded[leaderboards.MatchRef{Board: ev.Board, Player: ev.PlayerID, MatchID: ev.MatchID}] = true
	}
	for _, raw := range bans {
		var it struct {
			PlayerID string `dynamodbav:"player_id"`
		}
		if err := attributevalue.UnmarshalMap(raw, &it); err != nil {
			return leaderboards.Held{}, fmt.Errorf("decode ban: %w", err)
		}
		held.Banned[it.PlayerID] = true
	}
	return held, nil
}

// Import implements leaderboards.ScoreImports: the score items and the
// member counts first, the matches after (see the interface). Each item
// is the one a submission would write: the same attributes, the version
// moved by one per change (a new score starts at firstVersion).
func (s *Scores) Import(ctx context.Context, orders map[string]leaderboards.Order, scores []leaderboards.Imported, members map[leaderboards.BoardPeriod]int64, matches []leaderboards.Recorded) error {
	puts := make([]types.WriteRequest, 0, len(scores))
	for _, im := range scores {
		sc := im.Score
		sc.Version = firstVersion() + im.Changes - 1
		if im.Previous != nil {
			sc.Version = im.Previous.Version + im.Changes
		}
		if err := checkRankable(sc.Score, sc.ReachedAt); err != nil {
			return fmt.Errorf("import score %s/%s/%s: %w", sc.Board, sc.Period, sc.PlayerID, err)
		}
		av, err := attributevalue.MarshalMap(itemOf(orders[sc.Board], sc))
		if err != nil {
			return fmt.Errorf("encode score %s/%s/%s: %w", sc.Board, sc.Period, sc.PlayerID, err)
		}
		puts = append(puts, types.WriteRequest{PutRequest: &types.PutRequest{Item: av}})
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return ddb.BatchWriteAll(gctx, s.DB, s.Table, puts) })
	for bp, n := range members {
		upd := ddb.MustBuild(expression.NewBuilder().WithUpdate(expression.Add(expression.Name(schema.AttrMembers), expression.Value(n))))
		g.Go(func() error {
			_, err := s.DB.UpdateItem(gctx, ddb.UpdateInput(s.Table, s.key(bp.Board, bp.Period, MetaID), upd))
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return unavailable(err, "write the scores of an import")
	}
	events := make([]types.WriteRequest, 0, len(matches))
	for _, r := range matches {
		applied := r.Applied
		av, err := attributevalue.MarshalMap(eventOf(r.Board, r.Period, r.Match, &applied, r.RecordedAt))
		if err != nil {
			return fmt.Errorf("encode score event %s: %w", r.MatchID, err)
		}
		events = append(events, types.WriteRequest{PutRequest: &types.PutRequest{Item: av}})
	}
	if err := ddb.BatchWriteAll(ctx, s.DB, s.Events, events); err != nil {
		return unavailable(err, "record the matches of an import")
	}
	return nil
}
