package dynamo

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/leaderboards"
	"github.com/rallyhq/rally/shared/schema"
)

// A player's scores and matches in their export (shared/exports Parts).

// ExportedScore is one of a player's scores in their export.
type ExportedScore struct {
	LeaderboardID string    `json:"leaderboard_id"`
	Period        string    `json:"period"`
	Score         int64     `json:"score"`
	ReachedAt     time.Time `json:"reached_at"`
	LastMatchID   string    `json:"last_match_id"`
	UpdatedAt     time.Time `json:"updated_at"`
	Region        string    `json:"region,omitempty"`
	// Banned marks a score hidden by a ban (kept for an unban).
	Banned bool `json:"banned,omitempty"`
}

// ScoresExport is a player's score in every board and period (an
// exports.Part), found through the by_player index, in board then period
// order. A regional view's copy of a score is not listed again: the score
// names its region.
type ScoresExport struct{ Scores *Scores }

// Name implements exports.Part.
func (ScoresExport) Name() string { return "scores" }

// Export implements exports.Part; the cursor is the last score's
// partition key (board#period).
func (e ScoresExport) Export(ctx context.Context, player, cursor string, limit int) ([]any, string, error) {
	s := e.Scores
	in := ddb.QueryInput(s.Table, ddb.MustBuild(expression.NewBuilder().WithKeyCondition(
		expression.Key(schema.AttrPlayerKey).Equal(expression.Value(player)))))
	in.IndexName, in.Limit = aws.String(schema.IndexScoresByPlayer), aws.Int32(int32(limit))
	if cursor != "" {
		in.ExclusiveStartKey = map[string]types.AttributeValue{
			schema.AttrPlayerKey: ddb.S(player), schema.AttrPK: ddb.S(cursor), schema.AttrPlayerID: ddb.S(player),
		}
	}
	out, err := s.DB.Query(ctx, in)
	if err != nil {
		return nil, "", unavailable(err, "export scores: list the player's board periods")
	}
	var keys []map[string]types.AttributeValue
	var order []string
	last := ""
	for _, raw := range out.Items {
		var it struct {
			PK string `dynamodbav:"pk"`
		}
		if err := attributevalue.UnmarshalMap(raw, &it); err != nil {
			return nil, "", fmt.Errorf("export scores: decode a by_player entry: %w", err)
		}
		last = it.PK
		board := it.PK[:max(strings.LastIndexByte(it.PK, '#'), 0)]
		if _, _, view := leaderboards.SplitView(board); view {
			continue
		}
		keys = append(keys, map[string]types.AttributeValue{schema.AttrPK: ddb.S(it.PK), schema.AttrPlayerID: ddb.S(player)})
		order = append(order, it.PK)
	}
	raw, err := ddb.BatchGet(ctx, s.DB, s.Table, keys, true)
	if err != nil {
		return nil, "", unavailable(err, "export scores: read the player's scores")
	}
	byPK := make(map[string]scoreItem, len(raw))
	for _, r := range raw {
		var it scoreItem
		if err := attributevalue.UnmarshalMap(r, &it); err != nil {
			return nil, "", fmt.Errorf("export scores: decode a score: %w", err)
		}
		byPK[it.PK] = it
	}
	items := make([]any, 0, len(order))
	for _, pk := range order {
		it, ok := byPK[pk]
		if !ok {
			continue // erased or removed since the index listed it
		}
		sc := it.score()
		items = append(items, ExportedScore{
			LeaderboardID: sc.Board, Period: sc.Period, Score: sc.Score, ReachedAt: sc.ReachedAt,
			LastMatchID: sc.LastMatchID, UpdatedAt: sc.UpdatedAt, Region: sc.Region, Banned: it.Banned,
		})
	}
	if len(out.LastEvaluatedKey) == 0 {
		last = ""
	}
	return items, last, nil
}

// ExportedMatch is one of a player's recorded matches in their export.
type ExportedMatch struct {
	LeaderboardID string    `json:"leaderboard_id"`
	MatchID       string    `json:"match_id"`
	Period        string    `json:"period"`
	Score         int64     `json:"score"`
	OccurredAt    time.Time `json:"occurred_at"`
	RecordedAt    time.Time `json:"recorded_at"`
	// ScoreAfter is the player's score in the period once the match was
	// applied (absent when it changed none).
	ScoreAfter *int64 `json:"score_after,omitempty"`
}

// MatchesExport is every match a player recorded (ScoreEvents, kept for
// their retention), board by board in id order, each board's by match id
// (an exports.Part). Matches are kept per board, not per period, so every
// defined board is looked at.
type MatchesExport struct {
	Definitions *Definitions
	Scores      *Scores
}

// Name implements exports.Part.
func (MatchesExport) Name() string { return "score_events" }

// matchCursor separates the board from the last match id in a cursor:
// neither an id may hold it.
const matchCursor = "/"

// Export implements exports.Part; the cursor is board/last match id.
func (e MatchesExport) Export(ctx context.Context, player, cursor string, limit int) ([]any, string, error) {
	defs, err := e.Definitions.List(ctx)
	if err != nil {
		return nil, "", err
	}
	boards := make([]string, 0, len(defs))
	for _, d := range defs {
		boards = append(boards, d.ID)
	}
	slices.Sort(boards)
	board, after, _ := strings.Cut(cursor, matchCursor)
	items := make([]any, 0, limit)
	for _, b := range boards {
		if b < board {
			continue
		}
		from := ""
		if b == board {
			from = after
		}
		in := e.Scores.eventsQuery(b, player, schema.AttrPK, schema.AttrMatchID, schema.AttrPeriod, schema.AttrScore,
			"occurred_at", "recorded_at", "applied_score", schema.AttrBoard)
		in.Limit = aws.Int32(int32(limit - len(items)))
		if from != "" {
			in.ExclusiveStartKey = map[string]types.AttributeValue{schema.AttrPK: ddb.S(EventKey(b, player)), schema.AttrMatchID: ddb.S(from)}
		}
		out, err := e.Scores.DB.Query(ctx, in)
		if err != nil {
			return nil, "", unavailable(err, "export matches on "+b)
		}
		last := ""
		for _, raw := range out.Items {
			var ev eventItem
			if err := attributevalue.UnmarshalMap(raw, &ev); err != nil {
				return nil, "", fmt.Errorf("export matches on %s: decode a match: %w", b, err)
			}
			last = ev.MatchID
			items = append(items, ExportedMatch{
				LeaderboardID: b, MatchID: ev.MatchID, Period: ev.Period, Score: ev.Score,
				OccurredAt: ddb.ParseTime(ev.OccurredAt), RecordedAt: ddb.ParseTime(ev.RecordedAt), ScoreAfter: ev.AppliedScore,
			})
		}
		if len(out.LastEvaluatedKey) > 0 {
			return items, b + matchCursor + last, nil
		}
		if len(items) >= limit {
			// The board is done; the next call starts after it.
			return items, b + "\x00" + matchCursor, nil
		}
	}
	return items, "", nil
}
