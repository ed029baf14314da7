package dynamo

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/errs"
	"github.com/rallyhq/rally/shared/leaderboards"
	"github.com/rallyhq/rally/shared/schema"
)

// EventRetention is how long a match id is remembered (the service
// refuses a match older than its horizon, so a retry never applies again).
const EventRetention = leaderboards.EventRetention

// submitAttempts bounds the optimistic retries of one submission; only a
// player whose score is changed this many times concurrently runs out.
const submitAttempts = 25

// Scores stores scores in the Scores table and the matches that made them
// in ScoreEvents.
type Scores struct {
	DB     ddb.DB
	Table  string // Scores
	Events string // ScoreEvents
	// Counters holds the boards' score histograms (see Tally); empty: no
	// histograms are kept, and a rank without Redis is always counted.
	Counters string
	// Clock stamps recorded_at and updated_at; nil means the wall clock.
	Clock clock.Clock

	// EstimateFrom is the member count from which a rank without Redis
	// is estimated from the histogram (DefaultEstimateFrom when 0), and
	// ExactTop the rank down to which it is still counted, which is
	// cheap there (DefaultExactTop when 0).
	EstimateFrom, ExactTop int64
}

var _ leaderboards.Scores = (*Scores)(nil)

// scoreItem is a Scores item. rank_pk and rank_sk place it in by_score;
// player_key places it in by_player (the period's meta item has none, so it
// stays out of that index).
type scoreItem struct {
	PK          string `dynamodbav:"pk"`
	PlayerID    string `dynamodbav:"player_id"`
	Score       int64  `dynamodbav:"score"`
	ReachedAt   int64  `dynamodbav:"reached_at"`
	Ver         int64  `dynamodbav:"ver"`
	LastMatchID string `dynamodbav:"last_match_id"`
	UpdatedAt   string `dynamodbav:"updated_at"`
	Board       string `dynamodbav:"board"`
	Period      string `dynamodbav:"period"`
	RankPK      string `dynamodbav:"rank_pk"`
	RankSK      string `dynamodbav:"rank_sk"`
	PlayerKey   string `dynamodbav:"player_key"`
	// Region is, on a regional board's score, the view it also appears in.
	Region string `dynamodbav:"region,omitempty"`
	// Banned hides the score (see Ban); it then has no rank keys.
	Banned bool `dynamodbav:"banned,omitempty"`
}

func (it scoreItem) score() leaderboards.Score {
	return leaderboards.Score{
		Board: it.Board, Period: it.Period, PlayerID: it.PlayerID, Score: it.Score,
		ReachedAt: time.UnixMilli(it.ReachedAt).UTC(), Version: it.Ver,
		LastMatchID: it.LastMatchID, UpdatedAt: ddb.ParseTime(it.UpdatedAt), Region: it.Region,
	}
}

func itemOf(o leaderboards.Order, s leaderboards.Score) scoreItem {
	return scoreItem{
		PK: PeriodKey(s.Board, s.Period), PlayerID: s.PlayerID, Score: s.Score, ReachedAt: s.ReachedAt.UnixMilli(),
		Ver: s.Version, LastMatchID: s.LastMatchID, UpdatedAt: ddb.FormatTime(s.UpdatedAt), Board: s.Board, Period: s.Period,
		RankPK:    RankPartition(s.Board, s.Period, ShardOf(s.PlayerID)),
		RankSK:    RankKey(o, s.Score, s.ReachedAt, s.PlayerID),
		PlayerKey: s.PlayerID, Region: s.Region,
	}
}

// eventItem is a ScoreEvents item: one accepted submission.
type eventItem struct {
	PK           string `dynamodbav:"pk"`
	MatchID      string `dynamodbav:"match_id"`
	Board        string `dynamodbav:"board"`
	PlayerID     string `dynamodbav:"player_id"`
	Period       string `dynamodbav:"period"`
	Score        int64  `dynamodbav:"score"`
	OccurredAt   string `dynamodbav:"occurred_at"`
	RecordedAt   string `dynamodbav:"recorded_at"`
	AppliedScore *int64 `dynamodbav:"applied_score,omitempty"`
	ExpiresAt    int64  `dynamodbav:"expires_at"`
}

// eventOf is the event of match m submitted to a board period at at,
// with the score it left (nil when it left none).
func eventOf(board, period string, m leaderboards.Match, applied *int64, at time.Time) eventItem {
	return eventItem{
		PK: EventKey(board, m.PlayerID), MatchID: m.MatchID, Board: board, PlayerID: m.PlayerID, Period: period,
		Score: m.Score, OccurredAt: ddb.FormatTime(m.OccurredAt.Truncate(time.Millisecond)), RecordedAt: ddb.FormatTime(at),
		AppliedScore: applied, ExpiresAt: at.Add(EventRetention).Unix(),
	}
}

