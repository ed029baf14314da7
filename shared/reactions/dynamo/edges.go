// Package dynamo stores reactions in DynamoDB: edges (the source of truth,
// changed only by conditional writes), durable counts and trending buckets
// (applied exactly once by the counter processor), and game metadata.
package dynamo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/errs"
	"github.com/rallyhq/rally/shared/reactions"
	"github.com/rallyhq/rally/shared/schema"
)

// edgeItem is a Reactions item. listed_at exists only while a favorite is
// ACTIVE (likes are never listed, so they stay out of by_time and cost
// no write there) and target_key only while the edge is ACTIVE, which
// keeps the indexes sparse. An edge kept out of trending has its
// target_key in a partition of its own (untrendedPrefix), so by_target
// alone counts a target's edges in and out of trending and a write
// costs one index entry either way. untrended_key is only on edges
// written before that (the by_untrended index): counting reads it too,
// and the edge's next change removes it. trend is written
// by every activation and kept by a deactivation, so the stream's old
// image of a deactivation says what the activation it ends counted in.
type edgeItem struct {
	UserID       string `dynamodbav:"user_id"`
	Edge         string `dynamodbav:"edge"`
	Kind         string `dynamodbav:"kind"`
	TargetID     string `dynamodbav:"target_id"`
	State        string `dynamodbav:"state"`
	Ver          int64  `dynamodbav:"ver"`
	CreatedAt    string `dynamodbav:"created_at"`
	UpdatedAt    string `dynamodbav:"updated_at"`
	ListedAt     string `dynamodbav:"listed_at,omitempty"`
	TargetKey    string `dynamodbav:"target_key,omitempty"`
	Trend        *bool  `dynamodbav:"trend"`
	UntrendedKey string `dynamodbav:"untrended_key,omitempty"`
	// Flips are the edge's latest flips made with an Idempotency-Key
	// (flipMark), oldest first.
	Flips []string `dynamodbav:"flips,omitempty"`
}

// trends reports whether the edge's latest activation counts in trending;
// an edge written before the fraud controls does.
func (it edgeItem) trends() bool { return it.Trend == nil || *it.Trend }

// edgeSK is the sort key of an edge: {kind}#{target}.
func edgeSK(kind reactions.Kind, target string) string { return string(kind) + "#" + target }

// listedAt orders a user's active edges of one kind by time in the by_time
// index; "" for a kind no list reads (likes).
func listedAt(kind reactions.Kind, at time.Time, target string) string {
	if kind != reactions.Favorite { // GET /v1/users/{user_id}/favorites; likes are never listed
		return ""
	}
	return string(kind) + "#" + ddb.FormatTime(at) + "#" + target
}

// untrendedPrefix puts an edge kept out of trending in a by_target
// partition of its own.
const untrendedPrefix = "untrended#"

// edgeTargetKey is an ACTIVE edge's key in the by_target index: its
// target's, in a partition apart when the edge is out of trending.
func edgeTargetKey(t reactions.Target, trend reactions.Trend) string {
	if trend {
		return targetKey(t)
	}
	return untrendedPrefix + targetKey(t)
}

func (it edgeItem) edge() reactions.Edge {
	return reactions.Edge{
		Ref:       reactions.Ref{UserID: it.UserID, Kind: reactions.Kind(it.Kind), TargetID: it.TargetID},
		State:     reactions.State(it.State),
		Version:   it.Ver,
		CreatedAt: ddb.ParseTime(it.CreatedAt),
		UpdatedAt: ddb.ParseTime(it.UpdatedAt),
		Trend:     it.trends(),
	}
}

// Edges stores reaction edges in the Reactions table.
type Edges struct {
	DB    ddb.DB
	Table string
}

var _ reactions.Edges = (*Edges)(nil)

func (s *Edges) key(ref reactions.Ref) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		schema.AttrUserID: ddb.S(ref.UserID),
		schema.AttrEdge:   ddb.S(edgeSK(ref.Kind, ref.TargetID)),
	}
}

