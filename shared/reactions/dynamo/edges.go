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
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/errs"
	"github.com/rallyhq/rally/shared/idempotency"
	"github.com/rallyhq/rally/shared/reactions"
	"github.com/rallyhq/rally/shared/schema"
)

// DB is the part of the DynamoDB API the stores use.
type DB interface {
	ddb.Batcher
	GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	DeleteItem(context.Context, *dynamodb.DeleteItemInput, ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	Query(context.Context, *dynamodb.QueryInput, ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	Scan(context.Context, *dynamodb.ScanInput, ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
	TransactWriteItems(context.Context, *dynamodb.TransactWriteItemsInput, ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
}

// timeLayout is fixed-width so that times sort as strings.
const timeLayout = "2006-01-02T15:04:05.000000000Z"

func formatTime(t time.Time) string { return t.UTC().Format(timeLayout) }

func parseTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}
	}
	return t.UTC()
}

// edgeItem is a Reactions item. listed_at and target_key exist only while
// the edge is ACTIVE, which keeps both indexes sparse.
type edgeItem struct {
	UserID    string `dynamodbav:"user_id"`
	Edge      string `dynamodbav:"edge"`
	Kind      string `dynamodbav:"kind"`
	TargetID  string `dynamodbav:"target_id"`
	State     string `dynamodbav:"state"`
	Ver       int64  `dynamodbav:"ver"`
	CreatedAt string `dynamodbav:"created_at"`
	UpdatedAt string `dynamodbav:"updated_at"`
	ListedAt  string `dynamodbav:"listed_at,omitempty"`
	TargetKey string `dynamodbav:"target_key,omitempty"`
}

// edgeSK is the sort key of an edge: {kind}#{target}.
func edgeSK(kind reactions.Kind, target string) string { return string(kind) + "#" + target }

// listedAt orders a user's active edges of one kind by time in the by_time index.
func listedAt(kind reactions.Kind, at time.Time, target string) string {
	return string(kind) + "#" + formatTime(at) + "#" + target
}

func (it edgeItem) edge() reactions.Edge {
	return reactions.Edge{
		Ref:       reactions.Ref{UserID: it.UserID, Kind: reactions.Kind(it.Kind), TargetID: it.TargetID},
		State:     reactions.State(it.State),
		Version:   it.Ver,
		CreatedAt: parseTime(it.CreatedAt),
		UpdatedAt: parseTime(it.UpdatedAt),
	}
}

// Edges stores reaction edges in the Reactions table.
type Edges struct {
	DB          DB
	Table       string
	Idempotency *idempotency.Store
}

var _ reactions.Edges = (*Edges)(nil)

func (s *Edges) key(ref reactions.Ref) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		schema.AttrUserID: ddb.S(ref.UserID),
		schema.AttrEdge:   ddb.S(edgeSK(ref.Kind, ref.TargetID)),
	}
}

// activate is the update that makes an edge ACTIVE at `at`, under cond.
func (s *Edges) activate(ref reactions.Ref, at time.Time, cond string, vals map[string]types.AttributeValue) *dynamodb.UpdateItemInput {
	values := map[string]types.AttributeValue{
		":active": ddb.S(string(reactions.Active)),
		":zero":   ddb.N(0),
		":one":    ddb.N(1),
		":kind":   ddb.S(string(ref.Kind)),
		":target": ddb.S(ref.TargetID),
		":now":    ddb.S(formatTime(at)),
		":listed": ddb.S(listedAt(ref.Kind, at, ref.TargetID)),
		":tkey":   ddb.S(targetKey(ref.Target())),
	}
	for k, v := range vals {
		values[k] = v
	}
	return &dynamodb.UpdateItemInput{
		TableName: aws.String(s.Table),
		Key:       s.key(ref),
		UpdateExpression: aws.String("SET #state = :active, ver = if_not_exists(ver, :zero) + :one, kind = :kind, " +
			"target_id = :target, created_at = :now, updated_at = :now, listed_at = :listed, target_key = :tkey"),
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeNames:  map[string]string{"#state": "state"},
		ExpressionAttributeValues: values,
	}
}

// deactivate is the update that makes an edge REMOVED at `at`, under cond.
func (s *Edges) deactivate(ref reactions.Ref, at time.Time, cond string, vals map[string]types.AttributeValue) *dynamodb.UpdateItemInput {
	values := map[string]types.AttributeValue{
		":removed": ddb.S(string(reactions.Removed)),
		":one":     ddb.N(1),
		":now":     ddb.S(formatTime(at)),
	}
	for k, v := range vals {
		values[k] = v
	}
	return &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.Table),
		Key:                       s.key(ref),
		UpdateExpression:          aws.String("SET #state = :removed, ver = ver + :one, updated_at = :now REMOVE listed_at, target_key"),
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeNames:  map[string]string{"#state": "state"},
		ExpressionAttributeValues: values,
	}
}