func (s *Scores) key(board, period, player string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{schema.AttrPK: ddb.S(PeriodKey(board, period)), schema.AttrPlayerID: ddb.S(player)}
}

// read returns the player's score in the period, nil if none.
func (s *Scores) read(ctx context.Context, board, period, player string) (*leaderboards.Score, error) {
	it, err := s.item(ctx, board, period, player)
	if err != nil || it == nil {
		return nil, err
	}
	sc := it.score()
	return &sc, nil
}

// item reads the player's score item in the period, nil if none.
func (s *Scores) item(ctx context.Context, board, period, player string) (*scoreItem, error) {
	out, err := s.DB.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(s.Table), Key: s.key(board, period, player), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return nil, unavailable(err, fmt.Sprintf("read score %s/%s/%s", board, period, player))
	}
	if len(out.Item) == 0 {
		return nil, nil
	}
	var it scoreItem
	if err := attributevalue.UnmarshalMap(out.Item, &it); err != nil {
		return nil, fmt.Errorf("decode score %s/%s/%s: %w", board, period, player, err)
	}
	return &it, nil
}

// firstVersion is the version a score starts at: the wall clock in
// microseconds, not 1. A score can be deleted (a cheater's removal, an
// erasure) and start again; the deletion reaches Redis one version past
// the last, so a new score must start above every version the deleted
// one had, or the processor, keeping the newest version of a player's
// records, would take the deletion for the newer. Each change adds one,
// and changes are milliseconds apart, so a score's versions stay below
// the clock and a new score's first one is above them (within the skew
// of the hosts' clocks). Microseconds stay exact in Redis's scripts,
// which count in doubles (below 2^53 until the year 2255).
func firstVersion() int64 { return time.Now().UnixMicro() }

// Submit records match m for d's period and applies update to the player's
// score in one transaction: the match event (new match ids only), the score
// guarded by the version update saw, and, for a player's first score, the
// period's member count. A lost race re-reads and tries again.
func (s *Scores) Submit(ctx context.Context, d leaderboards.Definition, period string, m leaderboards.Match, update leaderboards.Update) (leaderboards.Submitted, error) {
	if m.PlayerID == "" || strings.HasPrefix(m.PlayerID, "#") {
		return leaderboards.Submitted{}, errs.Field("player_id", "must not be empty or start with '#'")
	}
	if m.MatchID == "" {
		return leaderboards.Submitted{}, errs.Field("match_id", "is required")
	}
	what := fmt.Sprintf("submit score %s/%s/%s match %s", d.ID, period, m.PlayerID, m.MatchID)
	for attempt := 0; attempt < submitAttempts; attempt++ {
		if err := ddb.Pause(ctx, attempt); err != nil {
			return leaderboards.Submitted{}, fmt.Errorf("%s: %w", what, err)
		}
		cur, err := s.read(ctx, d.ID, period, m.PlayerID)
		if err != nil {
			return leaderboards.Submitted{}, err
		}
		next, changed, err := update(cur)
		if err != nil {
			return leaderboards.Submitted{}, err
		}
		at := clock.Now(s.Clock).Truncate(time.Millisecond)
		after := leaderboards.Score{Board: d.ID, Period: period, PlayerID: m.PlayerID}
		if cur != nil {
			after = *cur
		}
		// A player who moved region moves view with this submission, even
		// one that leaves the score as it is.
		moved := d.Regional && cur != nil && cur.Region != m.Region
		if changed || moved {
			after = leaderboards.Score{
				Board: d.ID, Period: period, PlayerID: m.PlayerID, Score: next.Score,
				ReachedAt: next.ReachedAt.UTC().Truncate(time.Millisecond), Version: 1,
				LastMatchID: m.MatchID, UpdatedAt: at,
			}
			if !changed {
				after.Score, after.ReachedAt = cur.Score, cur.ReachedAt
			}
			if d.Regional {
				after.Region = m.Region
			}
			after.Version = firstVersion()
			if cur != nil {
				after.Version = cur.Version + 1
			}
			if err := checkRankable(after.Score, after.ReachedAt); err != nil {
				return leaderboards.Submitted{}, errs.Wrap(errs.Invalid, err, "the score cannot be recorded: "+err.Error())
			}
		}
		changed = changed || moved
		items, err := s.transaction(d, period, m, cur, after, changed, at)
		if err != nil {
			return leaderboards.Submitted{}, err
		}
		open := -1
		if m.Late {
			items, open = s.checkOpen(items, d.ID, period)
		}
		items = append(items, s.notBanned(m.PlayerID))
		_, err = s.DB.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
		if err == nil {
			return leaderboards.Submitted{Applied: true, Changed: changed, Previous: cur, Current: after}, nil
		}
		if failedAt(err, len(items)-1) {
			return leaderboards.Submitted{}, errs.New(errs.Forbidden, "player %s is banned from leaderboards", m.PlayerID)
		}
		if open >= 0 && failedAt(err, open) {
			return leaderboards.Submitted{}, errs.TooOld.New("period %s of %s is closed: its final standings are archived", period, d.ID)
		}
		repeated, raced := cancelled(err)
		switch {
		case repeated != nil:
			return s.alreadySubmitted(ctx, d.ID, period, m.PlayerID, repeated)
		case raced:
			continue
		default:
			return leaderboards.Submitted{}, unavailable(err, what)
		}
	}
	return leaderboards.Submitted{}, errs.New(errs.Conflict, "the score of %s is changing too fast; retry", m.PlayerID)
}

