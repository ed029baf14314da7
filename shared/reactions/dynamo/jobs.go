package dynamo

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"golang.org/x/sync/errgroup"

	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/reactions"
	"github.com/rallyhq/rally/shared/schema"
)

var _ reactions.ActiveEdges = (*Edges)(nil)

// CountActive counts a target's ACTIVE edges in the sparse by_target
// index (an edge leaves it when it stops being active): in the target's
// partition those counting in trending, in its untrended partition those
// kept out. An edge kept out before the partitions were split is in the
// target's partition and in the sparse by_untrended index: it counts
// out of trending.
func (s *Edges) CountActive(ctx context.Context, t reactions.Target) (reactions.Totals, error) {
	in, err := s.countIndex(ctx, schema.IndexReactionsByTarget, schema.AttrTarget, targetKey(t))
	if err != nil {
		return reactions.Totals{}, fmt.Errorf("count active edges of %s: %w", t, err)
	}
	out, err := s.countIndex(ctx, schema.IndexReactionsByTarget, schema.AttrTarget, untrendedPrefix+targetKey(t))
	if err != nil {
		return reactions.Totals{}, fmt.Errorf("count active edges of %s out of trending: %w", t, err)
	}
	legacy, err := s.countIndex(ctx, schema.IndexReactionsUntrended, schema.AttrUntrended, targetKey(t))
	if err != nil {
		return reactions.Totals{}, fmt.Errorf("count active edges of %s out of trending: %w", t, err)
	}
	return reactions.Totals{Count: in + out, Trending: in - legacy}, nil
}

// countIndex counts the items of an index under one key.
func (s *Edges) countIndex(ctx context.Context, index, attr, key string) (int64, error) {
	in := ddb.QueryInput(s.Table, ddb.MustBuild(expression.NewBuilder().WithKeyCondition(
		expression.Key(attr).Equal(expression.Value(key)))))
	in.IndexName = aws.String(index)
	in.Select = types.SelectCount
	var n int64
	p := dynamodb.NewQueryPaginator(s.DB, in)
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			return 0, err
		}
		n += int64(out.Count)
	}
	return n, nil
}

// ScanTargets reads a page of the by_target index and returns the
// targets it names, each once per page (a target whose edges span pages
// comes again in the next).
func (s *Edges) ScanTargets(ctx context.Context, after reactions.Position) ([]reactions.Target, reactions.Position, error) {
	in := &dynamodb.ScanInput{
		TableName: aws.String(s.Table), IndexName: aws.String(schema.IndexReactionsByTarget), Limit: aws.Int32(1000),
	}
	if after != nil {
		in.ExclusiveStartKey = map[string]types.AttributeValue{}
		for k, v := range after {
			in.ExclusiveStartKey[k] = ddb.S(v)
		}
	}
	out, err := s.DB.Scan(ctx, in)
	if err != nil {
		return nil, nil, fmt.Errorf("scan targets: %w", err)
	}
	seen := map[reactions.Target]bool{}
	var targets []reactions.Target
	for _, it := range out.Items {
		raw, ok := it[schema.AttrTarget].(*types.AttributeValueMemberS)
		if !ok {
			continue
		}
		t, ok := parseTargetKey(strings.TrimPrefix(raw.Value, untrendedPrefix))
		if ok && !seen[t] {
			seen[t] = true
			targets = append(targets, t)
		}
	}
	return targets, position(out.LastEvaluatedKey), nil
}

// ScanEdges reads a page of every edge, whatever its state.
func (s *Edges) ScanEdges(ctx context.Context, after reactions.Position) ([]reactions.Edge, reactions.Position, error) {
	in := &dynamodb.ScanInput{TableName: aws.String(s.Table), Limit: aws.Int32(1000), ConsistentRead: aws.Bool(true)}
	if after != nil {
		in.ExclusiveStartKey = map[string]types.AttributeValue{}
		for k, v := range after {
			in.ExclusiveStartKey[k] = ddb.S(v)
		}
	}
	out, err := s.DB.Scan(ctx, in)
	if err != nil {
		return nil, nil, fmt.Errorf("scan edges: %w", err)
	}
	edges := make([]reactions.Edge, 0, len(out.Items))
	for _, raw := range out.Items {
		var it edgeItem
		if err := attributevalue.UnmarshalMap(raw, &it); err != nil {
			return nil, nil, fmt.Errorf("decode an edge: %w", err)
		}
		edges = append(edges, it.edge())
	}
	return edges, position(out.LastEvaluatedKey), nil
}

