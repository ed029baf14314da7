package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/infra/local/tables"
	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/reactions"
	"github.com/rallyhq/rally/shared/reactions/dynamo"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
)

// The coalescing section: how many durable writes the counter processor
// makes for a burst of favorites concentrated on one game.
const (
	coalescingFavorites = 1000
	coalescingCatalogue = 10000 // games besides the hot one
	coalescingZipfS     = 1.1
	coalescingHotGame   = "hot-game"
)

// coalescingTargets draws n favorite targets: half of them (rounded down)
// the hot game, the rest Zipf(s) over a catalogue of other games (game-0
// the most favorited), in a shuffled order.
func coalescingTargets(rng *rand.Rand, n, catalogue int, s float64) []string {
	z := rand.NewZipf(rng, s, 1, uint64(catalogue-1))
	out := make([]string, 0, n)
	for range n / 2 {
		out = append(out, coalescingHotGame)
	}
	for len(out) < n {
		out = append(out, fmt.Sprintf("game-%d", z.Uint64()))
	}
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// coalescingClass names the family of a written Counters item.
func coalescingClass(key map[string]types.AttributeValue) string {
	pk, sk := coalescingString(key[schema.AttrPK]), coalescingString(key[schema.AttrSK])
	switch {
	case strings.HasPrefix(pk, schema.CountersAppliedPrefix):
		return "marker"
	case sk == schema.CountersTotalSK:
		return "total"
	case strings.HasPrefix(sk, string(reactions.Hourly)+"#"), strings.HasPrefix(sk, string(reactions.Daily)+"#"):
		return "bucket"
	default:
		return "other dedupe"
	}
}

func coalescingString(v types.AttributeValue) string {
	if s, ok := v.(*types.AttributeValueMemberS); ok {
		return s.Value
	}
	return ""
}

// coalescingDB counts every item written through it, by family and by
// key, the transactions, and the write capacity DynamoDB reports.
type coalescingDB struct {
	ddb.DB
	mu           sync.Mutex
	byClass      map[string]int
	byKey        map[string]int // pk|sk -> writes
	transactions int
	txItems      int // items written in transactions
	wcu          float64
}

func newCoalescingDB(db ddb.DB) *coalescingDB {
	return &coalescingDB{DB: db, byClass: map[string]int{}, byKey: map[string]int{}}
}

var _ ddb.DB = (*coalescingDB)(nil)

func (c *coalescingDB) wrote(key map[string]types.AttributeValue) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.byClass[coalescingClass(key)]++
	c.byKey[coalescingString(key[schema.AttrPK])+"|"+coalescingString(key[schema.AttrSK])]++
}

func (c *coalescingDB) consumed(cc ...types.ConsumedCapacity) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, x := range cc {
		c.wcu += aws.ToFloat64(x.CapacityUnits)
	}
}

func (c *coalescingDB) consumedOne(cc *types.ConsumedCapacity) {
	if cc != nil {
		c.consumed(*cc)
	}
}

func coalescingKeyOf(item map[string]types.AttributeValue) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{schema.AttrPK: item[schema.AttrPK], schema.AttrSK: item[schema.AttrSK]}
}

func (c *coalescingDB) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	in.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
	out, err := c.DB.PutItem(ctx, in, opts...)
	if err == nil {
		c.wrote(coalescingKeyOf(in.Item))
		c.consumedOne(out.ConsumedCapacity)
	}
	return out, err
}

func (c *coalescingDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	in.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
	out, err := c.DB.UpdateItem(ctx, in, opts...)
	if err == nil {
		c.wrote(in.Key)
		c.consumedOne(out.ConsumedCapacity)
	}
	return out, err
}

func (c *coalescingDB) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	in.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
	out, err := c.DB.DeleteItem(ctx, in, opts...)
	if err == nil {
		c.wrote(in.Key)
		c.consumedOne(out.ConsumedCapacity)
	}
	return out, err
}

