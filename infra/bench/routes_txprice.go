package main

import (
	"context"
	"fmt"
	"math"
	"reflect"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/schema"
)

// DynamoDB Local does not report a transaction's capacity as DynamoDB
// bills it: it gives each table touched the figure of one of its items,
// doubled (a transaction of two small items on one table reports 2 WCU,
// which DynamoDB bills 4). txPricer prices a TransactWriteItems by
// DynamoDB's rules instead, from the images of its items read just before
// and just after it: each item costs two write units per KB (1 KB
// rounded up) of the larger of its images, a ConditionCheck two per KB of
// the item it checks, and each secondary index write (the item entering
// an index, leaving it, or, for a changed key, both; a changed projected
// attribute, one) two per KB of what the index projects. The images are
// read outside the meter: the section runs one request at a time, so
// nothing else writes those items in between.
type txPricer struct {
	DB interface {
		GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	}
	// Tables are the declared tables by physical name.
	Tables map[string]schema.Table
}

// txItem is one item of a transaction with its images.
type txItem struct {
	table         schema.Table
	physical      string
	key           map[string]types.AttributeValue
	check         bool
	before, after map[string]types.AttributeValue
}

// Before reads the images of in's items before it runs.
func (p *txPricer) Before(ctx context.Context, in *dynamodb.TransactWriteItemsInput) ([]txItem, error) {
	items := make([]txItem, 0, len(in.TransactItems))
	for _, ti := range in.TransactItems {
		var it txItem
		switch {
		case ti.Put != nil:
			it.physical = aws.ToString(ti.Put.TableName)
			it.key = ti.Put.Item
		case ti.Update != nil:
			it.physical, it.key = aws.ToString(ti.Update.TableName), ti.Update.Key
		case ti.Delete != nil:
			it.physical, it.key = aws.ToString(ti.Delete.TableName), ti.Delete.Key
		case ti.ConditionCheck != nil:
			it.physical, it.key, it.check = aws.ToString(ti.ConditionCheck.TableName), ti.ConditionCheck.Key, true
		}
		t, ok := p.Tables[it.physical]
		if !ok {
			return nil, fmt.Errorf("price a transaction: table %q is not declared", it.physical)
		}
		it.table, it.key = t, primaryKey(t, it.key)
		var err error
		if it.before, err = p.read(ctx, it); err != nil {
			return nil, err
		}
		items = append(items, it)
	}
	return items, nil
}

// After reads the items' images once the transaction succeeded.
func (p *txPricer) After(ctx context.Context, items []txItem) error {
	for i := range items {
		if items[i].check {
			items[i].after = items[i].before
			continue
		}
		var err error
		if items[i].after, err = p.read(ctx, items[i]); err != nil {
			return err
		}
	}
	return nil
}

func (p *txPricer) read(ctx context.Context, it txItem) (map[string]types.AttributeValue, error) {
	out, err := p.DB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(it.physical), Key: it.key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, fmt.Errorf("price a transaction: read an item of %s: %w", it.table.Name, err)
	}
	return out.Item, nil
}

// primaryKey keeps the table's key attributes of item.
func primaryKey(t schema.Table, item map[string]types.AttributeValue) map[string]types.AttributeValue {
	key := map[string]types.AttributeValue{t.PartitionKey.Name: item[t.PartitionKey.Name]}
	if t.SortKey != nil {
		key[t.SortKey.Name] = item[t.SortKey.Name]
	}
	return key
}

// txPrice is what DynamoDB bills for a transaction whose items had these
// images, by table (physical name): write units, and the part of them its
// indexes took.
func txPrice(items []txItem) map[string]routesCapacity {
	by := map[string]routesCapacity{}
	for _, it := range items {
		c := by[it.physical]
		c.WCU += 2 * kilobytes(max(ddb.ItemSize(it.before), ddb.ItemSize(it.after)))
		if !it.check {
			for _, ix := range indexesOf(it.table) {
				n := indexWrites(it.table, ix, it.before, it.after)
				c.WCU += n
				c.IndexWCU += n
			}
		}
		by[it.physical] = c
	}
	return by
}

// indexesOf lists a table's secondary indexes, local ones keyed by the
// table's partition key.
func indexesOf(t schema.Table) []schema.Index {
	return append(append([]schema.Index{}, t.LocalIndexes...), t.GlobalIndexes...)
}

// indexWrites is the units of the writes one item's change makes in an
// index, two per KB of projection as in a transaction.
func indexWrites(t schema.Table, ix schema.Index, before, after map[string]types.AttributeValue) float64 {
	was, is := projection(t, ix, before), projection(t, ix, after)
	switch {
	case was == nil && is == nil:
		return 0
	case was == nil:
		return 2 * kilobytes(ddb.ItemSize(is))
	case is == nil:
		return 2 * kilobytes(ddb.ItemSize(was))
	case !sameIndexKey(ix, was, is):
		return 2*kilobytes(ddb.ItemSize(was)) + 2*kilobytes(ddb.ItemSize(is))
	case !reflect.DeepEqual(was, is):
		return 2 * kilobytes(ddb.ItemSize(is))
	}
	return 0
}

// projection is what index ix holds of item, nil when the item is not in
// it (an index key attribute missing: the index is sparse).
func projection(t schema.Table, ix schema.Index, item map[string]types.AttributeValue) map[string]types.AttributeValue {
	if item == nil {
		return nil
	}
	keys := []string{ix.PartitionKey.Name}
	if ix.SortKey != nil {
		keys = append(keys, ix.SortKey.Name)
	}
	for _, k := range keys {
		if _, ok := item[k]; !ok {
			return nil
		}
	}
	if ix.Projection == schema.ProjectAll {
		return item
	}
	keep := append(keys, t.PartitionKey.Name)
	if t.SortKey != nil {
		keep = append(keep, t.SortKey.Name)
	}
	if ix.Projection == schema.ProjectInclude {
		keep = append(keep, ix.NonKeyAttributes...)
	}
	out := map[string]types.AttributeValue{}
	for _, k := range keep {
		if v, ok := item[k]; ok {
			out[k] = v
		}
	}
	return out
}

func sameIndexKey(ix schema.Index, a, b map[string]types.AttributeValue) bool {
	if !reflect.DeepEqual(a[ix.PartitionKey.Name], b[ix.PartitionKey.Name]) {
		return false
	}
	return ix.SortKey == nil || reflect.DeepEqual(a[ix.SortKey.Name], b[ix.SortKey.Name])
}

// kilobytes is a size in the 1 KB units DynamoDB bills writes by: at
// least one.
func kilobytes(bytes int) float64 { return max(1, math.Ceil(float64(bytes)/1024)) }
