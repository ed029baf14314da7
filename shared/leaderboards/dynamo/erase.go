package dynamo

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/leaderboards"
	"github.com/rallyhq/rally/shared/schema"
)

// Erasure removes a player from the leaderboards stores for good. Every
// step is safe to run again after a crash at any point, and no error names
// the player: erasure errors reach the logs.

// eraseAttempts bounds the retries of one score's erasure when it loses a
// race with another transaction on the period's meta item.
const eraseAttempts = 16

// ErasePlayer deletes the player's score in every board period and
// regional view, taking each out of its member count in the same
// transaction, then every match the player recorded on the given boards
// (the caller passes every defined board). It returns the board periods
// the player had a score in, so the caller can drop them from Redis too
// (the leaderboard processor also does, from the stream).
//
// The matches are deleted last, so after a crash a re-run finds those periods again and
// reports them again, and the caller's clean-up is repeated too. Each
// deletion is conditioned on the score existing, so a re-run never takes a
// member away twice.
func (s *Scores) ErasePlayer(ctx context.Context, player string, boards []string) ([]leaderboards.BoardPeriod, error) {
	periods, err := s.scorePeriods(ctx, player, boards, func(string) bool { return true })
	if err != nil {
		return nil, err
	}
	for _, bp := range periods {
		if err := s.eraseScore(ctx, bp, player, true); err != nil {
			return nil, err
		}
	}
	for _, b := range boards {
		if err := s.eraseMatches(ctx, b, player); err != nil {
			return nil, err
		}
	}
	// A ban names the player too.
	if _, err := s.DB.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(s.Table), Key: banKey(player)}); err != nil {
		return nil, unavailable(err, "erase a ban")
	}
	return periods, nil
}

// RemovePlayer deletes the player's score on board d (a cheater's) in one
// period, or in every period when period is "", with its regional view,
// taking each out of its member count. The matches stay recorded, so a
// game server sending one again does not bring the score back. It returns
// the board periods and views that held a score, for Redis.
func (s *Scores) RemovePlayer(ctx context.Context, d leaderboards.Definition, player, period string) ([]leaderboards.BoardPeriod, error) {
	var periods []leaderboards.BoardPeriod
	var err error
	if period != "" {
		periods, err = s.withViews(ctx, player, map[leaderboards.BoardPeriod]bool{{Board: d.ID, Period: period}: true})
	} else {
		periods, err = s.scorePeriods(ctx, player, []string{d.ID}, func(board string) bool {
			base, _, _ := leaderboards.SplitView(board)
			return base == d.ID
		})
	}
	if err != nil {
		return nil, err
	}
	for _, bp := range periods {
		if err := s.eraseScore(ctx, bp, player, false); err != nil {
			return nil, err
		}
	}
	return periods, nil
}

// scorePeriods finds the board periods (and regional views) where the
// player may hold a score, among those keep accepts.
//
// The scores are found by the by_player index and, for the periods of the
// matches still recorded on boards, by key: the index is eventually
// consistent, and scores written before it existed carry no player_key.
func (s *Scores) scorePeriods(ctx context.Context, player string, boards []string, keep func(board string) bool) ([]leaderboards.BoardPeriod, error) {
	candidates := map[leaderboards.BoardPeriod]bool{}
	if err := s.indexedPeriods(ctx, player, candidates); err != nil {
		return nil, err
	}
	for _, b := range boards {
		if err := s.matchedPeriods(ctx, b, player, candidates); err != nil {
			return nil, err
		}
	}
	for bp := range candidates {
		if !keep(bp.Board) {
			delete(candidates, bp)
		}
	}
	return s.withViews(ctx, player, candidates)
}

// withViews adds to candidates the regional view each score names and
// returns them sorted, views first: a re-run after a crash finds a view
// by the score still there, so the score goes last.
func (s *Scores) withViews(ctx context.Context, player string, candidates map[leaderboards.BoardPeriod]bool) ([]leaderboards.BoardPeriod, error) {
	for bp := range maps.Clone(candidates) {
		if _, _, view := leaderboards.SplitView(bp.Board); view {
			continue
		}
		sc, err := s.read(ctx, bp.Board, bp.Period, player)
		if err != nil {
			return nil, err
		}
		if sc != nil && sc.Region != "" {
			candidates[leaderboards.BoardPeriod{Board: leaderboards.ViewID(bp.Board, sc.Region), Period: bp.Period}] = true
		}
	}
	return sortedPeriods(candidates), nil
}

