package main

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/shared/app"
	"github.com/rallyhq/rally/shared/schema"
)

// The meter gives what DynamoDB bills: one WCU for a small item written
// alone, two per item in a transaction, its index writes included
// (AWS's pricing), whatever DynamoDB Local reports (it reports a
// transaction per table, as if of one item).
func TestTransactionsAreMeteredAsBilled(t *testing.T) {
	db, names, _ := testenv.DynamoDB(t)
	m := newRoutesMeter()
	client := dynamodb.New(db.Options(), func(o *dynamodb.Options) { o.APIOptions = append(o.APIOptions, m.APIOption) })
	tables := map[string]schema.Table{}
	for _, t := range schema.Tables() {
		tables[names.Of(t)] = t
	}
	m.tx = &txPricer{DB: client, Tables: tables}
	ctx := app.WithFunction(context.Background(), "probe")
	games, reactions := names.Of(schema.Games), names.Of(schema.Reactions)
	item := func(id string) map[string]types.AttributeValue {
		return map[string]types.AttributeValue{schema.AttrGameID: &types.AttributeValueMemberS{Value: id}}
	}
	if _, err := client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(games), Item: item("g0")}); err != nil {
		t.Fatal(err)
	}
	if u := m.Of("probe"); u.WCU != 1 || u.IndexWCU != 0 {
		t.Fatalf("a small PutItem metered %+v, want 1 WCU", u)
	}
	before := m.Of("probe")
	if _, err := client.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Put: &types.Put{TableName: aws.String(games), Item: item("g1")}},
		{Put: &types.Put{TableName: aws.String(games), Item: item("g2")}},
	}}); err != nil {
		t.Fatal(err)
	}
	if u := m.Of("probe").Minus(before); u.WCU != 4 {
		t.Fatalf("a transaction of two small items metered %v WCU, want 4 (2 per item)", u.WCU)
	}
	// An item with a local and a global index entry: three writes alone,
	// six in a transaction.
	edge := map[string]types.AttributeValue{
		schema.AttrUserID: &types.AttributeValueMemberS{Value: "u"}, schema.AttrEdge: &types.AttributeValueMemberS{Value: "favorite#g"},
		schema.AttrListedAt: &types.AttributeValueMemberS{Value: "favorite#t#g"}, schema.AttrTarget: &types.AttributeValueMemberS{Value: "favorite#g"},
	}
	before = m.Of("probe")
	if _, err := client.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Put: &types.Put{TableName: aws.String(reactions), Item: edge}},
	}}); err != nil {
		t.Fatal(err)
	}
	if u := m.Of("probe").Minus(before); u.WCU != 6 || u.IndexWCU != 4 {
		t.Fatalf("a transaction of one item with two index entries metered %v WCU (%v on indexes), want 6, 4 on indexes", u.WCU, u.IndexWCU)
	}
}

// An index write is priced by what the item's change does to the index:
// entering it, leaving it, a changed key (both), a changed projected
// attribute, or nothing.
func TestIndexWritesFollowTheItemsChange(t *testing.T) {
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	table := schema.Reactions
	byTarget := table.GlobalIndexes[0] // KEYS_ONLY on target_key
	byTime := table.LocalIndexes[0]    // ALL on listed_at
	base := map[string]types.AttributeValue{schema.AttrUserID: s("u"), schema.AttrEdge: s("favorite#g"), schema.AttrState: s("ACTIVE")}
	with := func(extra map[string]types.AttributeValue) map[string]types.AttributeValue {
		out := map[string]types.AttributeValue{}
		for k, v := range base {
			out[k] = v
		}
		for k, v := range extra {
			out[k] = v
		}
		return out
	}
	listed := with(map[string]types.AttributeValue{schema.AttrListedAt: s("favorite#1#g"), schema.AttrTarget: s("favorite#g")})
	relisted := with(map[string]types.AttributeValue{schema.AttrListedAt: s("favorite#2#g"), schema.AttrTarget: s("favorite#g")})
	for _, c := range []struct {
		name          string
		ix            schema.Index
		before, after map[string]types.AttributeValue
		want          float64
	}{
		{"enters a sparse index", byTarget, base, listed, 2},
		{"leaves it", byTarget, listed, base, 2},
		{"never in it", byTarget, base, base, 0},
		{"keys-only, key and keys unchanged, another attribute changed", byTarget, listed, with(map[string]types.AttributeValue{schema.AttrListedAt: s("favorite#1#g"), schema.AttrTarget: s("favorite#g"), schema.AttrState: s("X")}), 0},
		{"changed key: a delete and a put", byTime, listed, relisted, 4},
		{"all-projected, a projected attribute changed", byTime, listed, with(map[string]types.AttributeValue{schema.AttrListedAt: s("favorite#1#g"), schema.AttrTarget: s("favorite#g"), schema.AttrState: s("X")}), 2},
		{"new item", byTime, nil, listed, 2},
	} {
		if got := indexWrites(table, c.ix, c.before, c.after); got != c.want {
			t.Errorf("%s: %v units, want %v", c.name, got, c.want)
		}
	}
}
