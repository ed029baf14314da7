package dynamo

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/reactions"
	"github.com/rallyhq/rally/shared/schema"
)

// ExportedReaction is one of a user's reaction edges in their export:
// the target (game_id for a favorite, post_id for a like), whether it is
// ACTIVE or REMOVED, when it was last made active and last changed.
type ExportedReaction struct {
	GameID    string    `json:"game_id,omitempty"`
	PostID    string    `json:"post_id,omitempty"`
	State     string    `json:"state"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Export is a user's reactions of one kind, every edge, active or
// removed, by target id (an exports.Part named after the kind: favorites,
// likes).
type Export struct {
	Edges *Edges
	Kind  reactions.Kind
}

// Name implements exports.Part.
func (e Export) Name() string { return string(e.Kind) + "s" }

// Export implements exports.Part; the cursor is the last edge's sort key.
func (e Export) Export(ctx context.Context, user, cursor string, limit int) ([]any, string, error) {
	s := e.Edges
	in := ddb.QueryInput(s.Table, ddb.MustBuild(expression.NewBuilder().WithKeyCondition(
		expression.Key(schema.AttrUserID).Equal(expression.Value(user)).
			And(expression.Key(schema.AttrEdge).BeginsWith(edgeSK(e.Kind, ""))))))
	in.ConsistentRead, in.Limit = aws.Bool(true), aws.Int32(int32(limit))
	if cursor != "" {
		in.ExclusiveStartKey = map[string]types.AttributeValue{schema.AttrUserID: ddb.S(user), schema.AttrEdge: ddb.S(cursor)}
	}
	out, err := s.DB.Query(ctx, in)
	if err != nil {
		return nil, "", unavailable(err, "export the user's "+e.Name())
	}
	items := make([]any, 0, len(out.Items))
	last := ""
	for _, raw := range out.Items {
		var it edgeItem
		if err := attributevalue.UnmarshalMap(raw, &it); err != nil {
			return nil, "", fmt.Errorf("export %s: decode an edge: %w", e.Name(), err)
		}
		last = it.Edge
		x := ExportedReaction{State: it.State, CreatedAt: ddb.ParseTime(it.CreatedAt), UpdatedAt: ddb.ParseTime(it.UpdatedAt)}
		if e.Kind == reactions.Like {
			x.PostID = it.TargetID
		} else {
			x.GameID = it.TargetID
		}
		items = append(items, x)
	}
	if len(out.LastEvaluatedKey) == 0 {
		last = ""
	}
	return items, last, nil
}