// Conditions on an edge's item.
var (
	edgeAbsent = expression.Name(schema.AttrUserID).AttributeNotExists()
	edgeState  = expression.Name(schema.AttrState)
	edgeVer    = expression.Name(schema.AttrVer)
)

// edgeAt is the condition that the edge is still at version ver (0: none).
func edgeAt(ver int64) expression.ConditionBuilder {
	if ver == 0 {
		return edgeAbsent
	}
	return edgeVer.Equal(expression.Value(ver))
}

// activate is the update that makes an edge ACTIVE at `at`, counting in
// trending or not, under cond.
func activate(ref reactions.Ref, at time.Time, trend reactions.Trend, cond expression.ConditionBuilder) expression.Expression {
	return ddb.MustBuild(expression.NewBuilder().WithUpdate(activation(ref, at, trend)).WithCondition(cond))
}

// activation sets what an ACTIVE edge holds.
func activation(ref reactions.Ref, at time.Time, trend reactions.Trend) expression.UpdateBuilder {
	now := expression.Value(ddb.FormatTime(at))
	update := expression.Set(edgeState, expression.Value(string(reactions.Active))).
		Set(edgeVer, expression.Plus(expression.IfNotExists(edgeVer, expression.Value(0)), expression.Value(1))).
		Set(expression.Name(schema.AttrKind), expression.Value(string(ref.Kind))).
		Set(expression.Name(schema.AttrTargetID), expression.Value(ref.TargetID)).
		Set(expression.Name(schema.AttrCreatedAt), now).
		Set(expression.Name(schema.AttrUpdatedAt), now).
		Set(expression.Name(schema.AttrTarget), expression.Value(edgeTargetKey(ref.Target(), trend))).
		Set(expression.Name(schema.AttrTrend), expression.Value(bool(trend))).
		Remove(expression.Name(schema.AttrUntrended))
	if listed := listedAt(ref.Kind, at, ref.TargetID); listed != "" {
		update = update.Set(expression.Name(schema.AttrListedAt), expression.Value(listed))
	}
	return update
}

// deactivate is the update that makes an edge REMOVED at `at`, under cond.
// It keeps trend: the stream's old image carries it to the counter.
func deactivate(at time.Time, cond expression.ConditionBuilder) expression.Expression {
	return ddb.MustBuild(expression.NewBuilder().WithUpdate(deactivation(at)).WithCondition(cond))
}

// deactivation sets what a REMOVED edge holds and drops its index keys.
func deactivation(at time.Time) expression.UpdateBuilder {
	return expression.Set(edgeState, expression.Value(string(reactions.Removed))).
		Set(edgeVer, edgeVer.Plus(expression.Value(1))).
		Set(expression.Name(schema.AttrUpdatedAt), expression.Value(ddb.FormatTime(at))).
		Remove(expression.Name(schema.AttrListedAt)).
		Remove(expression.Name(schema.AttrTarget)).
		Remove(expression.Name(schema.AttrUntrended))
}

// Add makes the edge ACTIVE unless it already is.
func (s *Edges) Add(ctx context.Context, ref reactions.Ref, at time.Time, trend reactions.Trend) (reactions.Edge, bool, error) {
	notActive := edgeAbsent.Or(edgeState.NotEqual(expression.Value(string(reactions.Active))))
	return s.change(ctx, ref, ddb.UpdateInput(s.Table, s.key(ref), activate(ref, at, trend, notActive)))
}

// Remove makes the edge REMOVED if it is ACTIVE.
func (s *Edges) Remove(ctx context.Context, ref reactions.Ref, at time.Time) (reactions.Edge, bool, error) {
	active := edgeState.Equal(expression.Value(string(reactions.Active)))
	return s.change(ctx, ref, ddb.UpdateInput(s.Table, s.key(ref), deactivate(at, active)))
}

