package dynamo

import (
	"context"
	"fmt"
	"sync"
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

// Erasure removes a user's edges and the counter processor's markers of
// them. Every step is safe to run again after a crash, and no error names
// the user: erasure errors reach the logs.

// eraseParallelism is how many edges of one page are deleted at once.
const eraseParallelism = 8

// EraseUser deletes every edge of user, of every kind, and returns for each
// edge it deleted the version its deletion is counted at: one past the
// edge's last, as ChangeFromRecord reads the deletion from the stream. The
// versions come from the deleted items themselves, so an edge toggled
// between the listing and the deletion is reported at the right one. A
// re-run that finds no edges returns an empty map. On an error it returns
// the edges deleted so far too.
//
// before, when not nil, is given each page's edges with the versions their
// deletions will be counted at, before any of them is deleted: a caller
// that records them there knows what to wait for even if it dies while
// deleting. An error from it stops the erasure.
func (s *Edges) EraseUser(ctx context.Context, user string, before func(map[reactions.Ref]int64) error) (map[reactions.Ref]int64, error) {
	in := ddb.QueryInput(s.Table, ddb.MustBuild(expression.NewBuilder().
		WithKeyCondition(expression.Key(schema.AttrUserID).Equal(expression.Value(user))).
		WithProjection(expression.NamesList(expression.Name(schema.AttrUserID), expression.Name(schema.AttrEdge),
			expression.Name(schema.AttrKind), expression.Name(schema.AttrTargetID), expression.Name(schema.AttrVer)))))
	in.ConsistentRead = aws.Bool(true)
	deleted := map[reactions.Ref]int64{}
	var mu sync.Mutex
	for {
		out, err := s.DB.Query(ctx, in)
		if err != nil {
			return deleted, unavailable(err, "erase edges: list the user's edges")
		}
		keys := make([]map[string]types.AttributeValue, 0, len(out.Items))
		listed := make(map[reactions.Ref]int64, len(out.Items))
		for _, raw := range out.Items {
			var it edgeItem
			if err := attributevalue.UnmarshalMap(raw, &it); err != nil {
				return deleted, fmt.Errorf("erase edges: decode a listed edge: %w", err)
			}
			listed[it.edge().Ref] = it.Ver + 1
			keys = append(keys, map[string]types.AttributeValue{
				schema.AttrUserID: raw[schema.AttrUserID], schema.AttrEdge: raw[schema.AttrEdge],
			})
		}
		if before != nil && len(listed) > 0 {
			if err := before(listed); err != nil {
				return deleted, err
			}
		}
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(eraseParallelism)
		for _, key := range keys {
			g.Go(func() error {
				ref, ver, ok, err := s.deleteEdge(gctx, key)
				if err != nil || !ok {
					return err
				}
				mu.Lock()
				deleted[ref] = ver
				mu.Unlock()
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			// What was deleted is reported with the error: the caller
			// must await its counting whatever stopped the rest.
			return deleted, err
		}
		if len(out.LastEvaluatedKey) == 0 {
			return deleted, nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// deleteEdge deletes one edge and returns the version its deletion is
// counted at; ok is false when the edge was already gone.
func (s *Edges) deleteEdge(ctx context.Context, key map[string]types.AttributeValue) (ref reactions.Ref, ver int64, ok bool, err error) {
	out, err := s.DB.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: aws.String(s.Table), Key: key, ReturnValues: types.ReturnValueAllOld,
	})
	if err != nil {
		return reactions.Ref{}, 0, false, unavailable(err, "erase edges: delete an edge")
	}
	if len(out.Attributes) == 0 {
		return reactions.Ref{}, 0, false, nil
	}
	var it edgeItem
	if err := attributevalue.UnmarshalMap(out.Attributes, &it); err != nil {
		return reactions.Ref{}, 0, false, fmt.Errorf("erase edges: decode a deleted edge: %w", err)
	}
	return it.edge().Ref, it.Ver + 1, true, nil
}

// markersQuery lists user's counter markers (see markerKey), with their
// keys and the given attributes.
func (s *Counts) markersQuery(user string, attrs ...string) *dynamodb.QueryInput {
	projection := expression.NamesList(expression.Name(schema.AttrPK), expression.Name(schema.AttrSK))
	for _, a := range attrs {
		projection = projection.AddNames(expression.Name(a))
	}
	in := ddb.QueryInput(s.Table, ddb.MustBuild(expression.NewBuilder().
		WithKeyCondition(expression.Key(schema.AttrPK).Equal(expression.Value(schema.CountersAppliedPrefix+user))).
		WithProjection(projection)))
	in.ConsistentRead = aws.Bool(true)
	return in
}

// Markers returns every counter marker of user: for each of the user's
// edges the counter processor has counted, the last version it counted.
func (s *Counts) Markers(ctx context.Context, user string) (map[reactions.Ref]int64, error) {
	in := s.markersQuery(user, schema.AttrVer, schema.AttrState)
	markers := map[reactions.Ref]int64{}
	for {
		out, err := s.DB.Query(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("read a user's counter markers: %w", err)
		}
		for _, raw := range out.Items {
			ref, c, err := decodeMarker(raw)
			if err != nil {
				return nil, err
			}
			if ref.Kind != "" {
				markers[ref] = c.Version
			}
		}
		if len(out.LastEvaluatedKey) == 0 {
			return markers, nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// Hold gives each of refs that has no counter marker a placeholder: a
// marker counting nothing, at version 0. An erasure holds the edges it is
// about to delete, so that each has a marker until the counter processor
// counts its deletion (which deletes the marker): a marker gone is a
// deletion counted, even for an edge whose earlier changes the processor
// had not reached.
func (s *Counts) Hold(ctx context.Context, refs []reactions.Ref, now time.Time) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(markerParallelism)
	for _, ref := range refs {
		g.Go(func() error {
			item := markerKey(ref)
			item[schema.AttrVer] = ddb.N(0)
			item[schema.AttrState] = ddb.S(string(reactions.Removed))
			item[schema.TTL] = ddb.N(now.Add(inactiveRetention).Unix())
			absent := expression.Name(schema.AttrPK).AttributeNotExists()
			_, err := s.DB.PutItem(gctx, ddb.PutInput(s.Table, item, ddb.MustBuild(expression.NewBuilder().WithCondition(absent))))
			if err != nil && !ddb.IsConditionFailed(err) {
				return fmt.Errorf("hold a counter marker: %w", err)
			}
			return nil
		})
	}
	return g.Wait()
}

// ForgetUser deletes every counter marker of user left (the deletions
// counted delete their own) and returns how many it deleted. Call it only
// once the deletions of the user's edges are counted (see Hold).
func (s *Counts) ForgetUser(ctx context.Context, user string) (int, error) {
	in := s.markersQuery(user)
	forgotten := 0
	for {
		out, err := s.DB.Query(ctx, in)
		if err != nil {
			return forgotten, fmt.Errorf("list a user's counter markers: %w", err)
		}
		reqs := make([]types.WriteRequest, 0, len(out.Items))
		for _, key := range out.Items {
			reqs = append(reqs, types.WriteRequest{DeleteRequest: &types.DeleteRequest{Key: key}})
		}
		if err := ddb.BatchWrite(ctx, s.DB, s.Table, reqs); err != nil {
			return forgotten, fmt.Errorf("delete a user's counter markers: %w", err)
		}
		forgotten += len(reqs)
		if len(out.LastEvaluatedKey) == 0 {
			return forgotten, nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}
