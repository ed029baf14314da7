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
// (the scores with their periods' meta items, the matches, the ban
// marks), each in parallel batches.
func (s *Scores) Held(ctx context.Context, refs []leaderboards.ScoreRef, matches []leaderboards.MatchRef, players []string) (leaderboards.Held, error) {
	held := leaderboards.Held{
		Scores: map[leaderboards.ScoreRef]leaderboards.Score{}, Recorded: map[leaderboards.MatchRef]bool{}, Banned: map[string]bool{},
		Closed: map[leaderboards.BoardPeriod]bool{},
	}
	var scoreKeys, eventKeys, banKeys []map[string]types.AttributeValue
	metas := map[string]leaderboards.BoardPeriod{} // by the period's key
	for _, r := range refs {
		scoreKeys = append(scoreKeys, s.key(r.Board, r.Period, r.Player))
		if pk := PeriodKey(r.Board, r.Period); r.Period != leaderboards.AllTime && metas[pk] == (leaderboards.BoardPeriod{}) {
			metas[pk] = leaderboards.BoardPeriod{Board: r.Board, Period: r.Period}
			scoreKeys = append(scoreKeys, s.key(r.Board, r.Period, MetaID))
		}
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
		if id, _ := raw[schema.AttrPlayerID].(*types.AttributeValueMemberS); id != nil && id.Value == MetaID {
			if _, closed := raw[schema.AttrClosedAt]; closed {
				pk, _ := raw[schema.AttrPK].(*types.AttributeValueMemberS)
				if pk != nil {
					held.Closed[metas[pk.Value]] = true
				}
			}
			continue
		}
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

// Import implements leaderboards.ScoreImports: the member counts first
// (each once per chunk, see countMembers), the score items next, the
// matches last (see the interface). Each item is the one a submission
// would write: the same attributes, the version moved by one per change
// (a new score starts at firstVersion).
func (s *Scores) Import(ctx context.Context, chunk leaderboards.ImportChunk, orders map[string]leaderboards.Order, scores []leaderboards.Imported, members map[leaderboards.BoardPeriod]int64, matches []leaderboards.Recorded) ([]leaderboards.Score, error) {
	written := make([]leaderboards.Score, 0, len(scores))
	puts := make([]types.WriteRequest, 0, len(scores))
	for _, im := range scores {
		sc := im.Score
		sc.Version = firstVersion() + im.Changes - 1
		if im.Previous != nil {
			sc.Version = im.Previous.Version + im.Changes
		}
		if err := checkRankable(sc.Score, sc.ReachedAt); err != nil {
			return nil, fmt.Errorf("import score %s/%s/%s: %w", sc.Board, sc.Period, sc.PlayerID, err)
		}
		av, err := attributevalue.MarshalMap(itemOf(orders[sc.Board], sc))
		if err != nil {
			return nil, fmt.Errorf("encode score %s/%s/%s: %w", sc.Board, sc.Period, sc.PlayerID, err)
		}
		puts = append(puts, types.WriteRequest{PutRequest: &types.PutRequest{Item: av}})
		written = append(written, sc)
	}
	if err := s.countMembers(ctx, chunk, members); err != nil {
		return nil, unavailable(err, "count the members an import adds")
	}
	if err := ddb.BatchWriteAll(ctx, s.DB, s.Table, puts); err != nil {
		return nil, unavailable(err, "write the scores of an import")
	}
	events := make([]types.WriteRequest, 0, len(matches))
	for _, r := range matches {
		applied := r.Applied
		av, err := attributevalue.MarshalMap(eventOf(r.Board, r.Period, r.Match, &applied, r.RecordedAt))
		if err != nil {
			return nil, fmt.Errorf("encode score event %s: %w", r.MatchID, err)
		}
		events = append(events, types.WriteRequest{PutRequest: &types.PutRequest{Item: av}})
	}
	if err := ddb.BatchWriteAll(ctx, s.DB, s.Events, events); err != nil {
		return nil, unavailable(err, "record the matches of an import")
	}
	return written, nil
}

// countMembers adds a chunk's new members to each board period's count,
// once: the meta item keeps, under the job's mark, the first line of the
// job's last chunk counted, and a chunk at or before it adds nothing.
// That chunk's count was taken before any of its scores were written (the
// scores follow it), from the state every run of the chunk started from;
// a run applying it again, which finds some of its players in already,
// must not count again (its own count would be short), nor count a player
// twice. A job's chunks are applied one after the other, in file order,
// so the last one counted is the only one a run can find half done.
func (s *Scores) countMembers(ctx context.Context, chunk leaderboards.ImportChunk, members map[leaderboards.BoardPeriod]int64) error {
	mark := expression.Name(importMark(chunk.Job))
	line := expression.Value(chunk.Line)
	g, gctx := errgroup.WithContext(ctx)
	for bp, n := range members {
		if n == 0 {
			continue
		}
		upd := ddb.MustBuild(expression.NewBuilder().
			WithUpdate(expression.Add(expression.Name(schema.AttrMembers), expression.Value(n)).Set(mark, line)).
			WithCondition(expression.Or(mark.AttributeNotExists(), mark.LessThan(line))))
		g.Go(func() error {
			_, err := s.DB.UpdateItem(gctx, ddb.UpdateInput(s.Table, s.key(bp.Board, bp.Period, MetaID), upd))
			if ddb.IsConditionFailed(err) {
				return nil // counted by an earlier run of this chunk
			}
			return err
		})
	}
	return g.Wait()
}

// ForgetImport implements leaderboards.ScoreImports: the job's mark is
// removed from the period's meta item (nothing is written where there is
// none, a board deleted since included).
func (s *Scores) ForgetImport(ctx context.Context, bp leaderboards.BoardPeriod, job string) error {
	mark := expression.Name(importMark(job))
	upd := ddb.MustBuild(expression.NewBuilder().WithUpdate(expression.Remove(mark)).WithCondition(mark.AttributeExists()))
	_, err := s.DB.UpdateItem(ctx, ddb.UpdateInput(s.Table, s.key(bp.Board, bp.Period, MetaID), upd))
	if err != nil && !ddb.IsConditionFailed(err) {
		return unavailable(err, fmt.Sprintf("forget import %s on %s/%s", job, bp.Board, bp.Period))
	}
	return nil
}

// importMark is the meta item's attribute an import job marks its counts
// with.
func importMark(job string) string { return schema.AttrImportedPrefix + job }
