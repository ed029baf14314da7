package analytics_test

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/shared/analytics"
	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/leaderboards"
	lbdynamo "github.com/rallyhq/rally/shared/leaderboards/dynamo"
	"github.com/rallyhq/rally/shared/reactions"
	rdynamo "github.com/rallyhq/rally/shared/reactions/dynamo"
	"github.com/rallyhq/rally/shared/schema"
	"github.com/rallyhq/rally/shared/streaks"
	sdynamo "github.com/rallyhq/rally/shared/streaks/dynamo"
)

// mapped is what a test expects of one mapped record.
type mapped struct {
	Type, User string
	Event      analytics.Event
}

// mapAll maps records of table, keeping the events (and checking what
// every event has in common).
func mapAll(t *testing.T, names schema.Names, recs []events.DynamoDBEventRecord) []mapped {
	t.Helper()
	var out []mapped
	for _, rec := range recs {
		source, ok := analytics.SourceOf(rec.EventSourceArn, names)
		if !ok {
			t.Fatalf("record %s: source %s not resolved", rec.EventID, rec.EventSourceArn)
		}
		ev, user, ok, err := decoders.Map(source, rec)
		if err != nil {
			t.Fatalf("%s %s record: %v", source.Name, rec.EventName, err)
		}
		if !ok {
			continue
		}
		if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(ev.EventID) {
			t.Fatalf("event id %q is not 32 hex characters", ev.EventID)
		}
		if ev.SchemaVersion != analytics.SchemaVersion || ev.OccurredAt.Location() != time.UTC ||
			!ev.OccurredAt.Equal(ev.OccurredAt.Truncate(time.Millisecond)) || ev.UserPID != "" {
			t.Fatalf("event %+v: want schema version, UTC ms time, no PID yet", ev)
		}
		again, _, _, _ := decoders.Map(source, rec)
		equal(t, "the same record mapped twice", again, ev)
		out = append(out, mapped{Type: ev.EventType, User: user, Event: ev})
	}
	return out
}

func ms(t time.Time) time.Time { return t.UTC().Truncate(time.Millisecond) }

// Favorites and likes are events when an edge becomes ACTIVE (created, or
// re-added after removal) or stops being ACTIVE; a repeated add writes
// nothing, an unchanged edge and an erased edge are no events.
func TestMapReactionsFromTheRealStream(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ctx := context.Background()
	edges := &rdynamo.Edges{DB: r.db, Table: r.names.Of(schema.Reactions)}
	tl := r.tail(schema.Reactions)
	at := time.Date(year, 3, 10, 9, 0, 0, 123456789, time.UTC)
	fav := reactions.Ref{UserID: "ann", Kind: reactions.Favorite, TargetID: "g1"}
	like := reactions.Ref{UserID: "bob", Kind: reactions.Like, TargetID: "p9"}
	step := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	add := func(ref reactions.Ref, at time.Time) {
		_, _, err := edges.Add(ctx, ref, at, reactions.InTrending)
		step(err)
	}
	remove := func(ref reactions.Ref, at time.Time) { _, _, err := edges.Remove(ctx, ref, at); step(err) }

	add(fav, at)                       // INSERT ACTIVE
	add(fav, at.Add(time.Minute))      // already ACTIVE: no write
	remove(fav, at.Add(2*time.Minute)) // ACTIVE → REMOVED
	remove(fav, at.Add(3*time.Minute)) // already REMOVED: no write
	add(fav, at.Add(4*time.Minute))    // REMOVED → ACTIVE
	_, err := edges.Toggle(ctx, like, at.Add(5*time.Minute), reactions.InTrending, nil)
	step(err) // INSERT ACTIVE
	_, err = edges.Toggle(ctx, like, at.Add(6*time.Minute), reactions.InTrending, nil)
	step(err) // ACTIVE → REMOVED
	key := map[string]types.AttributeValue{schema.AttrUserID: s("ann"), schema.AttrEdge: s("favorite#g1")}
	_, err = r.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{ // a MODIFY that changes no state
		TableName: aws.String(r.names.Of(schema.Reactions)), Key: key,
		UpdateExpression: aws.String("SET ver = ver + :one"), ExpressionAttributeValues: map[string]types.AttributeValue{":one": n(1)},
	})
	step(err)
	_, err = r.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(r.names.Of(schema.Reactions)), Key: key}) // erasure
	step(err)

	recs := tl.next(t)
	equal(t, "stream operations", ops(recs), []string{"INSERT", "MODIFY", "MODIFY", "INSERT", "MODIFY", "MODIFY", "REMOVE"})
	got := mapAll(t, r.names, recs)
	want := []mapped{
		{analytics.FavoriteAdded, "ann", analytics.Event{GameID: ptr("g1"), OccurredAt: ms(at)}},
		{analytics.FavoriteRemoved, "ann", analytics.Event{GameID: ptr("g1"), OccurredAt: ms(at.Add(2 * time.Minute))}},
		{analytics.FavoriteAdded, "ann", analytics.Event{GameID: ptr("g1"), OccurredAt: ms(at.Add(4 * time.Minute))}},
		{analytics.LikeAdded, "bob", analytics.Event{PostID: ptr("p9"), OccurredAt: ms(at.Add(5 * time.Minute))}},
		{analytics.LikeRemoved, "bob", analytics.Event{PostID: ptr("p9"), OccurredAt: ms(at.Add(6 * time.Minute))}},
	}
	equal(t, "events", strip(got), want)
	ids := map[string]bool{}
	for _, m := range got {
		ids[m.Event.EventID] = true
	}
	if len(ids) != len(got) {
		t.Fatalf("event ids repeat across records: %v", ids)
	}
}

