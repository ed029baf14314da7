package privacy_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/shared/analytics"
	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/obs"
	"github.com/rallyhq/rally/shared/privacy"
	"github.com/rallyhq/rally/shared/schema"
	"github.com/rallyhq/rally/shared/secrets"
)

func records(t *testing.T) (*privacy.Records, *dynamodb.Client, schema.Names) {
	t.Helper()
	db, names, _ := testenv.DynamoDB(t)
	return underKeys(db, names, secrets.Fixed([]byte("erasure-key-1"), nil)), db, names
}

// underKeys are the Erasures table's records, hashed under keys.
func underKeys(db *dynamodb.Client, names schema.Names, keys *secrets.Ring) *privacy.Records {
	return &privacy.Records{DB: db, Table: names.Of(schema.Erasures), Hasher: privacy.NewHasher(keys)}
}

// Twenty concurrent requests for one user make one erasure; once it is
// complete the record keeps no user id, and a new request starts anew.
func TestOneErasurePendingPerUser(t *testing.T) {
	r, _, _ := records(t)
	ctx := context.Background()
	now := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	ids := make([]string, 20)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Go(func() {
			e, err := r.Request(ctx, "ann", now)
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = e.ID
		})
	}
	wg.Wait()
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("concurrent requests made several erasures: %v", ids)
		}
	}
	pending, err := r.Pending(ctx, 10)
	if err != nil || len(pending) != 1 || pending[0].Hash != r.Hasher.Hash("ann") || !pending[0].RequestedAt.Equal(now) {
		t.Fatalf("pending %v %v", pending, err)
	}
	e, _, err := r.Get(ctx, r.Hasher.Hash("ann"))
	if err != nil || e.UserID != "ann" || e.Status != privacy.Pending {
		t.Fatalf("pending record %+v %v", e, err)
	}
	if err := r.Complete(ctx, e, now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	done, _, err := r.Get(ctx, r.Hasher.Hash("ann"))
	if err != nil || done.Status != privacy.Completed || done.UserID != "" || !done.CompletedAt.Equal(now.Add(time.Minute)) {
		t.Fatalf("completed record %+v %v", done, err)
	}
	if pending, _ := r.Pending(ctx, 10); len(pending) != 0 {
		t.Fatalf("a completed erasure is still listed as pending: %v", pending)
	}
	again, err := r.Request(ctx, "ann", now.Add(time.Hour))
	if err != nil || again.ID == e.ID || again.Status != privacy.Pending {
		t.Fatalf("a request after completion: %+v %v", again, err)
	}
}