// change runs a conditional update; a failed condition means the edge was
// already in the wanted state, which is reported as unchanged with the
// edge's current value.
func (s *Edges) change(ctx context.Context, ref reactions.Ref, in *dynamodb.UpdateItemInput) (reactions.Edge, bool, error) {
	in.ReturnValues = types.ReturnValueAllNew
	in.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
	out, err := s.DB.UpdateItem(ctx, in)
	var ccf *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &ccf):
		e := reactions.Edge{Ref: ref, State: reactions.Removed}
		if len(ccf.Item) > 0 {
			var it edgeItem
			if err := attributevalue.UnmarshalMap(ccf.Item, &it); err != nil {
				return reactions.Edge{}, false, fmt.Errorf("decode edge %s: %w", ref, err)
			}
			e = it.edge()
		}
		return e, false, nil
	case err != nil:
		return reactions.Edge{}, false, unavailable(err, "write edge "+ref.String())
	}
	var it edgeItem
	if err := attributevalue.UnmarshalMap(out.Attributes, &it); err != nil {
		return reactions.Edge{}, false, fmt.Errorf("decode edge %s: %w", ref, err)
	}
	return it.edge(), true, nil
}

// Toggle flips the edge with a version-guarded write, retrying when another
// write to the same edge wins the race. With commit, the flip also
// records the request's key on the edge, in the same write: a retry
// (even one racing the first) finds it and gets the edge as that flip
// left it, with commit.Replayed set, and nothing is written; the same key
// with another request is refused.
func (s *Edges) Toggle(ctx context.Context, ref reactions.Ref, at time.Time, trend reactions.Trend, commit *reactions.Commit) (reactions.Edge, error) {
	for attempt := 0; attempt < 16; attempt++ {
		it, err := s.item(ctx, ref)
		if err != nil {
			return reactions.Edge{}, err
		}
		cur := reactions.Edge{Ref: ref, State: reactions.Removed}
		if it != nil {
			cur = it.edge()
		}
		var flips []string
		if commit != nil && it != nil {
			mark, ok := findFlip(it.Flips, commit.Key, at)
			if ok && mark.hash != flipHash(commit.Hash) {
				return reactions.Edge{}, errs.New(errs.KeyReused, "this Idempotency-Key was used with a different request")
			}
			if ok {
				commit.Replayed = true
				cur.State = mark.state
				return cur, nil
			}
			flips = it.Flips
		}
		after := cur
		after.Version = cur.Version + 1
		after.UpdatedAt = at
		var update expression.UpdateBuilder
		if cur.Active() {
			after.State = reactions.Removed
			update = deactivation(at)
		} else {
			after.State, after.CreatedAt = reactions.Active, at
			update = activation(ref, at, trend)
		}
		if commit != nil {
			update = update.Set(expression.Name(schema.AttrFlips), expression.Value(remember(flips, flipMark{
				key: flipKey(commit.Key), hash: flipHash(commit.Hash), state: after.State, at: at,
			})))
		}
		change := ddb.MustBuild(expression.NewBuilder().WithUpdate(update).WithCondition(edgeAt(cur.Version)))
		_, err = s.DB.UpdateItem(ctx, ddb.UpdateInput(s.Table, s.key(ref), change))
		switch {
		case err == nil:
			return after, nil
		case !ddb.IsConditionFailed(err):
			return reactions.Edge{}, unavailable(err, "toggle edge "+ref.String())
		}
	}
	return reactions.Edge{}, errs.New(errs.Conflict, "the reaction is changing too fast; retry")
}

// item reads the edge's item, strongly consistent; nil when it has none.
func (s *Edges) item(ctx context.Context, ref reactions.Ref) (*edgeItem, error) {
	out, err := s.DB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.Table), Key: s.key(ref), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, unavailable(err, "read edge "+ref.String())
	}
	if len(out.Item) == 0 {
		return nil, nil
	}
	var it edgeItem
	if err := attributevalue.UnmarshalMap(out.Item, &it); err != nil {
		return nil, fmt.Errorf("decode edge %s: %w", ref, err)
	}
	return &it, nil
}

