package dynamo_test

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/schema"
	"github.com/rallyhq/rally/shared/streaks"
	"github.com/rallyhq/rally/shared/streaks/dynamo"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// Tests date activity in March of next year: DynamoDB Local expires items
// by expires_at as DynamoDB does, so items dated in the past would vanish
// mid-test. Late March also brings the start of summer time in Europe.
var year = time.Now().Year() + 1

// t0 is the store's clock: it stamps idempotency records.
var t0 = time.Date(year, 3, 10, 9, 30, 0, 0, time.UTC)

// rig is a store over a fresh pair of tables in DynamoDB Local, with the
// raw client for looking at items and the capacity it reported.
type rig struct {
	store *dynamo.Store
	db    *dynamodb.Client
	names schema.Names
	units *capacityLog
	// endpoint is DynamoDB Local's, for a streams client.
	endpoint string
}

func newRig(t *testing.T) rig {
	t.Helper()
	db, names, endpoint := testenv.DynamoDB(t)
	units := &capacityLog{byOp: map[string]float64{}}
	return rig{
		store: &dynamo.Store{
			DB: db, Streaks: names.Of(schema.Streaks), Activity: names.Of(schema.Activity),
			Clock: clock.Fixed(t0), Capacity: units.add,
		},
		db: db, names: names, units: units, endpoint: endpoint,
	}
}

type capacityLog struct {
	mu   sync.Mutex
	byOp map[string]float64
}

func (c *capacityLog) add(op string, units float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.byOp[op] += units
}

func (c *capacityLog) of(op string) float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byOp[op]
}

// prepare builds the commit of one activity the way the service does: read
// the state and the day, apply the rules, record the event and receipt.
func (r rig) prepare(t *testing.T, user, key, region string, a streaks.Activity) streaks.Commit {
	t.Helper()
	ctx := context.Background()
	prev, _, err := r.store.Get(ctx, user)
	if err != nil {
		t.Fatal(err)
	}
	prev.UserID = user
	day, err := r.store.Day(ctx, user, streaks.DateFor(prev, a))
	if err != nil {
		t.Fatal(err)
	}
	next, out := streaks.Apply(prev, day, a)
	next.Region, next.PrevRegion = region, ""
	if prev.Region != region {
		next.PrevRegion = prev.Region
	}
	ev := streaks.Event{
		ID: streaks.EventID(user, key), UserID: user, Type: a.Type, Source: a.Source, OccurredAt: next.UpdatedAt,
		Date: out.Date, Points: out.Points, Timezone: out.Timezone, RejectedTimezone: out.RejectedTimezone,
	}
	body, err := json.Marshal(streaks.Receipt{
		EventID: ev.ID, PointsAwarded: out.Points, TotalPoints: next.TotalPoints, CurrentStreak: next.Current,
		LongestStreak: next.Longest, StreakExtended: out.Extended, ActivityDate: out.Date,
	})
	if err != nil {
		t.Fatal(err)
	}
	return streaks.Commit{Key: key, Hash: "hash-of-" + key, Prev: prev, Next: next, Event: ev,
		Day: day.With(a.Type, out.Points), Response: body}
}

// record prepares and commits one activity.
func (r rig) record(t *testing.T, user, key, region string, a streaks.Activity) streaks.Commit {
	t.Helper()
	c := r.prepare(t, user, key, region, a)
	if err := r.store.Commit(context.Background(), c); err != nil {
		t.Fatalf("commit %s/%s: %v", user, key, err)
	}
	return c
}

// stored is a state as the table keeps it: PrevRegion only travels with a
// change.
func stored(st streaks.State) streaks.State {
	st.PrevRegion = ""
	return st
}

func (r rig) mustGet(t *testing.T, user string) streaks.State {
	t.Helper()
	st, ok, err := r.store.Get(context.Background(), user)
	if err != nil || !ok {
		t.Fatalf("get %s: ok=%v err=%v", user, ok, err)
	}
	return st
}

// rawItem reads an item as DynamoDB holds it; nil when absent.
func (r rig) rawItem(t *testing.T, table schema.Table, key map[string]types.AttributeValue) map[string]types.AttributeValue {
	t.Helper()
	out, err := r.db.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String(r.names.Of(table)), Key: key, ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Item) == 0 {
		return nil
	}
	return out.Item
}

func streakKey(user string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{schema.AttrUserID: &types.AttributeValueMemberS{Value: user}}
}

func activityKey(user, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		schema.AttrUserID: &types.AttributeValueMemberS{Value: user}, schema.AttrSK: &types.AttributeValueMemberS{Value: sk},
	}
}

// activityKinds counts a player's Activity items by kind (evt, day, idem).
func (r rig) activityKinds(t *testing.T, user string) map[string]int {
	t.Helper()
	p := dynamodb.NewQueryPaginator(r.db, &dynamodb.QueryInput{
		TableName:                 aws.String(r.names.Of(schema.Activity)),
		KeyConditionExpression:    aws.String("user_id = :u"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":u": &types.AttributeValueMemberS{Value: user}},
		ConsistentRead:            aws.Bool(true),
	})
	kinds := map[string]int{}
	for p.HasMorePages() {
		page, err := p.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range page.Items {
			kind, _, _ := strings.Cut(it[schema.AttrSK].(*types.AttributeValueMemberS).Value, "#")
			kinds[kind]++
		}
	}
	return kinds
}

func equal(t *testing.T, what string, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got %+v\nwant %+v", what, got, want)
	}
}