// Add makes the edge ACTIVE unless it already is.
func (s *Edges) Add(ctx context.Context, ref reactions.Ref, at time.Time) (reactions.Edge, bool, error) {
	in := s.activate(ref, at, "attribute_not_exists(user_id) OR #state <> :active", nil)
	return s.change(ctx, ref, in)
}

// Remove makes the edge REMOVED if it is ACTIVE.
func (s *Edges) Remove(ctx context.Context, ref reactions.Ref, at time.Time) (reactions.Edge, bool, error) {
	in := s.deactivate(ref, at, "#state = :active", map[string]types.AttributeValue{":active": ddb.S(string(reactions.Active))})
	return s.change(ctx, ref, in)
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
// write to the same edge wins the race. With commit, the idempotency record
// completes in the same transaction, so a retry of the request can never
// flip the edge a second time.
func (s *Edges) Toggle(ctx context.Context, ref reactions.Ref, at time.Time, commit *reactions.Commit) (reactions.Edge, error) {
	for attempt := 0; attempt < 16; attempt++ {
		cur, err := s.get(ctx, ref)
		if err != nil {
			return reactions.Edge{}, err
		}
		after := cur
		after.Version = cur.Version + 1
		after.UpdatedAt = at
		var in *dynamodb.UpdateItemInput
		guard := map[string]types.AttributeValue{":ver": ddb.N(cur.Version)}
		if cur.Active() {
			after.State = reactions.Removed
			in = s.deactivate(ref, at, "ver = :ver", guard)
		} else {
			after.State, after.CreatedAt = reactions.Active, at
			cond := "ver = :ver"
			if cur.Version == 0 {
				cond, guard = "attribute_not_exists(user_id)", nil
			}
			in = s.activate(ref, at, cond, guard)
		}
		err = s.commit(ctx, in, after, commit)
		if err == nil {
			return after, nil
		}
		if !errors.Is(err, errLostRace) {
			return reactions.Edge{}, err
		}
	}
	return reactions.Edge{}, errs.New(errs.Conflict, "the reaction is changing too fast; retry")
}

var errLostRace = errors.New("edge changed concurrently")

func (s *Edges) commit(ctx context.Context, in *dynamodb.UpdateItemInput, after reactions.Edge, commit *reactions.Commit) error {
	if commit == nil {
		_, err := s.DB.UpdateItem(ctx, in)
		if ddb.IsConditionFailed(err) {
			return errLostRace
		}
		if err != nil {
			return unavailable(err, "toggle edge "+after.Ref.String())
		}
		return nil
	}
	res, err := commit.Respond(after)
	if err != nil {
		return err
	}
	_, err = s.DB.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Update: &types.Update{
			TableName: in.TableName, Key: in.Key, UpdateExpression: in.UpdateExpression,
			ConditionExpression: in.ConditionExpression, ExpressionAttributeNames: in.ExpressionAttributeNames,
			ExpressionAttributeValues: in.ExpressionAttributeValues,
		}},
		{Update: s.Idempotency.CompleteUpdate(commit.Claim, res)},
	}})
	if failed, ok := ddb.CancelledBy(err); ok {
		for _, i := range failed {
			if i == 1 {
				return errs.New(errs.Conflict, "the Idempotency-Key was taken over by another request")
			}
		}
		if len(failed) > 0 {
			return errLostRace
		}
	}
	if err != nil {
		return unavailable(err, "toggle edge "+after.Ref.String())
	}
	return nil
}

func (s *Edges) get(ctx context.Context, ref reactions.Ref) (reactions.Edge, error) {
	out, err := s.DB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.Table), Key: s.key(ref), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return reactions.Edge{}, unavailable(err, "read edge "+ref.String())
	}
	if len(out.Item) == 0 {
		return reactions.Edge{Ref: ref, State: reactions.Removed}, nil
	}
	var it edgeItem
	if err := attributevalue.UnmarshalMap(out.Item, &it); err != nil {
		return reactions.Edge{}, fmt.Errorf("decode edge %s: %w", ref, err)
	}
	return it.edge(), nil
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
	in := &dynamodb.QueryInput{
		TableName:              aws.String(s.Table),
		IndexName:              aws.String(schema.IndexReactionsByTime),
		KeyConditionExpression: aws.String("user_id = :u AND begins_with(listed_at, :kind)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":u": ddb.S(user), ":kind": ddb.S(string(kind) + "#"),
		},
		ScanIndexForward: aws.Bool(false),
	}
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
