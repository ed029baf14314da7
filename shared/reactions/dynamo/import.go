package dynamo

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/reactions"
)

var _ reactions.EdgeImports = (*Edges)(nil)

// Held implements reactions.EdgeImports: the edges named, read in
// parallel batches (absent ones are missing from the map).
func (s *Edges) Held(ctx context.Context, refs []reactions.Ref) (map[reactions.Ref]reactions.Edge, error) {
	keys := make([]map[string]types.AttributeValue, len(refs))
	for i, ref := range refs {
		keys[i] = s.key(ref)
	}
	items, err := ddb.BatchGetAll(ctx, s.DB, s.Table, keys, true)
	if err != nil {
		return nil, unavailable(err, "read the edges an import changes")
	}
	held := make(map[reactions.Ref]reactions.Edge, len(items))
	for _, raw := range items {
		var it edgeItem
		if err := attributevalue.UnmarshalMap(raw, &it); err != nil {
			return nil, fmt.Errorf("decode edge: %w", err)
		}
		e := it.edge()
		held[e.Ref] = e
	}
	return held, nil
}

// Import implements reactions.EdgeImports: each edge written ACTIVE in
// parallel batches, the item activate's update leaves (counting in
// trending), its version one past the one it had.
func (s *Edges) Import(ctx context.Context, edges []reactions.Activated) error {
	reqs := make([]types.WriteRequest, len(edges))
	for i, e := range edges {
		yes := true
		at := ddb.FormatTime(e.At)
		av, err := attributevalue.MarshalMap(edgeItem{
			UserID: e.UserID, Edge: edgeSK(e.Kind, e.TargetID), Kind: string(e.Kind), TargetID: e.TargetID,
			State: string(reactions.Active), Ver: e.Previous + 1, CreatedAt: at, UpdatedAt: at,
			ListedAt: listedAt(e.Kind, e.At, e.TargetID), TargetKey: targetKey(e.Target()), Trend: &yes,
		})
		if err != nil {
			return fmt.Errorf("encode edge %s: %w", e.Ref, err)
		}
		reqs[i] = types.WriteRequest{PutRequest: &types.PutRequest{Item: av}}
	}
	if err := ddb.BatchWriteAll(ctx, s.DB, s.Table, reqs); err != nil {
		return unavailable(err, "write the edges of an import")
	}
	return nil
}
