package mirror_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/redis/go-redis/v9"

	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/shared/cachegen"
	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/obs"
	"github.com/rallyhq/rally/shared/reactions"
	"github.com/rallyhq/rally/shared/reactions/dynamo"
	"github.com/rallyhq/rally/shared/reactions/mirror"
	"github.com/rallyhq/rally/shared/schema"
	"github.com/rallyhq/rally/shared/streams"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// rig is the counter processor as deployed, over DynamoDB Local and a
// private redis-server, fed Reactions stream records by hand.
type rig struct {
	p      *reactions.CounterProcessor
	counts *dynamo.Counts
	rdb    *redis.Client
	seq    int
}

func newRig(t *testing.T) *rig {
	t.Helper()
	db, names, _ := testenv.DynamoDB(t)
	rdb := redis.NewClient(&redis.Options{Addr: testenv.Redis(t).Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	gen := &cachegen.Tracker{DB: db, Table: names.Of(schema.Counters), Redis: rdb, Scope: mirror.Scope, CheckEvery: time.Nanosecond}
	if err := gen.Advance(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	counts := &dynamo.Counts{DB: db, Table: names.Of(schema.Counters)}
	return &rig{
		p: &reactions.CounterProcessor{
			Decode: dynamo.ChangeFromRecord, Counts: counts, Mirror: mirror.New(rdb, gen), Gen: gen,
			Rebuilds: &reactions.Jobs{Counts: counts, Mirror: mirror.New(rdb, gen), Clock: clock.System{}},
			Progress: cachegen.Progress{Redis: rdb, Scope: mirror.Scope}, Clock: clock.System{},
			Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: obs.NewMetrics(io.Discard, "counter"),
		},
		counts: counts, rdb: rdb,
	}
}

// edgeImage is a Reactions edge item as the stream carries it.
type edgeImage struct {
	UserID    string `dynamodbav:"user_id"`
	Edge      string `dynamodbav:"edge"`
	Kind      string `dynamodbav:"kind"`
	TargetID  string `dynamodbav:"target_id"`
	State     string `dynamodbav:"state"`
	Ver       int64  `dynamodbav:"ver"`
	CreatedAt string `dynamodbav:"created_at"`
	UpdatedAt string `dynamodbav:"updated_at"`
}

func image(t *testing.T, user string, kind reactions.Kind, target string, ver int64) map[string]events.DynamoDBAttributeValue {
	t.Helper()
	at := time.Now().UTC().Format(time.RFC3339Nano)
	item, err := attributevalue.MarshalMap(edgeImage{
		UserID: user, Edge: string(kind) + "#" + target, Kind: string(kind), TargetID: target,
		State: string(reactions.Active), Ver: ver, CreatedAt: at, UpdatedAt: at,
	})
	if err != nil {
		t.Fatal(err)
	}
	return streams.FromItem(item)
}

// record is a stream record of an edge: inserted, or deleted.
type record struct {
	name     string
	old, new map[string]events.DynamoDBAttributeValue
}

func inserted(img map[string]events.DynamoDBAttributeValue) record {
	return record{name: "INSERT", new: img}
}

func deleted(img map[string]events.DynamoDBAttributeValue) record {
	return record{name: "REMOVE", old: img}
}

// process runs one batch of records.
func (r *rig) process(t *testing.T, batch ...record) {
	t.Helper()
	records := make([]events.DynamoDBEventRecord, len(batch))
	for i, c := range batch {
		r.seq++
		records[i] = events.DynamoDBEventRecord{EventName: c.name, Change: events.DynamoDBStreamRecord{
			OldImage: c.old, NewImage: c.new, SequenceNumber: fmt.Sprintf("%021d", r.seq),
			ApproximateCreationDateTime: events.SecondsEpochTime{Time: time.Now()},
		}}
	}
	if err := r.p.Process(context.Background(), records); err != nil {
		t.Fatal(err)
	}
}

func (r *rig) count(t *testing.T, target string) int64 {
	t.Helper()
	n, err := r.counts.Count(context.Background(), reactions.Target{Kind: reactions.Favorite, ID: target})
	if err != nil {
		t.Fatal(err)
	}
	return n.N
}

// A deleted edge (erasure) is dropped from its user's cached edges, the
// hash going with its last field, and is never written back, however often
// the deletion is delivered; it still counts -1 exactly once.
func TestADeletedEdgeLeavesItsUsersCachedEdges(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	const who = "erase.me:7"
	key := "rally:rx:" + who
	favorite := image(t, who, reactions.Favorite, "g1", 1)
	like := image(t, who, reactions.Like, "p1", 1)
	r.process(t, inserted(favorite), inserted(like), inserted(image(t, "ann", reactions.Favorite, "g1", 1)))
	if fields, _ := r.rdb.HKeys(ctx, key).Result(); len(fields) != 2 || r.count(t, "g1") != 2 {
		t.Fatalf("before erasure: cached %v, g1 counted %d", fields, r.count(t, "g1"))
	}

	r.process(t, deleted(favorite))
	if fields, _ := r.rdb.HKeys(ctx, key).Result(); len(fields) != 1 || fields[0] != "like#p1" {
		t.Fatalf("after the favorite's deletion: cached %v, want like#p1 alone", fields)
	}
	if n := r.count(t, "g1"); n != 1 {
		t.Fatalf("g1 counted %d after one of two favorites was deleted, want 1", n)
	}

	r.process(t, deleted(like))
	if n, _ := r.rdb.Exists(ctx, key).Result(); n != 0 {
		t.Fatalf("%s still exists after its last edge was deleted: %v", key, r.rdb.HGetAll(ctx, key).Val())
	}

	// The erasure deletes the key once the deletions are counted; a
	// redelivered batch, deletions and all, neither brings it back nor
	// counts again.
	if err := r.rdb.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	r.process(t, inserted(favorite), deleted(favorite), deleted(like))
	if n, _ := r.rdb.Exists(ctx, key).Result(); n != 0 {
		t.Fatalf("a redelivered deletion wrote %s back: %v", key, r.rdb.HGetAll(ctx, key).Val())
	}
	if n := r.count(t, "g1"); n != 1 {
		t.Fatalf("g1 counted %d after redelivery, want 1", n)
	}
}

// Flips are counted per edge and clock hour in Redis, which every instance
// shares; while Redis is unreachable (or after it lost its data) each
// instance still has the changes it made itself, so the limit loosens to
// what one instance saw but never goes. An erasure deletes the user's
// counts, the one key named by them.
func TestFlipCountsArePerEdgeAndHourAndOutliveARedisOutage(t *testing.T) {
	ctx := context.Background()
	srv := testenv.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	m := mirror.New(rdb, nil)
	one, another := &reactions.Flips{Store: m}, &reactions.Flips{Store: m} // two instances
	g1 := reactions.Ref{UserID: "flip.per:1", Kind: reactions.Favorite, TargetID: "g1"}
	g2 := reactions.Ref{UserID: g1.UserID, Kind: reactions.Favorite, TargetID: "g2"}
	like := reactions.Ref{UserID: g1.UserID, Kind: reactions.Like, TargetID: "g1"}
	hour := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	record := func(f *reactions.Flips, ref reactions.Ref, at time.Time, redisUp bool) {
		t.Helper()
		if err := f.Record(ctx, ref, at); (err == nil) != redisUp {
			t.Fatalf("record a flip of %s with redis up=%v: %v", ref, redisUp, err)
		}
	}
	count := func(f *reactions.Flips, ref reactions.Ref, at time.Time, want int64, redisUp bool) {
		t.Helper()
		n, err := f.Count(ctx, ref, at)
		if n != want || (err == nil) != redisUp {
			t.Fatalf("flips of %s at %s: %d (%v), want %d with redis up=%v", ref, at.Format("15:04"), n, err, want, redisUp)
		}
	}
	for i := 0; i < 6; i++ {
		record(one, g1, hour.Add(time.Duration(i)*time.Minute), true)
		record(another, g1, hour.Add(time.Duration(30+i)*time.Minute), true)
	}
	record(one, g2, hour, true)
	count(one, g1, hour.Add(59*time.Minute), 12, true)
	count(another, g1, hour, 12, true)
	count(one, g2, hour, 1, true)
	count(one, like, hour, 0, true)
	count(one, g1, hour.Add(time.Hour), 0, true) // a new hour
	record(one, g1, hour.Add(time.Hour), true)
	count(another, g1, hour.Add(time.Hour+time.Minute), 1, true)

	srv.Stop()
	record(one, g1, hour.Add(time.Hour+2*time.Minute), false)
	count(one, g1, hour.Add(time.Hour+3*time.Minute), 2, false)
	count(another, g1, hour.Add(time.Hour+3*time.Minute), 0, false)
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// Redis came back empty; each instance still knows its own.
	count(one, g1, hour.Add(time.Hour+4*time.Minute), 2, true)

	record(one, g1, hour.Add(time.Hour+5*time.Minute), true)
	key := "rally:flips:" + g1.UserID
	if n, _ := rdb.Exists(ctx, key).Result(); n != 1 {
		t.Fatalf("%s does not exist", key)
	}
	if err := m.ForgetFlips(ctx, g1.UserID); err != nil {
		t.Fatal(err)
	}
	if n, _ := rdb.Exists(ctx, key).Result(); n != 0 {
		t.Fatalf("%s survived the erasure", key)
	}
}