// MarkCounted sets each edge's counter marker to the edge's state: what a
// recompute, rewriting every count from the edges, makes the markers say
// (a marker already past the edge's version is left alone).
func (s *Counts) MarkCounted(ctx context.Context, edges []reactions.Edge, now time.Time) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(markerParallelism)
	for _, e := range edges {
		g.Go(func() error {
			return s.setMarker(gctx, e.UserID, targetKey(e.Target()), e.Counted(), now, true)
		})
	}
	return g.Wait()
}

// ScanMarkers reads a page of the markers counted active, with the edges
// they are of.
func (s *Counts) ScanMarkers(ctx context.Context, after reactions.Position) (map[reactions.Ref]reactions.Counted, reactions.Position, error) {
	e := ddb.MustBuild(expression.NewBuilder().WithFilter(
		expression.Name(schema.AttrPK).BeginsWith(schema.CountersAppliedPrefix).
			And(expression.Name(schema.AttrState).Equal(expression.Value(string(reactions.Active))))))
	in := &dynamodb.ScanInput{
		TableName: aws.String(s.Table), Limit: aws.Int32(1000), ConsistentRead: aws.Bool(true),
		FilterExpression: e.Filter(), ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values(),
	}
	if after != nil {
		in.ExclusiveStartKey = map[string]types.AttributeValue{
			schema.AttrPK: ddb.S(after[schema.AttrPK]), schema.AttrSK: ddb.S(after[schema.AttrSK]),
		}
	}
	out, err := s.DB.Scan(ctx, in)
	if err != nil {
		return nil, nil, fmt.Errorf("scan markers: %w", err)
	}
	markers := make(map[reactions.Ref]reactions.Counted, len(out.Items))
	for _, raw := range out.Items {
		ref, c, err := decodeMarker(raw)
		if err != nil {
			return nil, nil, err
		}
		if ref.Kind != "" {
			markers[ref] = c
		}
	}
	return markers, position(out.LastEvaluatedKey), nil
}

// ForgetMarker deletes the marker of an edge that no longer exists, if it
// still holds the version read.
func (s *Counts) ForgetMarker(ctx context.Context, ref reactions.Ref, ver int64) error {
	e := ddb.MustBuild(expression.NewBuilder().WithCondition(expression.Name(schema.AttrVer).Equal(expression.Value(ver))))
	_, err := s.DB.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: aws.String(s.Table), Key: markerKey(ref),
		ConditionExpression: e.Condition(), ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values(),
	})
	if err != nil && !ddb.IsConditionFailed(err) {
		return fmt.Errorf("forget a marker: %w", err)
	}
	return nil
}

func position(last map[string]types.AttributeValue) reactions.Position {
	if len(last) == 0 {
		return nil
	}
	p := reactions.Position{}
	for k, v := range last {
		if sv, ok := v.(*types.AttributeValueMemberS); ok {
			p[k] = sv.Value
		}
	}
	return p
}

// SetTotals rewrites a target's durable count and all-time trending total
// (a reconcile's repair or a recompute) if its version is still seen (0:
// the count item is missing), so a change the counter processor applied
// meanwhile is never lost; it bumps the version, so Redis takes the new
// values. ok is false when the version moved on.
func (s *Counts) SetTotals(ctx context.Context, t reactions.Target, to reactions.Totals, seen int64, now time.Time) (bool, error) {
	ver := expression.Name(schema.AttrVer)
	cond := ver.Equal(expression.Value(seen))
	if seen == 0 {
		cond = expression.Name(schema.AttrPK).AttributeNotExists().Or(cond)
	}
	upd := expression.Set(expression.Name(schema.AttrCount), expression.Value(to.Count)).
		Set(expression.Name(schema.AttrTrendTotal), expression.Value(to.Trending)).
		Add(ver, expression.Value(1)).
		Set(expression.Name(schema.AttrUpdatedAt), expression.Value(ddb.FormatTime(now)))
	key := map[string]types.AttributeValue{schema.AttrPK: ddb.S(targetKey(t)), schema.AttrSK: ddb.S(schema.CountersTotalSK)}
	_, err := s.DB.UpdateItem(ctx, ddb.UpdateInput(s.Table, key, ddb.MustBuild(expression.NewBuilder().WithCondition(cond).WithUpdate(upd))))
	if ddb.IsConditionFailed(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("set totals of %s: %w", t, err)
	}
	return true, nil
}