// Every scheduled tick says how long the oldest pending erasure has
// waited, and 0 once none waits, so an erasure that never completes shows.
func TestTicksReportTheAgeOfTheOldestPendingErasure(t *testing.T) {
	r, _, _ := records(t)
	ctx := context.Background()
	requested := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	for i, user := range []string{"cyd", "dot"} {
		if _, err := r.Request(ctx, user, requested.Add(time.Duration(i)*time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	clk := clock.NewSettable()
	clk.Set(requested.Add(2 * time.Hour))
	tick := func() float64 {
		t.Helper()
		var emitted bytes.Buffer
		job := &privacy.Job{
			Records: r, Clock: clk, Metrics: obs.NewMetrics(&emitted, "erasure-processor"),
			Log: slog.New(slog.NewJSONHandler(io.Discard, nil)),
		}
		if err := job.Process(ctx, nil); err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		for _, line := range strings.Split(strings.TrimSpace(emitted.String()), "\n") {
			if json.Unmarshal([]byte(line), &doc) == nil && doc[privacy.MetricOldestPendingAge] != nil {
				return doc[privacy.MetricOldestPendingAge].(float64)
			}
		}
		t.Fatalf("no %s in %q", privacy.MetricOldestPendingAge, emitted.String())
		return 0
	}
	// The tick reports cyd's two hours, then (with no parts to erase)
	// completes both erasures; the next tick finds none waiting.
	// (The settable clock runs on from where it was set.)
	if age := tick(); age < (2*time.Hour).Seconds() || age > (2*time.Hour+time.Minute).Seconds() {
		t.Fatalf("oldest pending age %v s, want two hours", age)
	}
	if age := tick(); age != 0 {
		t.Fatalf("oldest pending age %v s with none pending, want 0", age)
	}
}

// A lease keeps a second run off an erasure until it runs out.
func TestALeaseHoldsUntilItRunsOut(t *testing.T) {
	r, _, _ := records(t)
	ctx := context.Background()
	now := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	e, err := r.Request(ctx, "bea", now)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Lease(ctx, e, now, now.Add(50*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := r.Lease(ctx, e, now.Add(49*time.Second), now.Add(99*time.Second)); err == nil {
		t.Fatal("a second run took a held lease")
	}
	if err := r.Lease(ctx, e, now.Add(51*time.Second), now.Add(101*time.Second)); err != nil {
		t.Fatalf("a lease that ran out could not be taken: %v", err)
	}
}

// The analytics shipper never makes a secret again for events of an
// erased user from before the erasure, but does for a user who came back.
func TestAnErasedUsersSecretIsNotMadeAgain(t *testing.T) {
	r, db, names := records(t)
	ctx := context.Background()
	pids := &analytics.Pseudonyms{DB: db, Table: names.Of(schema.AnalyticsSecrets), Legacy: names.Of(schema.Players), Guard: r}
	before := time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)
	erasedAt := before.Add(time.Hour)

	first, err := pids.PIDsSince(ctx, map[string]time.Time{"cy": before, "dee": before})
	if err != nil || first["cy"] == "" || first["dee"] == "" {
		t.Fatalf("PIDs before any erasure: %v %v", first, err)
	}
	// cy is erased: the erasure deletes the secret.
	if _, err := r.Request(ctx, "cy", erasedAt); err != nil {
		t.Fatal(err)
	}
	if _, err := (&analytics.Eraser{DB: db, Table: names.Of(schema.AnalyticsSecrets)}).Erase(ctx, "cy"); err != nil {
		t.Fatal(err)
	}
	late, err := pids.PIDsSince(ctx, map[string]time.Time{"cy": before, "dee": before})
	if err != nil || late["cy"] != "" || late["dee"] != first["dee"] {
		t.Fatalf("PIDs of events from before the erasure: %v %v", late, err)
	}
	for _, kept := range []struct {
		table schema.Table
		key   string
	}{{schema.AnalyticsSecrets, schema.AttrUserID}, {schema.Players, schema.AttrPlayerID}} {
		out, err := db.GetItem(ctx, &dynamodb.GetItemInput{
			TableName: aws.String(names.Of(kept.table)),
			Key:       map[string]types.AttributeValue{kept.key: &types.AttributeValueMemberS{Value: "cy"}},
		})
		if err != nil || out.Item != nil {
			t.Fatalf("the erased user's %s item came back: %v %v", kept.table.Name, out.Item, err)
		}
	}
	back, err := pids.PIDsSince(ctx, map[string]time.Time{"cy": erasedAt.Add(time.Minute)})
	if err != nil || back["cy"] == "" || back["cy"] == first["cy"] {
		t.Fatalf("a user back after the erasure gets a new pseudonym: %v (was %s) %v", back, first["cy"], err)
	}
}

// A secret a deployment still keeps in the Players item of a user whose
// erasure is pending is not moved for events from before the erasure: the
// erasure deletes the Players item, and the secret goes with it.
func TestAnErasedUsersLegacySecretIsNotMoved(t *testing.T) {
	r, db, names := records(t)
	ctx := context.Background()
	pids := &analytics.Pseudonyms{DB: db, Table: names.Of(schema.AnalyticsSecrets), Legacy: names.Of(schema.Players), Guard: r}
	before := time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)
	legacy := make([]byte, 32)
	legacy[0] = 7
	if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(names.Of(schema.Players)), Item: map[string]types.AttributeValue{
		schema.AttrPlayerID: &types.AttributeValueMemberS{Value: "eve"}, analytics.SecretAttr: &types.AttributeValueMemberB{Value: legacy},
	}}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Request(ctx, "eve", before.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	got, err := pids.PIDsSince(ctx, map[string]time.Time{"eve": before})
	if err != nil || got["eve"] != "" {
		t.Fatalf("PID of an erased user's late event: %v %v", got, err)
	}
	out, err := db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(names.Of(schema.AnalyticsSecrets)), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{schema.AttrUserID: &types.AttributeValueMemberS{Value: "eve"}},
	})
	if err != nil || out.Item != nil {
		t.Fatalf("an erased user's secret was moved: %v %v", out.Item, err)
	}
}

// An erasure record is kept under a hash keyed by the erasure key: not the
// SHA-256 of the id (with or without a label), which anyone reading the
// Erasures table could compute for a known id, and not what another key
// makes of it.
func TestAnErasureRecordIsKeptUnderAKeyedHash(t *testing.T) {
	r, db, names := records(t)
	ctx := context.Background()
	const user = "known-id-42"
	if _, err := r.Request(ctx, user, time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)); err != nil {
		t.Fatal(err)
	}
	out, err := db.Scan(ctx, &dynamodb.ScanInput{TableName: aws.String(names.Of(schema.Erasures))})
	if err != nil || len(out.Items) != 1 {
		t.Fatalf("erasure records: %v %v, want one", out.Items, err)
	}
	key := out.Items[0][schema.AttrUserHash].(*types.AttributeValueMemberS).Value
	for _, guess := range []string{user, "rally/erasure\x00" + user, "rally/erasure" + user} {
		sum := sha256.Sum256([]byte(guess))
		if key == hex.EncodeToString(sum[:]) {
			t.Fatalf("the record of %s is kept under the unkeyed SHA-256 of %q", user, guess)
		}
	}
	if other := privacy.NewHasher(secrets.Fixed([]byte("another-key"), nil)).Hash(user); key == other {
		t.Fatal("another key makes the same hash")
	}
	if _, found, err := underKeys(db, names, secrets.Fixed([]byte("another-key"), nil)).Find(ctx, user); err != nil || found {
		t.Fatalf("a reader holding another key found the record: %v %v", found, err)
	}
	if e, found, err := r.Find(ctx, user); err != nil || !found || e.UserID != user {
		t.Fatalf("the record under the erasure key: %+v %v %v", e, found, err)
	}
}