func (c *coalescingDB) BatchWriteItem(ctx context.Context, in *dynamodb.BatchWriteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error) {
	in.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
	out, err := c.DB.BatchWriteItem(ctx, in, opts...)
	if err != nil {
		return out, err
	}
	for table, reqs := range in.RequestItems {
		unprocessed := map[string]bool{}
		for _, r := range out.UnprocessedItems[table] {
			unprocessed[coalescingWriteKey(r)] = true
		}
		for _, r := range reqs {
			if !unprocessed[coalescingWriteKey(r)] {
				c.wrote(coalescingWriteRequestKey(r))
			}
		}
	}
	c.consumed(out.ConsumedCapacity...)
	return out, nil
}

func coalescingWriteRequestKey(r types.WriteRequest) map[string]types.AttributeValue {
	if r.PutRequest != nil {
		return coalescingKeyOf(r.PutRequest.Item)
	}
	if r.DeleteRequest != nil {
		return r.DeleteRequest.Key
	}
	return nil
}

func coalescingWriteKey(r types.WriteRequest) string {
	k := coalescingWriteRequestKey(r)
	return coalescingString(k[schema.AttrPK]) + "|" + coalescingString(k[schema.AttrSK])
}

func (c *coalescingDB) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	in.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
	out, err := c.DB.TransactWriteItems(ctx, in, opts...)
	if err != nil {
		return out, err
	}
	c.mu.Lock()
	c.transactions++
	c.txItems += len(in.TransactItems)
	c.mu.Unlock()
	for _, it := range in.TransactItems {
		switch {
		case it.Put != nil:
			c.wrote(coalescingKeyOf(it.Put.Item))
		case it.Update != nil:
			c.wrote(it.Update.Key)
		case it.Delete != nil:
			c.wrote(it.Delete.Key)
		}
	}
	c.consumed(out.ConsumedCapacity...)
	return out, nil
}

