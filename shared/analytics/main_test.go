package analytics_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"

	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/shared/analytics"
	lbdynamo "github.com/rallyhq/rally/shared/leaderboards/dynamo"
	rdynamo "github.com/rallyhq/rally/shared/reactions/dynamo"
	"github.com/rallyhq/rally/shared/schema"
	"github.com/rallyhq/rally/shared/streaks"
	sdynamo "github.com/rallyhq/rally/shared/streaks/dynamo"
	"github.com/rallyhq/rally/shared/streamread"
	"github.com/rallyhq/rally/shared/streams"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// decoders are the decoders the shipper is given: each source table's own
// store reads its records.
var decoders = analytics.Decoders{
	Reactions:   rdynamo.ChangeFromRecord,
	Submissions: lbdynamo.SubmissionFromRecord,
	Activity:    sdynamo.EventFromRecord,
}

// year dates the tests' items: DynamoDB Local expires items by expires_at
// as DynamoDB does, so items dated in the past could vanish mid-test.
var year = time.Now().Year() + 1

// rig is a fresh set of tables in DynamoDB Local and a reader of their
// streams.
type rig struct {
	db       *dynamodb.Client
	names    schema.Names
	streams  *dynamodbstreams.Client
	endpoint string
}

func newRig(t testing.TB) rig {
	t.Helper()
	db, names, endpoint := testenv.DynamoDB(t)
	return rig{db: db, names: names, streams: testenv.StreamsClient(endpoint), endpoint: endpoint}
}

func (r rig) pseudonyms() *analytics.Pseudonyms {
	return &analytics.Pseudonyms{DB: r.db, Table: r.names.Of(schema.AnalyticsSecrets), Legacy: r.names.Of(schema.Players)}
}

func (r rig) shipped() *analytics.Shipped {
	return &analytics.Shipped{DB: r.db, Table: r.names.Of(schema.Counters)}
}

// tail reads a table's stream as the local poller delivers it to Lambda,
// remembering what it returned before.
type tail struct {
	r     rig
	table schema.Table
	seen  int
}

func (r rig) tail(table schema.Table) *tail { return &tail{r: r, table: table} }

// next returns the records written since the last call, in order.
func (tl *tail) next(t testing.TB) []events.DynamoDBEventRecord {
	t.Helper()
	ctx := context.Background()
	arn, err := streamread.StreamARN(ctx, tl.r.db, tl.r.names.Of(tl.table))
	if err != nil {
		t.Fatal(err)
	}
	shards, err := streamread.All(ctx, tl.r.streams, arn, testenv.Region)
	if err != nil {
		t.Fatal(err)
	}
	var all []events.DynamoDBEventRecord
	for _, sh := range shards {
		all = append(all, sh.Records...)
	}
	fresh := all[tl.seen:]
	tl.seen = len(all)
	return fresh
}

// arn is a stream ARN of table as Lambda names it.
func arn(names schema.Names, table schema.Table) string {
	return "arn:aws:dynamodb:us-east-1:123456789012:table/" + names.Of(table) + "/stream/2026-11-22T00:00:00.000"
}

// record is a hand-built stream record of table, in the shape Lambda
// delivers: seq numbers it and names its eventID.
func record(names schema.Names, table schema.Table, seq int, name string, newImage, oldImage map[string]types.AttributeValue) events.DynamoDBEventRecord {
	return events.DynamoDBEventRecord{
		EventID:        fmt.Sprintf("ev-%s-%d", table.Name, seq),
		EventName:      name,
		EventSource:    "aws:dynamodb",
		EventSourceArn: arn(names, table),
		AWSRegion:      "us-east-1",
		Change: events.DynamoDBStreamRecord{
			ApproximateCreationDateTime: events.SecondsEpochTime{Time: time.Date(year, 3, 10, 9, 0, 0, 0, time.UTC)},
			SequenceNumber:              fmt.Sprintf("%021d", seq),
			NewImage:                    streams.FromItem(newImage),
			OldImage:                    streams.FromItem(oldImage),
			StreamViewType:              "NEW_AND_OLD_IMAGES",
		},
	}
}

func s(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
func n(v int64) types.AttributeValue  { return &types.AttributeValueMemberN{Value: fmt.Sprint(v)} }

// activityItem is an Activity evt# item as streaks/dynamo writes it (the
// store's own key), for records no store would write (missing attributes).
func activityItem(user string, at time.Time, id, eventType string, points, streak int64, region string) map[string]types.AttributeValue {
	it := map[string]types.AttributeValue{
		"user_id": s(user), "sk": s(sdynamo.EventSK(streaks.Event{ID: id, OccurredAt: at})), "event_id": s(id),
		"event_type": s(eventType), "source": s("mobile_app"), "occurred_at": s(at.UTC().Format(time.RFC3339Nano)),
		"date": s(at.UTC().Format("2006-01-02")), "points": n(points), "timezone": s("UTC"), "streak": n(streak),
		"expires_at": n(at.Add(90 * 24 * time.Hour).Unix()),
	}
	if region != "" {
		it["region"] = s(region)
	}
	return it
}

// edgeItem is a Reactions item as reactions/dynamo writes it.
func edgeItem(user, kind, target, state string, ver int64, at time.Time) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		"user_id": s(user), "edge": s(kind + "#" + target), "kind": s(kind), "target_id": s(target),
		"state": s(state), "ver": n(ver), "created_at": s(at.UTC().Format(time.RFC3339Nano)),
		"updated_at": s(at.UTC().Format(time.RFC3339Nano)),
	}
}

// scoreEventItem is a ScoreEvents item as leaderboards/dynamo writes it.
func scoreEventItem(board, player, match string, score int64, at time.Time) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		"pk": s(lbdynamo.EventKey(board, player)), "match_id": s(match), "board": s(board), "player_id": s(player),
		"period": s(at.UTC().Format("2006-01-02")), "score": n(score), "occurred_at": s(at.UTC().Format(time.RFC3339Nano)),
		"recorded_at": s(at.UTC().Format(time.RFC3339Nano)), "expires_at": n(at.Add(90 * 24 * time.Hour).Unix()),
	}
}

func equal(t testing.TB, what string, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got %+v\nwant %+v", what, got, want)
	}
}

func ptr[T any](v T) *T { return &v }
