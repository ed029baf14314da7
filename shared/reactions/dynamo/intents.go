package dynamo

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"strings"
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

// An intent is written in a counter transaction and lists every edge the
// transaction counted with the version counted: the markers still to
// write once it commits (see applyOnce). It names users, so it lives only
// until its markers are written (milliseconds, unless the processor dies
// in between and the redelivered batch finishes it) and expires like a
// marker if nothing touches its targets again.

// markerParallelism is how many markers of one intent are written at once.
const markerParallelism = 16

type intent struct {
	id string
	// edges holds, by target key ({kind}#{target}), each user's version
	// counted.
	edges map[string]map[string]int64
}

type intentItem struct {
	PK        string `dynamodbav:"pk"`
	SK        string `dynamodbav:"sk"`
	Edges     string `dynamodbav:"edges"`
	ExpiresAt int64  `dynamodbav:"expires_at"`
}

func intentKey(id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{schema.AttrPK: ddb.S(schema.CountersIntentPrefix + id), schema.AttrSK: ddb.S(schema.CountersIntentSK)}
}

// newIntent lists the edges a transaction counts, under a new id.
func newIntent(tx []*unit) intent {
	in := intent{id: rand.Text(), edges: map[string]map[string]int64{}}
	for _, u := range tx {
		users := map[string]int64{}
		for _, r := range u.edges {
			users[r.ref.UserID] = r.maxVersion()
		}
		in.edges[targetKey(u.target)] = users
	}
	return in
}

// item is the intent as stored; its edges are one JSON string, written and
// read back whole.
func (in intent) item(now time.Time) map[string]types.AttributeValue {
	edges, err := json.Marshal(in.edges)
	if err != nil {
		panic(err) // maps of strings and numbers always encode
	}
	item, err := attributevalue.MarshalMap(intentItem{
		PK: schema.CountersIntentPrefix + in.id, SK: schema.CountersIntentSK,
		Edges: string(edges), ExpiresAt: now.Add(markerRetention).Unix(),
	})
	if err != nil {
		panic(err)
	}
	return item
}

// FinishPending finishes the intents the totals of targets name that are
// still there: what a processor committed for them but died before marking
// counted. The erasure calls it before it reads a user's markers.
func (s *Counts) FinishPending(ctx context.Context, targets []reactions.Target, now time.Time) error {
	totals, err := s.readTotals(ctx, targets)
	if err != nil {
		return err
	}
	return s.finishNamed(ctx, totals, now)
}

// finishNamed finishes the intents the totals name that are still there.
func (s *Counts) finishNamed(ctx context.Context, totals map[reactions.Target]total, now time.Time) error {
	named := map[string]bool{}
	var keys []map[string]types.AttributeValue
	for _, t := range totals {
		if t.intent != "" && !named[t.intent] && !s.finished.has(t.intent) {
			named[t.intent] = true
			keys = append(keys, intentKey(t.intent))
		}
	}
	if len(keys) == 0 {
		return nil
	}
	items, err := ddb.BatchGet(ctx, s.DB, s.Table, keys, true)
	if err != nil {
		return fmt.Errorf("read pending intents: %w", err)
	}
	for _, raw := range items {
		var it intentItem
		if err := attributevalue.UnmarshalMap(raw, &it); err != nil {
			return fmt.Errorf("decode a pending intent: %w", err)
		}
		in := intent{id: strings.TrimPrefix(it.PK, schema.CountersIntentPrefix)}
		if err := json.Unmarshal([]byte(it.Edges), &in.edges); err != nil {
			return fmt.Errorf("decode a pending intent's edges: %w", err)
		}
		if err := s.finish(ctx, in, now); err != nil {
			return fmt.Errorf("finish a pending intent: %w", err)
		}
	}
	return nil
}

// finish writes an intent's markers, then deletes it. Each marker is
// written on condition it grows: a finisher that stalled until a newer
// transaction of the edge committed and wrote its marker changes nothing
// (BatchWriteItem, which takes no condition, could set it back). An
// intent is deleted only once all its markers are written.
func (s *Counts) finish(ctx context.Context, in intent, now time.Time) error {
	expires := ddb.N(now.Add(markerRetention).Unix())
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(markerParallelism)
	for tk, users := range in.edges {
		for user, ver := range users {
			g.Go(func() error {
				marker := map[string]types.AttributeValue{
					schema.AttrPK:  ddb.S(schema.CountersAppliedPrefix + user),
					schema.AttrSK:  ddb.S(tk),
					schema.AttrVer: ddb.N(ver),
					schema.TTL:     expires,
				}
				grows := expression.Name(schema.AttrPK).AttributeNotExists().
					Or(expression.Name(schema.AttrVer).LessThan(expression.Value(ver)))
				_, err := s.DB.PutItem(gctx, ddb.PutInput(s.Table, marker, ddb.MustBuild(expression.NewBuilder().WithCondition(grows))))
				if err != nil && !ddb.IsConditionFailed(err) {
					return fmt.Errorf("write a marker: %w", err)
				}
				return nil
			})
		}
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if _, err := s.DB.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(s.Table), Key: intentKey(in.id)}); err != nil {
		return fmt.Errorf("delete an intent: %w", err)
	}
	s.finished.add(in.id)
	return nil
}

// finishedIntentsKept bounds how many finished intent ids an instance
// remembers; forgetting one costs only a read that finds it gone.
const finishedIntentsKept = 4096

// finishedIntents remembers the newest finished intent ids.
type finishedIntents struct {
	mu    sync.Mutex
	ids   map[string]bool
	order []string // oldest first
}

func (f *finishedIntents) has(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ids[id]
}

func (f *finishedIntents) add(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ids == nil {
		f.ids = map[string]bool{}
	}
	if f.ids[id] {
		return
	}
	if len(f.order) == finishedIntentsKept {
		delete(f.ids, f.order[0])
		f.order = f.order[1:]
	}
	f.ids[id] = true
	f.order = append(f.order, id)
}
