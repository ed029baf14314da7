package privacy_test

import (
	"bytes"
	"context"
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
)

func records(t *testing.T) (*privacy.Records, *dynamodb.Client, schema.Names) {
	t.Helper()
	db, names, _ := testenv.DynamoDB(t)
	return &privacy.Records{DB: db, Table: names.Of(schema.Erasures)}, db, names
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
	if err != nil || len(pending) != 1 || pending[0].Hash != privacy.Hash("ann") || !pending[0].RequestedAt.Equal(now) {
		t.Fatalf("pending %v %v", pending, err)
	}
	e, _, err := r.Get(ctx, privacy.Hash("ann"))
	if err != nil || e.UserID != "ann" || e.Status != privacy.Pending {
		t.Fatalf("pending record %+v %v", e, err)
	}
	if err := r.Complete(ctx, e, now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	done, _, err := r.Get(ctx, privacy.Hash("ann"))
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