// Every accepted submission is a score.submitted event with the board,
// period, score and the match's own time; a repeated match id writes
// nothing and an expired or erased submission is no event.
func TestMapScoreSubmissionsFromTheRealStream(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ctx := context.Background()
	now := time.Now().UTC()
	scores := &lbdynamo.Scores{DB: r.db, Table: r.names.Of(schema.Scores), Events: r.names.Of(schema.ScoreEvents), Clock: clock.Fixed(now)}
	d := leaderboards.Definition{ID: "arena", Policy: leaderboards.Best, Order: leaderboards.Desc, Reset: leaderboards.Daily,
		TieBreak: leaderboards.Earliest, Status: leaderboards.Active, MaxN: 100, Timezone: "UTC"}
	tl := r.tail(schema.ScoreEvents)
	at := time.Date(year, 3, 10, 9, 0, 0, 987654321, time.UTC)
	submit := func(player, match string, score int64, at time.Time) {
		t.Helper()
		m := leaderboards.Match{PlayerID: player, MatchID: match, Score: score, OccurredAt: at}
		_, err := scores.Submit(ctx, d, d.PeriodAt(at), m, func(cur *leaderboards.Score) (leaderboards.Score, bool, error) {
			return leaderboards.Apply(d, cur, m)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	submit("cat", "m1", 120, at)
	submit("cat", "m2", 90, at.Add(time.Hour)) // lower: the score stays, the submission is still an event
	submit("cat", "m1", 120, at)               // repeated match id
	submit("dan", "m3", -5, at.Add(2*time.Hour))
	_, err := r.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: aws.String(r.names.Of(schema.ScoreEvents)),
		Key:       map[string]types.AttributeValue{schema.AttrPK: s(lbdynamo.EventKey("arena", "cat")), schema.AttrMatchID: s("m1")},
	})
	if err != nil {
		t.Fatal(err)
	}
	recs := tl.next(t)
	equal(t, "stream operations", ops(recs), []string{"INSERT", "INSERT", "INSERT", "REMOVE"})
	period := at.Format("2006-01-02")
	equal(t, "events", strip(mapAll(t, r.names, recs)), []mapped{
		{analytics.ScoreSubmitted, "cat", analytics.Event{BoardID: ptr("arena"), Period: ptr(period), Score: ptr[int64](120), OccurredAt: ms(at)}},
		{analytics.ScoreSubmitted, "cat", analytics.Event{BoardID: ptr("arena"), Period: ptr(period), Score: ptr[int64](90), OccurredAt: ms(at.Add(time.Hour))}},
		{analytics.ScoreSubmitted, "dan", analytics.Event{BoardID: ptr("arena"), Period: ptr(period), Score: ptr[int64](-5), OccurredAt: ms(at.Add(2 * time.Hour))}},
	})
}

// Each recorded activity is one activity.recorded event from its evt#
// item; the day's totals and the idempotency record written in the same
// transaction are not events.
func TestMapActivityFromTheRealStream(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	store := &sdynamo.Store{DB: r.db, Streaks: r.names.Of(schema.Streaks), Activity: r.names.Of(schema.Activity), Clock: clock.Fixed(time.Now())}
	tl := r.tail(schema.Activity)
	at := time.Date(year, 3, 10, 22, 30, 0, 555555555, time.UTC)
	recordActivity(t, store, "eve", "k1", "eu", streaks.Activity{Type: streaks.DailyOpen, Source: streaks.MobileApp, Timezone: "Asia/Tokyo", At: at})
	recordActivity(t, store, "eve", "k2", "eu", streaks.Activity{Type: streaks.MatchWon, Source: streaks.Console, At: at.Add(time.Hour)})
	recordActivity(t, store, "fay", "k1", "", streaks.Activity{Type: streaks.MatchWon, Source: streaks.Web, At: at.Add(30 * time.Hour)})
	recs := tl.next(t)
	counts := map[string]int{}
	for _, op := range ops(recs) {
		counts[op]++
	}
	// Three transactions of an idempotency record, an event and the day's
	// totals (the second one on the same date).
	equal(t, "stream operations", counts, map[string]int{"INSERT": 8, "MODIFY": 1})
	equal(t, "events", strip(mapAll(t, r.names, recs)), []mapped{
		{analytics.ActivityRecorded, "eve", analytics.Event{ActivityType: ptr("DAILY_OPEN"), Points: ptr[int64](10), Streak: ptr[int64](1),
			Source: ptr("mobile_app"), ActivityDate: ptr(at.In(tokyo(t)).Format("2006-01-02")), Region: ptr("eu"), OccurredAt: ms(at)}},
		{analytics.ActivityRecorded, "eve", analytics.Event{ActivityType: ptr("MATCH_WON"), Points: ptr[int64](20), Streak: ptr[int64](1),
			Source: ptr("console"), ActivityDate: ptr(at.In(tokyo(t)).Format("2006-01-02")), Region: ptr("eu"), OccurredAt: ms(at.Add(time.Hour))}},
		{analytics.ActivityRecorded, "fay", analytics.Event{ActivityType: ptr("MATCH_WON"), Points: ptr[int64](20), Streak: ptr[int64](1),
			Source: ptr("web"), ActivityDate: ptr(at.Add(30 * time.Hour).Format("2006-01-02")), OccurredAt: ms(at.Add(30 * time.Hour))}},
	})
}

func tokyo(t *testing.T) *time.Location {
	loc, err := time.LoadLocation("Asia/Tokyo")
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// recordActivity commits one activity the way streaks.Service does.
func recordActivity(t *testing.T, store *sdynamo.Store, user, key, region string, a streaks.Activity) {
	t.Helper()
	ctx := context.Background()
	prev, _, err := store.Get(ctx, user)
	if err != nil {
		t.Fatal(err)
	}
	prev.UserID = user
	day, err := store.Day(ctx, user, streaks.DateFor(prev, a))
	if err != nil {
		t.Fatal(err)
	}
	next, out := streaks.Apply(prev, day, a)
	next.Region = region
	ev := streaks.Event{
		ID: streaks.EventID(user, key), UserID: user, Type: a.Type, Source: a.Source, OccurredAt: next.UpdatedAt,
		Date: out.Date, Points: out.Points, Timezone: out.Timezone, Streak: next.Current, Region: region,
	}
	body, _ := json.Marshal(map[string]string{"event_id": ev.ID})
	c := streaks.Commit{Key: key, Hash: "h-" + key, Prev: prev, Next: next, Event: ev, Day: day.With(a.Type, out.Points), Response: body}
	if err := store.Commit(ctx, c); err != nil {
		t.Fatal(err)
	}
}

// The event id depends on the source and the record's eventID only: a
// redelivered record keeps it, another record or table gets another.
func TestEventIDsAreDeterministicPerRecord(t *testing.T) {
	t.Parallel()
	names := schema.NamesFromEnv("Rally-dev-")
	at := time.Date(year, 3, 10, 9, 0, 0, 0, time.UTC)
	rec := record(names, schema.Activity, 1, "INSERT", activityItem("u", at, "e1", "DAILY_OPEN", 10, 1, ""), nil)
	a, _, _, err := decoders.Map(schema.Activity, rec)
	if err != nil {
		t.Fatal(err)
	}
	redelivered := rec
	redelivered.Change.SequenceNumber = "999"
	redelivered.Change.ApproximateCreationDateTime.Time = at.Add(time.Hour)
	b, _, _, _ := decoders.Map(schema.Activity, redelivered)
	if a.EventID != b.EventID {
		t.Fatalf("a redelivered record changed its event id: %s → %s", a.EventID, b.EventID)
	}
	other := rec
	other.EventID = "ev-Activity-2"
	c, _, _, _ := decoders.Map(schema.Activity, other)
	if c.EventID == a.EventID {
		t.Fatal("two records share an event id")
	}
	score := record(names, schema.ScoreEvents, 1, "INSERT", scoreEventItem("b", "u", "m", 1, at), nil)
	score.EventID = rec.EventID
	d, _, _, _ := decoders.Map(schema.ScoreEvents, score)
	if d.EventID == a.EventID {
		t.Fatal("records of two tables with the same eventID share an event id")
	}
}

// Without its own time an event takes the record's creation time.
func TestMapFallsBackToTheRecordTime(t *testing.T) {
	t.Parallel()
	names := schema.NamesFromEnv("Rally-dev-")
	item := activityItem("u", time.Date(year, 3, 10, 9, 0, 0, 0, time.UTC), "e1", "DAILY_OPEN", 10, 1, "")
	delete(item, "occurred_at")
	rec := record(names, schema.Activity, 1, "INSERT", item, nil)
	ev, _, ok, err := decoders.Map(schema.Activity, rec)
	if err != nil || !ok {
		t.Fatalf("ok=%v err=%v", ok, err)
	}
	equal(t, "occurred_at", ev.OccurredAt, rec.Change.ApproximateCreationDateTime.UTC())
}

// A record of a source table that cannot be read stops the batch (an
// error), while records that are simply no events do not.
func TestMapRefusesWhatItCannotRead(t *testing.T) {
	t.Parallel()
	names := schema.NamesFromEnv("Rally-dev-")
	at := time.Date(year, 3, 10, 9, 0, 0, 0, time.UTC)
	without := func(item map[string]types.AttributeValue, attr string) map[string]types.AttributeValue {
		delete(item, attr)
		return item
	}
	with := func(item map[string]types.AttributeValue, attr string, v types.AttributeValue) map[string]types.AttributeValue {
		item[attr] = v
		return item
	}
	for name, tc := range map[string]struct {
		table schema.Table
		rec   events.DynamoDBEventRecord
	}{
		"unknown reaction kind": {schema.Reactions, record(names, schema.Reactions, 1, "INSERT", edgeItem("u", "poke", "x", "ACTIVE", 1, at), nil)},
		"edge without a user":   {schema.Reactions, record(names, schema.Reactions, 1, "INSERT", without(edgeItem("u", "like", "x", "ACTIVE", 1, at), "user_id"), nil)},
		"edge with a text ver":  {schema.Reactions, record(names, schema.Reactions, 1, "INSERT", with(edgeItem("u", "like", "x", "ACTIVE", 1, at), "ver", s("one")), nil)},
		"score without board":   {schema.ScoreEvents, record(names, schema.ScoreEvents, 1, "INSERT", without(scoreEventItem("b", "u", "m", 1, at), "board"), nil)},
		"score without score":   {schema.ScoreEvents, record(names, schema.ScoreEvents, 1, "INSERT", without(scoreEventItem("b", "u", "m", 1, at), "score"), nil)},
		"score with a bad time": {schema.ScoreEvents, record(names, schema.ScoreEvents, 1, "INSERT", with(scoreEventItem("b", "u", "m", 1, at), "occurred_at", s("yesterday")), nil)},
		"unknown activity kind": {schema.Activity, record(names, schema.Activity, 1, "INSERT", with(activityItem("u", at, "e", "DAILY_OPEN", 1, 1, ""), "sk", s("tz#1")), nil)},
		"activity sans points":  {schema.Activity, record(names, schema.Activity, 1, "INSERT", without(activityItem("u", at, "e", "DAILY_OPEN", 1, 1, ""), "points"), nil)},
		"activity sans type":    {schema.Activity, record(names, schema.Activity, 1, "INSERT", without(activityItem("u", at, "e", "DAILY_OPEN", 1, 1, ""), "event_type"), nil)},
		"record without id": {schema.Activity, func() events.DynamoDBEventRecord {
			r := record(names, schema.Activity, 1, "INSERT", activityItem("u", at, "e", "DAILY_OPEN", 1, 1, ""), nil)
			r.EventID = ""
			return r
		}()},
		"not a source table": {schema.Players, record(names, schema.Players, 1, "INSERT", map[string]types.AttributeValue{"player_id": s("u")}, nil)},
	} {
		t.Run(name, func(t *testing.T) {
			if ev, _, ok, err := decoders.Map(tc.table, tc.rec); err == nil {
				t.Fatalf("mapped without error: ok=%v %+v", ok, ev)
			}
		})
	}
	for name, tc := range map[string]struct {
		table schema.Table
		rec   events.DynamoDBEventRecord
	}{
		"day total":          {schema.Activity, record(names, schema.Activity, 1, "INSERT", map[string]types.AttributeValue{"user_id": s("u"), "sk": s(sdynamo.DaySK("2026-01-01"))}, nil)},
		"idempotency record": {schema.Activity, record(names, schema.Activity, 1, "INSERT", map[string]types.AttributeValue{"user_id": s("u"), "sk": s(sdynamo.KeySK("k"))}, nil)},
		"expired event":      {schema.Activity, record(names, schema.Activity, 1, "REMOVE", nil, activityItem("u", at, "e", "DAILY_OPEN", 1, 1, ""))},
		"erased score":       {schema.ScoreEvents, record(names, schema.ScoreEvents, 1, "REMOVE", nil, scoreEventItem("b", "u", "m", 1, at))},
		"erased edge":        {schema.Reactions, record(names, schema.Reactions, 1, "REMOVE", nil, edgeItem("u", "like", "x", "ACTIVE", 3, at))},
		"unchanged edge":     {schema.Reactions, record(names, schema.Reactions, 1, "MODIFY", edgeItem("u", "like", "x", "ACTIVE", 3, at), edgeItem("u", "like", "x", "ACTIVE", 3, at))},
		"removed edge again": {schema.Reactions, record(names, schema.Reactions, 1, "MODIFY", edgeItem("u", "like", "x", "REMOVED", 4, at), edgeItem("u", "like", "x", "REMOVED", 3, at))},
	} {
		t.Run(name, func(t *testing.T) {
			if ev, _, ok, err := decoders.Map(tc.table, tc.rec); ok || err != nil {
				t.Fatalf("want no event: ok=%v err=%v %+v", ok, err, ev)
			}
		})
	}
}

// The shipper finds a record's table by its eventSourceARN, real or as
// Lambda names it.
func TestSourceOfResolvesStreamARNs(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ctx := context.Background()
	if _, _, err := (&rdynamo.Edges{DB: r.db, Table: r.names.Of(schema.Reactions)}).Add(ctx,
		reactions.Ref{UserID: "u", Kind: reactions.Like, TargetID: "p"}, time.Now(), reactions.InTrending); err != nil {
		t.Fatal(err)
	}
	recs := r.tail(schema.Reactions).next(t)
	if len(recs) != 1 || !strings.Contains(recs[0].EventSourceArn, "/stream/") {
		t.Fatalf("records %+v", recs)
	}
	if got, ok := analytics.SourceOf(recs[0].EventSourceArn, r.names); !ok || got.Name != schema.Reactions.Name {
		t.Fatalf("real ARN %s: %v %v", recs[0].EventSourceArn, got.Name, ok)
	}
	names := schema.Names{}
	for _, tb := range schema.Tables() {
		names[tb.Name] = "Rally-prod-" + tb.Name
	}
	for _, tb := range analytics.Sources() {
		if got, ok := analytics.SourceOf(arn(names, tb), names); !ok || got.Name != tb.Name {
			t.Fatalf("%s: %v %v", tb.Name, got.Name, ok)
		}
	}
	for _, bad := range []string{"", "arn:aws:dynamodb:us-east-1:1:table/Rally-dev-Reactions/stream/x",
		"arn:aws:sqs:us-east-1:1:table/Rally-prod-Reactions/stream/x", "arn:aws:dynamodb:us-east-1:1:index/Rally-prod-Reactions"} {
		if got, ok := analytics.SourceOf(bad, names); ok {
			t.Fatalf("%q resolved to %s", bad, got.Name)
		}
	}
}

func ops(recs []events.DynamoDBEventRecord) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.EventName
	}
	return out
}

// strip keeps what the test states: the fields that vary per test.
func strip(ms []mapped) []mapped {
	out := make([]mapped, len(ms))
	for i, m := range ms {
		e := m.Event
		e.EventID, e.EventType, e.SchemaVersion = "", "", 0
		out[i] = mapped{Type: m.Type, User: m.User, Event: e}
	}
	return out
}