// transaction builds the items of one submission attempt: [0] the event,
// [1] the score (a write when changed, else a check that it is still the
// score update decided on), then the period's meta item for a first score
// or a view not yet listed, and, on a regional board, the views: the score
// in its region's view (with that view's member count when it enters it)
// and out of the view it left.
func (s *Scores) transaction(d leaderboards.Definition, period string, m leaderboards.Match, cur *leaderboards.Score, after leaderboards.Score, changed bool, at time.Time) ([]types.TransactWriteItem, error) {
	var applied *int64
	if changed || cur != nil {
		applied = &after.Score
	}
	evAV, err := attributevalue.MarshalMap(eventOf(d.ID, period, m, applied, at))
	if err != nil {
		return nil, fmt.Errorf("encode score event %s: %w", m.MatchID, err)
	}
	absent := expression.Name(schema.AttrPK).AttributeNotExists()
	newMatch := ddb.TransactPut(s.Events, evAV, ddb.MustBuild(expression.NewBuilder().WithCondition(absent)))
	newMatch.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
	items := []types.TransactWriteItem{{Put: newMatch}}

	// The score item is guarded either way: "unchanged" is a decision about
	// the version update saw, and the event records the score that follows.
	seen := absent
	if cur != nil {
		seen = expression.Name(schema.AttrVer).Equal(expression.Value(cur.Version))
	}
	guard := ddb.MustBuild(expression.NewBuilder().WithCondition(seen))
	if !changed {
		return append(items, types.TransactWriteItem{
			ConditionCheck: ddb.TransactCheck(s.Table, s.key(d.ID, period, m.PlayerID), guard),
		}), nil
	}
	scAV, err := attributevalue.MarshalMap(itemOf(d.Order, after))
	if err != nil {
		return nil, fmt.Errorf("encode score %s/%s/%s: %w", d.ID, period, m.PlayerID, err)
	}
	items = append(items, types.TransactWriteItem{Put: ddb.TransactPut(s.Table, scAV, guard)})
	was := ""
	if cur != nil {
		was = cur.Region
	}
	entered := after.Region != "" && after.Region != was
	if cur == nil || entered {
		var meta expression.UpdateBuilder
		if cur == nil {
			meta = meta.Add(expression.Name(schema.AttrMembers), expression.Value(1))
		}
		if entered {
			meta = meta.Add(expression.Name(schema.AttrViews), expression.Value(&types.AttributeValueMemberSS{Value: []string{after.Region}}))
		}
		b := expression.NewBuilder().WithUpdate(meta)
		if m.Late {
			b = b.WithCondition(stillOpen)
		}
		items = append(items, types.TransactWriteItem{Update: ddb.TransactUpdate(s.Table, s.key(d.ID, period, MetaID), ddb.MustBuild(b))})
	}
	if !d.Regional {
		return items, nil
	}
	return s.viewItems(items, d, period, after, was, entered)
}

// viewItems adds a regional score's view writes to a submission: the score
// put in its region's view (one more member there when it enters it), and
// deleted from the view it left (one member less there).
func (s *Scores) viewItems(items []types.TransactWriteItem, d leaderboards.Definition, period string, after leaderboards.Score, was string, entered bool) ([]types.TransactWriteItem, error) {
	members := func(n int) *types.Update {
		return ddb.TransactUpdate(s.Table, s.key(leaderboards.ViewID(d.ID, after.Region), period, MetaID),
			ddb.MustBuild(expression.NewBuilder().WithUpdate(expression.Add(expression.Name(schema.AttrMembers), expression.Value(n)))))
	}
	if after.Region != "" {
		v := d.View(after.Region)
		in := after
		in.Board, in.Region = v.ID, ""
		av, err := attributevalue.MarshalMap(itemOf(v.Order, in))
		if err != nil {
			return nil, fmt.Errorf("encode score %s/%s/%s: %w", v.ID, period, after.PlayerID, err)
		}
		items = append(items, types.TransactWriteItem{Put: &types.Put{TableName: aws.String(s.Table), Item: av}})
		if entered {
			items = append(items, types.TransactWriteItem{Update: members(1)})
		}
	}
	if was != "" && was != after.Region {
		left := leaderboards.ViewID(d.ID, was)
		items = append(items,
			types.TransactWriteItem{Delete: &types.Delete{TableName: aws.String(s.Table), Key: s.key(left, period, after.PlayerID)}},
			types.TransactWriteItem{Update: ddb.TransactUpdate(s.Table, s.key(left, period, MetaID),
				ddb.MustBuild(expression.NewBuilder().WithUpdate(expression.Add(expression.Name(schema.AttrMembers), expression.Value(-1)))))})
	}
	return items, nil
}