// After the erasure key is rotated, a record written under the previous
// version is still found: its status is read, a new request returns the
// erasure still pending instead of starting a second, the analytics
// shipper still sees the user as erased, the erasure completes, and the
// versions it awaits are listed and cleared. New records are written
// under the current version.
func TestARecordWrittenUnderThePreviousKeyIsFoundAfterARotation(t *testing.T) {
	db, names, _ := testenv.DynamoDB(t)
	ctx := context.Background()
	k1, k2 := []byte("erasure-key-1"), []byte("erasure-key-2")
	before := underKeys(db, names, secrets.Fixed(k1, nil))
	after := underKeys(db, names, secrets.Fixed(k2, k1))
	counters := names.Of(schema.Counters)
	awaitsBefore := &privacy.Awaits{DB: db, Table: counters, Clock: clock.System{}, Hasher: before.Hasher}
	awaitsAfter := &privacy.Awaits{DB: db, Table: counters, Clock: clock.System{}, Hasher: after.Hasher}
	requested := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)

	e, err := before.Request(ctx, "bo", requested)
	if err != nil {
		t.Fatal(err)
	}
	if err := awaitsBefore.Add(ctx, "bo", map[string]int64{"fav#g1": 4}); err != nil {
		t.Fatal(err)
	}

	got, found, err := after.Find(ctx, "bo")
	if err != nil || !found || got.ID != e.ID || got.Status != privacy.Pending {
		t.Fatalf("after the rotation, the erasure requested before: %+v %v %v", got, found, err)
	}
	again, err := after.Request(ctx, "bo", requested.Add(time.Minute))
	if err != nil || again.ID != e.ID {
		t.Fatalf("a request after the rotation: %+v %v, want the pending erasure %s", again, err, e.ID)
	}
	pids := &analytics.Pseudonyms{DB: db, Table: names.Of(schema.AnalyticsSecrets), Guard: after}
	late, err := pids.PIDsSince(ctx, map[string]time.Time{"bo": requested.Add(-time.Hour)})
	if err != nil || late["bo"] != "" {
		t.Fatalf("the PID of an event from before the erasure, after the rotation: %v %v", late, err)
	}
	if versions, err := awaitsAfter.List(ctx, "bo"); err != nil || versions["fav#g1"] != 4 {
		t.Fatalf("the versions awaited, after the rotation: %v %v", versions, err)
	}
	if err := awaitsAfter.Clear(ctx, "bo"); err != nil {
		t.Fatal(err)
	}
	if versions, err := awaitsBefore.List(ctx, "bo"); err != nil || len(versions) != 0 {
		t.Fatalf("the versions awaited after they were cleared: %v %v", versions, err)
	}

	job := &privacy.Job{Records: after, Clock: clock.System{}, Log: slog.New(slog.NewJSONHandler(io.Discard, nil)),
		Metrics: obs.NewMetrics(io.Discard, "erasure-processor")}
	if err := job.Process(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if done, found, err := after.Find(ctx, "bo"); err != nil || !found || done.Status != privacy.Completed {
		t.Fatalf("the erasure once run after the rotation: %+v %v %v", done, found, err)
	}

	cy, err := after.Request(ctx, "cy", requested)
	if err != nil {
		t.Fatal(err)
	}
	if _, found, err := before.Find(ctx, "cy"); err != nil || found {
		t.Fatalf("a record written after the rotation is under the previous key: %v %v", found, err)
	}
	if got, found, err := underKeys(db, names, secrets.Fixed(k2, nil)).Find(ctx, "cy"); err != nil || !found || got.ID != cy.ID {
		t.Fatalf("a record written after the rotation, under the current key: %+v %v %v", got, found, err)
	}
}

