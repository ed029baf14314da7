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
// transaction counted with the state counted: the markers still to write
// once it commits (see applyOnce). It names users, so it lives only until
// its markers are written (milliseconds, unless the processor dies in
// between and the redelivered batch finishes it). It has no expiry: until
// it is finished its markers are the only record of what the counts hold,
// so whatever next touches one of its targets (a batch, an erasure, a
// reconcile) finishes it first.

// markerParallelism is how many markers of one intent are written at once.
const markerParallelism = 16

type intent struct {
	id string
	// edges holds, by target key ({kind}#{target}), each user's state
	// counted.
	edges map[string]map[string]intentEdge
	// moved holds, by target key, the trending buckets the transaction
	// moved (their sort keys): what a run finishing the intent of one that
	// crashed tells its Committed.
	moved map[string][]string
}

// touched is what the intent's transaction moved, as Committed is told.
func (in intent) touched() map[reactions.Target][]reactions.BucketRef {
	out := make(map[reactions.Target][]reactions.BucketRef, len(in.edges))
	for tk := range in.edges {
		t, ok := parseTargetKey(tk)
		if !ok {
			continue
		}
		out[t] = nil
		for _, sk := range in.moved[tk] {
			if b, ok := parseBucketSK(sk); ok {
				out[t] = append(out[t], b)
			}
		}
	}
	return out
}

// intentEdge is an edge's state as an intent stores it, compactly.
type intentEdge struct {
	Version int64  `json:"v"`
	Active  bool   `json:"a,omitempty"`
	Trend   bool   `json:"t,omitempty"`
	Since   string `json:"s,omitempty"`
	// Deleted: the edge is gone (an erasure), and its marker goes too.
	Deleted bool `json:"d,omitempty"`
}

// UnmarshalJSON also reads the version alone that intents held before
// they held states.
func (e *intentEdge) UnmarshalJSON(raw []byte) error {
	if len(raw) > 0 && raw[0] != '{' {
		return json.Unmarshal(raw, &e.Version)
	}
	type plain intentEdge
	return json.Unmarshal(raw, (*plain)(e))
}

func newIntentEdge(c reactions.Change) intentEdge {
	k := c.Counted()
	e := intentEdge{Version: k.Version, Active: k.Active, Trend: k.Trend, Deleted: c.Deleted}
	if k.Active {
		e.Since = ddb.FormatTime(k.Since)
	}
	return e
}

func (e intentEdge) counted() reactions.Counted {
	return reactions.Counted{Version: e.Version, Active: e.Active, Trend: e.Trend, Since: ddb.ParseTime(e.Since)}
}

type intentItem struct {
	PK    string `dynamodbav:"pk"`
	SK    string `dynamodbav:"sk"`
	Edges string `dynamodbav:"edges"`
	Moved string `dynamodbav:"moved,omitempty"`
}

func intentKey(id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{schema.AttrPK: ddb.S(schema.CountersIntentPrefix + id), schema.AttrSK: ddb.S(schema.CountersIntentSK)}
}

// newIntent lists the edges a transaction counts, under a new id.
func newIntent(tx []*unit) intent {
	in := intent{id: rand.Text(), edges: map[string]map[string]intentEdge{}, moved: map[string][]string{}}
	for _, u := range tx {
		users := map[string]intentEdge{}
		for _, r := range u.edges {
			users[r.ref.UserID] = newIntentEdge(r.next)
		}
		tk := targetKey(u.target)
		in.edges[tk] = users
		for b, d := range u.buckets {
			if d != 0 {
				in.moved[tk] = append(in.moved[tk], bucketSK(b))
			}
		}
	}
	return in
}

// item is the intent as stored; its edges are one JSON string, written and
// read back whole.
func (in intent) item(time.Time) map[string]types.AttributeValue {
	edges, err := json.Marshal(in.edges)
	if err != nil {
		panic(err) // maps of strings, numbers and booleans always encode
	}
	moved, err := json.Marshal(in.moved)
	if err != nil {
		panic(err)
	}
	item, err := attributevalue.MarshalMap(intentItem{
		PK: schema.CountersIntentPrefix + in.id, SK: schema.CountersIntentSK, Edges: string(edges), Moved: string(moved),
	})
	if err != nil {
		panic(err)
	}
	return item
}

// FinishPending finishes the intents the totals of targets name that are
// still there: what a processor committed for them but died before marking
// counted, telling committed (when not nil) what each moved. The erasure
// calls it before it reads a user's markers.
func (s *Counts) FinishPending(ctx context.Context, targets []reactions.Target, now time.Time, committed reactions.Committed) error {
	totals, err := s.readTotals(ctx, targets)
	if err != nil {
		return err
	}
	return s.finishNamed(ctx, totals, now, committed)
}

