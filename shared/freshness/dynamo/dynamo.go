// Package dynamo keeps the processors' watermarks (shared/freshness) in
// the Counters table, one item per processor (schema.CountersWatermarkPrefix):
// the durable copy that reads served without Redis and operations use.
package dynamo

import (
	"context"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/errs"
	"github.com/rallyhq/rally/shared/freshness"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
)

// Store is the durable copy of the watermarks.
type Store struct {
	DB    ddb.DB
	Table string // physical name of schema.Counters
}

var _ freshness.Store = (*Store)(nil)

type item struct {
	PK           string `dynamodbav:"pk"`
	SK           string `dynamodbav:"sk"`
	NewestChange string `dynamodbav:"newest_change"`
	AppliedAt    string `dynamodbav:"applied_at"`
}

func key(processor string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		schema.AttrPK: ddb.S(schema.CountersWatermarkPrefix + processor),
		schema.AttrSK: ddb.S(schema.CountersWatermarkSK),
	}
}

// Advance moves the processor's watermark forward to w, in one conditional
// write: stored times sort as strings (ddb.FormatTime), so the condition
// keeps only a newer change, and two processor instances racing leave the
// newer one whatever the order.
func (s *Store) Advance(ctx context.Context, processor string, w freshness.Watermark) error {
	newest := ddb.FormatTime(w.NewestChange)
	e := ddb.MustBuild(expression.NewBuilder().
		WithCondition(expression.Name(schema.AttrPK).AttributeNotExists().
			Or(expression.Name(schema.AttrNewestChange).LessThan(expression.Value(newest)))).
		WithUpdate(expression.Set(expression.Name(schema.AttrNewestChange), expression.Value(newest)).
			Set(expression.Name(schema.AttrAppliedAt), expression.Value(ddb.FormatTime(w.AppliedAt)))))
	_, err := s.DB.UpdateItem(ctx, ddb.UpdateInput(s.Table, key(processor), e))
	if err != nil && !ddb.IsConditionFailed(err) {
		return fmt.Errorf("advance watermark of %s: %w", processor, err)
	}
	return nil
}

// Get reads a processor's watermark.
func (s *Store) Get(ctx context.Context, processor string) (freshness.Watermark, bool, error) {
	out, err := s.DB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.Table), Key: key(processor)})
	if err != nil {
		return freshness.Watermark{}, false, errs.Wrap(errs.Unavailable, fmt.Errorf("read watermark of %s: %w", processor, err), "the counters store is unreachable")
	}
	if len(out.Item) == 0 {
		return freshness.Watermark{}, false, nil
	}
	w, err := decode(out.Item)
	if err != nil {
		return freshness.Watermark{}, false, fmt.Errorf("watermark of %s: %w", processor, err)
	}
	return w, true, nil
}

// List reads the watermark of every processor that records one, in one
// batch read; processors that never applied a change are absent.
func (s *Store) List(ctx context.Context) (map[string]freshness.Watermark, error) {
	procs := routes.Watermarked()
	keys := make([]map[string]types.AttributeValue, len(procs))
	for i, p := range procs {
		keys[i] = key(p.Function)
	}
	items, err := ddb.BatchGet(ctx, s.DB, s.Table, keys, false)
	if err != nil {
		return nil, errs.Wrap(errs.Unavailable, fmt.Errorf("list watermarks: %w", err), "the counters store is unreachable")
	}
	out := make(map[string]freshness.Watermark, len(items))
	for _, it := range items {
		pk, _ := it[schema.AttrPK].(*types.AttributeValueMemberS)
		if pk == nil {
			continue
		}
		w, err := decode(it)
		if err != nil {
			return nil, fmt.Errorf("watermark %s: %w", pk.Value, err)
		}
		out[strings.TrimPrefix(pk.Value, schema.CountersWatermarkPrefix)] = w
	}
	return out, nil
}

func decode(raw map[string]types.AttributeValue) (freshness.Watermark, error) {
	var it item
	if err := attributevalue.UnmarshalMap(raw, &it); err != nil {
		return freshness.Watermark{}, err
	}
	newest, err := ddb.ReadTime(it.NewestChange)
	if err != nil {
		return freshness.Watermark{}, err
	}
	applied, err := ddb.ReadTime(it.AppliedAt)
	if err != nil {
		return freshness.Watermark{}, err
	}
	return freshness.Watermark{NewestChange: newest, AppliedAt: applied}, nil
}