// An instance that read the erasure key before a rotation finds a record
// a newer instance wrote under the new key: finding nothing under the keys
// it holds, it reads the key again.
func TestAnInstanceThatReadTheKeyBeforeARotationFindsRecordsWrittenAfterIt(t *testing.T) {
	db, names, _ := testenv.DynamoDB(t)
	ctx := context.Background()
	var mu sync.Mutex
	current, previous := []byte("erasure-key-1"), []byte(nil)
	clk := clock.NewSettable()
	ring, err := secrets.Load(ctx, func(context.Context) ([]byte, []byte, error) {
		mu.Lock()
		defer mu.Unlock()
		return current, previous, nil
	}, clk)
	if err != nil {
		t.Fatal(err)
	}
	stale := underKeys(db, names, ring)
	mu.Lock()
	current, previous = []byte("erasure-key-2"), []byte("erasure-key-1")
	mu.Unlock()
	fresh := underKeys(db, names, secrets.Fixed([]byte("erasure-key-2"), []byte("erasure-key-1")))
	e, err := fresh.Request(ctx, "di", time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(secrets.ReloadEvery)
	got, found, err := stale.Find(ctx, "di")
	if err != nil || !found || got.ID != e.ID {
		t.Fatalf("the stale instance's lookup: %+v %v %v, want erasure %s", got, found, err, e.ID)
	}
}
