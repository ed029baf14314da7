// Package dynamo stores game metadata in the Games table.
package dynamo

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/errs"
	"github.com/rallyhq/rally/shared/games"
	"github.com/rallyhq/rally/shared/schema"
)

// Games stores game metadata in the Games table.
type Games struct {
	DB    ddb.DB
	Table string
}

var _ games.Store = (*Games)(nil)

type gameItem struct {
	GameID       string `dynamodbav:"game_id"`
	Title        string `dynamodbav:"title"`
	ThumbnailURL string `dynamodbav:"thumbnail_url"`
	UpdatedAt    string `dynamodbav:"updated_at"`
}

// Put replaces a game's metadata.
func (s *Games) Put(ctx context.Context, g games.Game) error {
	item, err := attributevalue.MarshalMap(gameItem{GameID: g.ID, Title: g.Title, ThumbnailURL: g.ThumbnailURL, UpdatedAt: ddb.FormatTime(g.UpdatedAt)})
	if err != nil {
		return err
	}
	if _, err := s.DB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(s.Table), Item: item}); err != nil {
		return errs.Wrap(errs.Unavailable, fmt.Errorf("put game %s: %w", g.ID, err), "the games store is unreachable")
	}
	return nil
}

// Get reads the metadata of the given games; unknown ones are absent.
func (s *Games) Get(ctx context.Context, ids []string) (map[string]games.Game, error) {
	seen := map[string]bool{}
	var keys []map[string]types.AttributeValue
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			keys = append(keys, map[string]types.AttributeValue{schema.AttrGameID: ddb.S(id)})
		}
	}
	raw, err := ddb.BatchGet(ctx, s.DB, s.Table, keys, false)
	if err != nil {
		return nil, errs.Wrap(errs.Unavailable, fmt.Errorf("read games: %w", err), "the games store is unreachable")
	}
	out := make(map[string]games.Game, len(raw))
	for _, r := range raw {
		var it gameItem
		if err := attributevalue.UnmarshalMap(r, &it); err != nil {
			return nil, fmt.Errorf("decode game: %w", err)
		}
		out[it.GameID] = games.Game{ID: it.GameID, Title: it.Title, ThumbnailURL: it.ThumbnailURL, UpdatedAt: ddb.ParseTime(it.UpdatedAt)}
	}
	return out, nil
}
