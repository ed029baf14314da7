package analytics_test

import (
	"context"
	"fmt"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/shared/analytics"
	"github.com/rallyhq/rally/shared/players"
	pldynamo "github.com/rallyhq/rally/shared/players/dynamo"
	"github.com/rallyhq/rally/shared/schema"
)

var pidPattern = regexp.MustCompile(`^[0-9a-f]{32}$`)

// A player's PID is the same on every call and in every invocation, and
// differs between players; the secret lives beside the profile without
// disturbing it.
func TestPIDsAreStablePerUserAndDistinctAcrossUsers(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ctx := context.Background()
	store := &pldynamo.Players{DB: r.db, Table: r.names.Of(schema.Players)}
	if err := store.PutProfile(ctx, players.Profile{PlayerID: "ann", DisplayName: "Ann", Region: "eu"}); err != nil {
		t.Fatal(err)
	}
	users := []string{"ann", "bob", "ann", ""}
	for i := range 150 { // more than one BatchGet
		users = append(users, fmt.Sprintf("user-%03d", i))
	}
	first, err := pidsOf(ctx, r.pseudonyms(), users)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != 152 {
		t.Fatalf("%d PIDs for 152 distinct users", len(first))
	}
	distinct := map[string]bool{}
	for u, p := range first {
		if !pidPattern.MatchString(p) {
			t.Fatalf("PID %q of %s is not 32 hex characters", p, u)
		}
		if p == u {
			t.Fatal("a PID is the user id")
		}
		distinct[p] = true
	}
	if len(distinct) != len(first) {
		t.Fatalf("%d distinct PIDs for %d users", len(distinct), len(first))
	}
	again, err := pidsOf(ctx, r.pseudonyms(), []string{"bob", "ann", "user-149"})
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "PIDs on a later call", again, map[string]string{"ann": first["ann"], "bob": first["bob"], "user-149": first["user-149"]})

	profiles, err := store.Profiles(ctx, []string{"ann", "bob"})
	if err != nil {
		t.Fatal(err)
	}
	if len(profiles) != 1 || profiles["ann"].DisplayName != "Ann" || profiles["ann"].Region != "eu" {
		t.Fatalf("profiles after secrets were added: %+v", profiles)
	}
	item := r.player(t, "bob")
	if b, ok := item[analytics.SecretAttr].(*types.AttributeValueMemberB); !ok || len(b.Value) != 32 {
		t.Fatalf("stored secret: %#v", item[analytics.SecretAttr])
	}
}

// Shippers racing to create the same players' secrets agree on them.
func TestConcurrentSecretCreationAgrees(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	users := []string{"n1", "n2", "n3", "n4", "n5"}
	results := make([]map[string]string, 20)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() {
			pids, err := pidsOf(context.Background(), r.pseudonyms(), users)
			if err != nil {
				t.Error(err)
			}
			results[i] = pids
		})
	}
	wg.Wait()
	for i, got := range results {
		equal(t, fmt.Sprintf("shipper %d's PIDs", i), got, results[0])
	}
	stored, err := pidsOf(context.Background(), r.pseudonyms(), users)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "PIDs from the stored secrets", stored, results[0])
}

// Erasure deletes the Players item and the secret with it: the old PID can
// no longer be recomputed, and later events get a new, unrelated one.
func TestErasureGivesANewPID(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ctx := context.Background()
	before, err := pidsOf(ctx, r.pseudonyms(), []string{"gus", "hal"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: aws.String(r.names.Of(schema.Players)), Key: map[string]types.AttributeValue{schema.AttrPlayerID: s("gus")},
	})
	if err != nil {
		t.Fatal(err)
	}
	after, err := pidsOf(ctx, r.pseudonyms(), []string{"gus", "hal"})
	if err != nil {
		t.Fatal(err)
	}
	if after["gus"] == before["gus"] || !pidPattern.MatchString(after["gus"]) {
		t.Fatalf("erased player's PID %q, before %q", after["gus"], before["gus"])
	}
	if after["hal"] != before["hal"] {
		t.Fatal("erasing one player changed another's PID")
	}
}

// A secret that is not 32 bytes is refused rather than used.
func TestMalformedSecretIsAnError(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	_, err := r.db.PutItem(context.Background(), &dynamodb.PutItemInput{
		TableName: aws.String(r.names.Of(schema.Players)),
		Item:      map[string]types.AttributeValue{schema.AttrPlayerID: s("ivy"), analytics.SecretAttr: s("short")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pidsOf(context.Background(), r.pseudonyms(), []string{"ivy"}); err == nil {
		t.Fatal("a text secret was used")
	}
}

func (r rig) player(t *testing.T, id string) map[string]types.AttributeValue {
	t.Helper()
	out, err := r.db.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String(r.names.Of(schema.Players)), Key: map[string]types.AttributeValue{schema.AttrPlayerID: s(id)},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item
}

// pidsOf asks for the PIDs of users with no erasure guard in play.
func pidsOf(ctx context.Context, p *analytics.Pseudonyms, users []string) (map[string]string, error) {
	since := make(map[string]time.Time, len(users))
	for _, u := range users {
		since[u] = time.Time{}
	}
	return p.PIDsSince(ctx, since)
}