// finishNamed finishes the intents the totals name that are still there,
// telling committed what each moved first (the run that wrote it may
// have died before it told its own).
func (s *Counts) finishNamed(ctx context.Context, totals map[reactions.Target]total, now time.Time, committed reactions.Committed) error {
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
		if it.Moved != "" {
			if err := json.Unmarshal([]byte(it.Moved), &in.moved); err != nil {
				return fmt.Errorf("decode a pending intent's buckets: %w", err)
			}
		}
		if committed != nil {
			if err := committed(ctx, in.touched()); err != nil {
				return err
			}
		}
		if err := s.finish(ctx, in, now); err != nil {
			return fmt.Errorf("finish a pending intent: %w", err)
		}
	}
	return nil
}

// finish writes an intent's markers (deletes those of deleted edges),
// then deletes it. Each marker is written on condition it grows: a
// finisher that stalled until a newer transaction of the edge committed
// and wrote its marker changes nothing (BatchWriteItem, which takes no
// condition, could set it back). An intent is deleted only once all its
// markers are written.
func (s *Counts) finish(ctx context.Context, in intent, now time.Time) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(markerParallelism)
	for tk, users := range in.edges {
		for user, e := range users {
			g.Go(func() error {
				if e.Deleted {
					return s.deleteMarker(gctx, user, tk, e.Version)
				}
				return s.putMarker(gctx, user, tk, e.counted(), now)
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

// putMarker records the state counted for user's edge to the target
// keyed tk, unless the marker already holds a newer one.
func (s *Counts) putMarker(ctx context.Context, user, tk string, c reactions.Counted, now time.Time) error {
	return s.setMarker(ctx, user, tk, c, now, false)
}

// setMarker is putMarker; same also replaces a marker at the same version
// (a recompute rewriting one).
func (s *Counts) setMarker(ctx context.Context, user, tk string, c reactions.Counted, now time.Time, same bool) error {
	marker := map[string]types.AttributeValue{
		schema.AttrPK:  ddb.S(schema.CountersAppliedPrefix + user),
		schema.AttrSK:  ddb.S(tk),
		schema.AttrVer: ddb.N(c.Version),
	}
	if c.Active {
		marker[schema.AttrState] = ddb.S(string(reactions.Active))
		marker[schema.AttrTrend] = &types.AttributeValueMemberBOOL{Value: c.Trend}
		marker[schema.AttrCreatedAt] = ddb.S(ddb.FormatTime(c.Since))
	} else {
		marker[schema.AttrState] = ddb.S(string(reactions.Removed))
		marker[schema.TTL] = ddb.N(now.Add(inactiveRetention).Unix())
	}
	older := expression.Name(schema.AttrVer).LessThan(expression.Value(c.Version))
	if same {
		older = expression.Name(schema.AttrVer).LessThanEqual(expression.Value(c.Version))
	}
	grows := expression.Name(schema.AttrPK).AttributeNotExists().Or(older)
	_, err := s.DB.PutItem(ctx, ddb.PutInput(s.Table, marker, ddb.MustBuild(expression.NewBuilder().WithCondition(grows))))
	if err != nil && !ddb.IsConditionFailed(err) {
		return fmt.Errorf("write a marker: %w", err)
	}
	return nil
}

// deleteMarker deletes user's marker of the target keyed tk if it is
// older than ver (the edge's deletion).
func (s *Counts) deleteMarker(ctx context.Context, user, tk string, ver int64) error {
	older := expression.Name(schema.AttrVer).LessThan(expression.Value(ver))
	e := ddb.MustBuild(expression.NewBuilder().WithCondition(older))
	_, err := s.DB.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: aws.String(s.Table),
		Key: map[string]types.AttributeValue{
			schema.AttrPK: ddb.S(schema.CountersAppliedPrefix + user), schema.AttrSK: ddb.S(tk),
		},
		ConditionExpression: e.Condition(), ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values(),
	})
	if err != nil && !ddb.IsConditionFailed(err) {
		return fmt.Errorf("delete a marker: %w", err)
	}
	return nil
}

// decodeMarker reads a marker item: the edge it is of and the state
// counted. A marker from before markers held states reads as counted
// inactive (see the README's upgrade note: a recompute rewrites them).
func decodeMarker(it map[string]types.AttributeValue) (reactions.Ref, reactions.Counted, error) {
	var m struct {
		PK    string `dynamodbav:"pk"`
		SK    string `dynamodbav:"sk"`
		Ver   int64  `dynamodbav:"ver"`
		State string `dynamodbav:"state"`
		Trend bool   `dynamodbav:"trend"`
		Since string `dynamodbav:"created_at"`
	}
	if err := attributevalue.UnmarshalMap(it, &m); err != nil {
		return reactions.Ref{}, reactions.Counted{}, fmt.Errorf("decode a marker: %w", err)
	}
	t, _ := parseTargetKey(m.SK)
	ref := reactions.Ref{UserID: strings.TrimPrefix(m.PK, schema.CountersAppliedPrefix), Kind: t.Kind, TargetID: t.ID}
	c := reactions.Counted{Version: m.Ver}
	if m.State == string(reactions.Active) {
		c.Active, c.Trend, c.Since = true, m.Trend, ddb.ParseTime(m.Since)
	}
	return ref, c, nil
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