func benchCoalescing(ctx context.Context, env *Env) (Section, error) {
	client := dynamodb.New(dynamodb.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(env.DynamoDB.Endpoint()),
		Credentials: credentials.NewStaticCredentialsProvider("local", "local", ""),
	})
	table := fmt.Sprintf("bench-coalescing-%d-Counters", time.Now().UnixNano())
	if _, err := client.CreateTable(ctx, tables.Input(schema.Counters, table)); err != nil {
		return Section{}, fmt.Errorf("create %s: %w", table, err)
	}
	defer func() {
		_, _ = client.DeleteTable(context.WithoutCancel(ctx), &dynamodb.DeleteTableInput{TableName: aws.String(table)})
	}()

	// A burst of favorites, each by its own player, within one minute.
	rng := rand.New(rand.NewPCG(11, 1))
	targets := coalescingTargets(rng, coalescingFavorites, coalescingCatalogue, coalescingZipfS)
	at := time.Date(2026, 11, 24, 18, 30, 0, 0, time.UTC)
	changes := make([]reactions.Change, len(targets))
	for i, t := range targets {
		changes[i] = reactions.Change{
			Ref:     reactions.Ref{UserID: fmt.Sprintf("player-%04d", i), Kind: reactions.Favorite, TargetID: t},
			Version: 1, Active: true, Delta: 1, Trend: true,
			At: at.Add(time.Duration(i) * 60 * time.Second / coalescingFavorites),
		}
	}

	// As the counter processor receives them: batches of its batch size.
	db := newCoalescingDB(client)
	counts := &dynamo.Counts{DB: db, Table: table}
	size := int(routes.CounterProcessor.BatchSize)
	batches, perBatchTargets, distinct := 0, 0, map[string]bool{}
	t := time.Now()
	for start := 0; start < len(changes); start += size {
		batch := changes[start:min(start+size, len(changes))]
		inBatch := map[string]bool{}
		for _, c := range batch {
			inBatch[c.TargetID] = true
			distinct[c.TargetID] = true
		}
		n, err := counts.Apply(ctx, batch, at.Add(2*time.Minute), nil)
		if err != nil {
			return Section{}, fmt.Errorf("apply %d favorites: %w", len(batch), err)
		}
		if n != len(batch) {
			return Section{}, fmt.Errorf("applied %d of %d favorites", n, len(batch))
		}
		batches++
		perBatchTargets += len(inBatch)
	}
	fmt.Fprintf(os.Stderr, "bench: coalescing: %d favorites applied in %d batches in %s\n", len(changes), batches, time.Since(t).Round(time.Millisecond))

	// The durable count must be right, or the figures mean nothing.
	hotKey := string(reactions.Favorite) + "#" + coalescingHotGame
	got, err := client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{schema.AttrPK: ddb.S(hotKey), schema.AttrSK: ddb.S(schema.CountersTotalSK)},
	})
	if err != nil {
		return Section{}, err
	}
	if c, ok := got.Item["count"].(*types.AttributeValueMemberN); !ok || c.Value != fmt.Sprint(coalescingFavorites/2) {
		return Section{}, fmt.Errorf("the hot game's durable count is %v, want %d", got.Item["count"], coalescingFavorites/2)
	}

	hot := db.byKey[hotKey+"|"+schema.CountersTotalSK]
	dedupe := db.byClass["marker"] + db.byClass["other dedupe"]
	// The floor writes each target's total and its two trending buckets
	// (hourly, daily: one hour here) once per batch, and a version per
	// favorite (one marker each), one WCU per item (each is under 1 KB).
	floorItems := perBatchTargets*3 + coalescingFavorites
	totalWrites := 0
	for _, n := range db.byClass {
		totalWrites += n
	}
	rows := []Row{
		{Name: "the hot game's total-item writes", Value: float64(hot), Floor: float64(batches), Unit: "writes",
			FloorName: "1 per batch", Note: fmt.Sprintf("%d of the %d favorites are the hot game's", coalescingFavorites/2, coalescingFavorites)},
		{Name: "total-item (count) writes", Value: float64(db.byClass["total"]), Floor: float64(perBatchTargets), Unit: "writes",
			FloorName: "1 per target per batch"},
		{Name: "trending bucket writes", Value: float64(db.byClass["bucket"]), Floor: float64(2 * perBatchTargets), Unit: "writes",
			FloorName: "hourly + daily per target per batch"},
		{Name: "dedupe writes", Value: float64(dedupe), Floor: float64(coalescingFavorites), Unit: "writes",
			FloorName: "1 per favorite",
			Note:      fmt.Sprintf("%d applied markers, %d other items (intents...)", db.byClass["marker"], db.byClass["other dedupe"])},
		{Name: "transactions", Value: float64(db.transactions), Floor: float64(batches), Unit: "transactions",
			FloorName: "1 per batch", Note: fmt.Sprintf("%d items written in transactions; DynamoDB takes at most %d per transaction", db.txItems, ddb.MaxTransact)},
		{Name: "all items written", Value: float64(totalWrites), Floor: float64(floorItems), Unit: "items",
			FloorName: "totals, buckets and a marker each, once"},
	}
	// DynamoDB Local's consumed capacity does not follow AWS's pricing of
	// transactions, so the capacity is counted by AWS's rule: 1 WCU per
	// item written (each is under 1 KB), 2 in a transaction.
	rows = append(rows, Row{Name: "write capacity", Value: float64(totalWrites + db.txItems), Floor: float64(floorItems), Unit: "WCU",
		FloorName: "the floor's items, 1 WCU each",
		Note:      fmt.Sprintf("by AWS's rule: 1 WCU per item under 1 KB, 2 in a transaction (%d of the %d items were); DynamoDB Local reported %s WCU", db.txItems, totalWrites, number(db.wcu))})
	return Section{
		Title: "Counter coalescing",
		Intro: fmt.Sprintf("Durable count writes for %d favorites, each by its own player within one minute: %d on one hot game, "+
			"the rest Zipf(s=%.1f) over %d other games (%d distinct targets in all), applied by the counter processor's durable path "+
			"(shared/reactions/dynamo Counts.Apply) in batches of its batch size (%d: %d batches, %d batch-targets) over DynamoDB Local. "+
			"Every written item is counted by its key: the total item (sk %q), trending buckets, applied markers (pk %q) and any other dedupe item. "+
			"The floor writes each target once per batch.",
			coalescingFavorites, coalescingFavorites/2, coalescingZipfS, coalescingCatalogue, len(distinct), size, batches, perBatchTargets,
			schema.CountersTotalSK, schema.CountersAppliedPrefix),
		Rows: rows,
	}, nil
}