// failedAt reports whether err is a transaction cancelled by the
// condition of its item i.
func failedAt(err error, i int) bool {
	var tce *types.TransactionCanceledException
	return errors.As(err, &tce) && i < len(tce.CancellationReasons) && aws.ToString(tce.CancellationReasons[i].Code) == "ConditionalCheckFailed"
}

// cancelled reads why a submission's transaction did not commit: repeated
// holds the stored event when the match id was already recorded; raced is
// true when the attempt lost to a concurrent write and may be retried.
func cancelled(err error) (repeated map[string]types.AttributeValue, raced bool) {
	var conflict *types.TransactionConflictException
	if errors.As(err, &conflict) {
		return nil, true
	}
	var tce *types.TransactionCanceledException
	if !errors.As(err, &tce) {
		return nil, false
	}
	for i, r := range tce.CancellationReasons {
		switch aws.ToString(r.Code) {
		case "ConditionalCheckFailed":
			if i == 0 {
				if r.Item == nil {
					r.Item = map[string]types.AttributeValue{}
				}
				return r.Item, false
			}
			raced = true
		case "TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded":
			raced = true
		}
	}
	return nil, raced
}

// alreadySubmitted answers a repeated match id with the player's current
// score in the period the match was first recorded in, which may be an
// earlier one than the retry's.
func (s *Scores) alreadySubmitted(ctx context.Context, board, period, player string, stored map[string]types.AttributeValue) (leaderboards.Submitted, error) {
	var ev eventItem
	if err := attributevalue.UnmarshalMap(stored, &ev); err == nil && ev.Period != "" {
		period = ev.Period
	}
	cur, err := s.read(ctx, board, period, player)
	if err != nil {
		return leaderboards.Submitted{}, err
	}
	if cur == nil {
		return leaderboards.Submitted{Current: leaderboards.Score{Board: board, Period: period, PlayerID: player}}, nil
	}
	prev := *cur
	return leaderboards.Submitted{Current: *cur, Previous: &prev}, nil
}

// Close marks a board period closed to submissions (its meta item's
// closed_at) and returns when it was first marked: a late match checks
// the mark in its transaction, so none lands once it is set.
func (s *Scores) Close(ctx context.Context, board, period string, at time.Time) (time.Time, error) {
	closed := expression.Name(schema.AttrClosedAt)
	upd := expression.Set(closed, expression.IfNotExists(closed, expression.Value(ddb.FormatTime(at))))
	in := ddb.UpdateInput(s.Table, s.key(board, period, MetaID), ddb.MustBuild(expression.NewBuilder().WithUpdate(upd)))
	in.ReturnValues = types.ReturnValueUpdatedNew
	out, err := s.DB.UpdateItem(ctx, in)
	if err != nil {
		return time.Time{}, unavailable(err, fmt.Sprintf("close %s/%s", board, period))
	}
	v, _ := out.Attributes[schema.AttrClosedAt].(*types.AttributeValueMemberS)
	if v == nil {
		return at, nil
	}
	return ddb.ParseTime(v.Value), nil
}

// checkOpen makes a late submission's transaction check that its period
// is not closed: on the period's meta item, which the transaction updates
// already for a first score, or checks. It returns the items and the
// index of the one that checks.
func (s *Scores) checkOpen(items []types.TransactWriteItem, board, period string) ([]types.TransactWriteItem, int) {
	meta := s.key(board, period, MetaID)
	for i, it := range items {
		if it.Update != nil && sameKey(it.Update.Key, meta) {
			// transaction built the update with the condition (stillOpen).
			return items, i
		}
	}
	check := ddb.TransactCheck(s.Table, meta, ddb.MustBuild(expression.NewBuilder().WithCondition(stillOpen)))
	return append(items, types.TransactWriteItem{ConditionCheck: check}), len(items)
}

// stillOpen holds while a board period is not closed.
var stillOpen = expression.Name(schema.AttrClosedAt).AttributeNotExists()

// sameKey tells whether two item keys are equal (string attributes).
func sameKey(a, b map[string]types.AttributeValue) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		x, ok1 := v.(*types.AttributeValueMemberS)
		y, ok2 := b[k].(*types.AttributeValueMemberS)
		if !ok1 || !ok2 || x.Value != y.Value {
			return false
		}
	}
	return true
}