func sortedPeriods(set map[leaderboards.BoardPeriod]bool) []leaderboards.BoardPeriod {
	out := make([]leaderboards.BoardPeriod, 0, len(set))
	for bp := range set {
		out = append(out, bp)
	}
	slices.SortFunc(out, func(a, b leaderboards.BoardPeriod) int {
		_, _, av := leaderboards.SplitView(a.Board)
		_, _, bv := leaderboards.SplitView(b.Board)
		if av != bv {
			if av {
				return -1 // views before boards
			}
			return 1
		}
		if c := strings.Compare(a.Board, b.Board); c != 0 {
			return c
		}
		return strings.Compare(a.Period, b.Period)
	})
	return out
}

// indexedPeriods adds the board periods by_player lists for the player.
func (s *Scores) indexedPeriods(ctx context.Context, player string, into map[leaderboards.BoardPeriod]bool) error {
	in := ddb.QueryInput(s.Table, ddb.MustBuild(expression.NewBuilder().WithKeyCondition(
		expression.Key(schema.AttrPlayerKey).Equal(expression.Value(player)))))
	in.IndexName = aws.String(schema.IndexScoresByPlayer)
	for {
		out, err := s.DB.Query(ctx, in)
		if err != nil {
			return unavailable(err, "erase scores: list the player's board periods")
		}
		for _, raw := range out.Items {
			var it struct {
				PK string `dynamodbav:"pk"`
			}
			if err := attributevalue.UnmarshalMap(raw, &it); err != nil {
				return fmt.Errorf("erase scores: decode a by_player entry: %w", err)
			}
			// Periods never hold '#' (see leaderboards.PeriodAt), so the
			// last one separates the board from the period.
			i := strings.LastIndexByte(it.PK, '#')
			if i <= 0 {
				return fmt.Errorf("erase scores: malformed score key %q", it.PK)
			}
			into[leaderboards.BoardPeriod{Board: it.PK[:i], Period: it.PK[i+1:]}] = true
		}
		if len(out.LastEvaluatedKey) == 0 {
			return nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// eventsQuery lists the player's recorded matches on a board, with the
// given attributes.
func (s *Scores) eventsQuery(board, player string, attr string, more ...string) *dynamodb.QueryInput {
	projection := expression.NamesList(expression.Name(attr))
	for _, a := range more {
		projection = projection.AddNames(expression.Name(a))
	}
	in := ddb.QueryInput(s.Events, ddb.MustBuild(expression.NewBuilder().
		WithKeyCondition(expression.Key(schema.AttrPK).Equal(expression.Value(EventKey(board, player)))).
		WithProjection(projection)))
	in.ConsistentRead = aws.Bool(true)
	return in
}

// matchedPeriods adds the board's periods the player's recorded matches
// went to.
func (s *Scores) matchedPeriods(ctx context.Context, board, player string, into map[leaderboards.BoardPeriod]bool) error {
	in := s.eventsQuery(board, player, schema.AttrPeriod)
	for {
		out, err := s.DB.Query(ctx, in)
		if err != nil {
			return unavailable(err, "erase scores: read the player's matches on "+board)
		}
		for _, raw := range out.Items {
			var ev struct {
				Period string `dynamodbav:"period"`
			}
			if err := attributevalue.UnmarshalMap(raw, &ev); err != nil {
				return fmt.Errorf("erase scores: decode a match on %s: %w", board, err)
			}
			if ev.Period != "" {
				into[leaderboards.BoardPeriod{Board: board, Period: ev.Period}] = true
			}
		}
		if len(out.LastEvaluatedKey) == 0 {
			return nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// eraseScore deletes the player's score in one board period and takes one
// member off the period's count, in one transaction; a banned score is out
// of the count already, so it is simply deleted. A score already gone
// (erased by an earlier run) changes nothing. With hold (an erasure), the
// histogram marker is held first (see holdMarker).
func (s *Scores) eraseScore(ctx context.Context, bp leaderboards.BoardPeriod, player string, hold bool) error {
	key := s.key(bp.Board, bp.Period, player)
	oneLess := ddb.MustBuild(expression.NewBuilder().WithUpdate(expression.Add(expression.Name(schema.AttrMembers), expression.Value(-1))))
	what := fmt.Sprintf("erase a score in %s/%s", bp.Board, bp.Period)
	for attempt := 0; attempt < eraseAttempts; attempt++ {
		if err := ddb.Pause(ctx, attempt); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		it, err := s.item(ctx, bp.Board, bp.Period, player)
		if err != nil || it == nil {
			return err
		}
		if hold {
			if err := s.holdMarker(ctx, bp, player); err != nil {
				return err
			}
		}
		// Either way the delete is conditioned on the state read: a ban or
		// an unban in between makes it read again.
		state := expression.Name(schema.AttrBanned).AttributeNotExists()
		if it.Banned {
			state = expression.Name(schema.AttrBanned).AttributeExists()
		}
		cond := ddb.MustBuild(expression.NewBuilder().WithCondition(state))
		if it.Banned {
			_, err = s.DB.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(s.Table), Key: key,
				ConditionExpression: cond.Condition(), ExpressionAttributeNames: cond.Names()})
			var ccf *types.ConditionalCheckFailedException
			if errors.As(err, &ccf) {
				continue
			}
			if err != nil {
				return unavailable(err, what)
			}
			return nil
		}
		_, err = s.DB.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
			{Delete: &types.Delete{TableName: aws.String(s.Table), Key: key,
				ConditionExpression: cond.Condition(), ExpressionAttributeNames: cond.Names()}}, {Update: ddb.TransactUpdate(s.Table, s.key(bp.Board, bp.Period, MetaID), oneLess)},
		}})
		if err == nil {
			return nil
		}
		if repeated, raced := cancelled(err); repeated == nil && !raced {
			return unavailable(err, what)
		}
		// Gone, banned meanwhile, or a race on the meta item: read again.
	}
	return unavailable(fmt.Errorf("still racing after %d attempts", eraseAttempts), what)
}

// eraseMatches deletes every match the player recorded on the board,
// a page at a time.
func (s *Scores) eraseMatches(ctx context.Context, board, player string) error {
	in := s.eventsQuery(board, player, schema.AttrPK, schema.AttrMatchID)
	for {
		out, err := s.DB.Query(ctx, in)
		if err != nil {
			return unavailable(err, "erase the player's matches on "+board)
		}
		reqs := make([]types.WriteRequest, 0, len(out.Items))
		for _, key := range out.Items {
			reqs = append(reqs, types.WriteRequest{DeleteRequest: &types.DeleteRequest{Key: key}})
		}
		if err := ddb.BatchWrite(ctx, s.DB, s.Events, reqs); err != nil {
			return unavailable(err, "erase the player's matches on "+board)
		}
		if len(out.LastEvaluatedKey) == 0 {
			return nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// holdMarker gives the player's histogram marker in bp a placeholder
// (version 0, counting nothing) when there is none: the processor's
// counting of the score's deletion removes it, together with anything an
// older record counts meanwhile. An erasure waits for the player's markers
// to be gone (HistogramMarks), so it cannot complete while a deletion is
// still on its way through the stream, or parked: were it dropped from
// the archive after the erasure, the marker would name the player for
// good.
func (s *Scores) holdMarker(ctx context.Context, bp leaderboards.BoardPeriod, player string) error {
	if s.Counters == "" {
		return nil
	}
	item := s.markerKey(bp.Board, bp.Period, player)
	item[schema.AttrVer], item[attrHeld] = ddb.N(0), &types.AttributeValueMemberBOOL{Value: true}
	cond := ddb.MustBuild(expression.NewBuilder().WithCondition(expression.Name(schema.AttrPK).AttributeNotExists()))
	_, err := s.DB.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(s.Counters), Item: item, ConditionExpression: cond.Condition(), ExpressionAttributeNames: cond.Names(),
	})
	if err != nil && !ddb.IsConditionFailed(err) {
		return unavailable(err, fmt.Sprintf("hold a histogram marker in %s/%s", bp.Board, bp.Period))
	}
	return nil
}

// HistogramMarks is how many histogram markers name the player: none once
// the processor has counted every deletion of theirs.
func (s *Scores) HistogramMarks(ctx context.Context, player string) (int, error) {
	if s.Counters == "" {
		return 0, nil
	}
	in := ddb.QueryInput(s.Counters, ddb.MustBuild(expression.NewBuilder().WithKeyCondition(
		expression.Key(schema.AttrPK).Equal(expression.Value(schema.CountersHistogramMarkPrefix+player)))))
	in.ConsistentRead, in.Select = aws.Bool(true), types.SelectCount
	n := 0
	for pages := dynamodb.NewQueryPaginator(s.DB, in); pages.HasMorePages(); {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return 0, unavailable(err, "read the player's histogram markers")
		}
		n += int(page.Count)
	}
	return n, nil
}

// PlayerScores returns every score the player has on boards (their views
// included), hidden ones too: an erasure finds in it where a closed
// period's archive holds them.
func (s *Scores) PlayerScores(ctx context.Context, player string, boards []string) ([]leaderboards.Score, error) {
	periods, err := s.scorePeriods(ctx, player, boards, func(string) bool { return true })
	if err != nil {
		return nil, err
	}
	var out []leaderboards.Score
	for _, bp := range periods {
		it, err := s.item(ctx, bp.Board, bp.Period, player)
		if err != nil {
			return nil, err
		}
		if it != nil {
			out = append(out, it.score())
		}
	}
	return out, nil
}