// Get reads user's edges to targets with strongly consistent reads, so a
// player always sees their own latest writes.
func (s *Edges) Get(ctx context.Context, user string, kind reactions.Kind, targets []string) (map[string]reactions.Edge, error) {
	keys := make([]map[string]types.AttributeValue, 0, len(targets))
	seen := map[string]bool{}
	for _, t := range targets {
		if !seen[t] {
			seen[t] = true
			keys = append(keys, s.key(reactions.Ref{UserID: user, Kind: kind, TargetID: t}))
		}
	}
	items, err := ddb.BatchGet(ctx, s.DB, s.Table, keys, true)
	if err != nil {
		return nil, unavailable(err, "read edges of "+user)
	}
	out := make(map[string]reactions.Edge, len(targets))
	for t := range seen {
		out[t] = reactions.Edge{Ref: reactions.Ref{UserID: user, Kind: kind, TargetID: t}, State: reactions.Removed}
	}
	for _, raw := range items {
		var it edgeItem
		if err := attributevalue.UnmarshalMap(raw, &it); err != nil {
			return nil, fmt.Errorf("decode edge of %s: %w", user, err)
		}
		out[it.TargetID] = it.edge()
	}
	return out, nil
}

// List pages through user's ACTIVE edges of kind, newest first, on the
// sparse by_time index.
func (s *Edges) List(ctx context.Context, user string, kind reactions.Kind, limit int, after reactions.Position) (reactions.Page, error) {
	in := ddb.QueryInput(s.Table, ddb.MustBuild(expression.NewBuilder().WithKeyCondition(
		expression.Key(schema.AttrUserID).Equal(expression.Value(user)).
			And(expression.Key(schema.AttrListedAt).BeginsWith(string(kind)+"#")))))
	in.IndexName = aws.String(schema.IndexReactionsByTime)
	in.ScanIndexForward = aws.Bool(false)
	if after != nil {
		if after[schema.AttrUserID] != user || after[schema.AttrEdge] == "" || after[schema.AttrListedAt] == "" {
			return reactions.Page{}, errs.Field("cursor", "is not a valid cursor for this list")
		}
		in.ExclusiveStartKey = map[string]types.AttributeValue{
			schema.AttrUserID:   ddb.S(user),
			schema.AttrEdge:     ddb.S(after[schema.AttrEdge]),
			schema.AttrListedAt: ddb.S(after[schema.AttrListedAt]),
		}
	}
	// Read one item past the page to learn whether another page exists, so
	// the last page never carries a cursor to an empty one. A query may also
	// come back short while items remain; keep reading until full.
	var page reactions.Page
	var items []edgeItem
	for {
		in.Limit = aws.Int32(int32(limit + 1 - len(items)))
		out, err := s.DB.Query(ctx, in)
		if err != nil {
			return reactions.Page{}, unavailable(err, "list edges of "+user)
		}
		for _, raw := range out.Items {
			var it edgeItem
			if err := attributevalue.UnmarshalMap(raw, &it); err != nil {
				return reactions.Page{}, fmt.Errorf("decode edge of %s: %w", user, err)
			}
			items = append(items, it)
		}
		if len(out.LastEvaluatedKey) == 0 || len(items) > limit {
			break
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
	if len(items) > limit {
		items = items[:limit]
		last := items[limit-1]
		page.Next = reactions.Position{
			schema.AttrUserID: last.UserID, schema.AttrEdge: last.Edge, schema.AttrListedAt: last.ListedAt,
		}
	}
	for _, it := range items {
		page.Edges = append(page.Edges, it.edge())
	}
	return page, nil
}

func unavailable(err error, what string) error {
	return errs.Wrap(errs.Unavailable, fmt.Errorf("%s: %w", what, err), "the reactions store is unreachable")
}
