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
// differs between players; the secret lives in its own table, apart from
// the profile (which the read routes see).
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
	item := r.secretItem(t, "bob")
	if b, ok := item[analytics.SecretAttr].(*types.AttributeValueMemberB); !ok || len(b.Value) != 32 {
		t.Fatalf("stored secret: %#v", item[analytics.SecretAttr])
	}
	if _, ok := r.player(t, "ann")[analytics.SecretAttr]; ok {
		t.Fatal("a secret was stored in the profile")
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

// Erasure deletes the secret: the old PID can no longer be recomputed, and
// later events get a new, unrelated one.
func TestErasureGivesANewPID(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ctx := context.Background()
	before, err := pidsOf(ctx, r.pseudonyms(), []string{"gus", "hal"})
	if err != nil {
		t.Fatal(err)
	}
	eraser := &analytics.Eraser{DB: r.db, Table: r.names.Of(schema.AnalyticsSecrets)}
	if _, err := eraser.Erase(ctx, "gus"); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.secretItem(t, "gus")[analytics.SecretAttr]; ok {
		t.Fatal("the erased secret is still there")
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
		TableName: aws.String(r.names.Of(schema.AnalyticsSecrets)),
		Item:      map[string]types.AttributeValue{schema.AttrUserID: s("ivy"), analytics.SecretAttr: s("short")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pidsOf(context.Background(), r.pseudonyms(), []string{"ivy"}); err == nil {
		t.Fatal("a text secret was used")
	}
}

// A deployment from before AnalyticsSecrets kept each secret in the
// player's Players item. The first time the shipper needs it, the secret
// moves to AnalyticsSecrets and leaves the profile, which keeps everything
// else: the player's PID is the one their earlier events carry. Shippers
// racing to move it agree.
func TestLegacySecretsMoveOutOfProfilesKeepingThePID(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ctx := context.Background()
	store := &pldynamo.Players{DB: r.db, Table: r.names.Of(schema.Players)}
	legacy := map[string][]byte{}
	for i := range 6 {
		user := fmt.Sprintf("old-%d", i)
		secret := make([]byte, 32)
		secret[0], secret[31] = byte(i), 42
		legacy[user] = secret
		if err := store.PutProfile(ctx, players.Profile{PlayerID: user, DisplayName: "Old " + user, Region: "eu"}); err != nil {
			t.Fatal(err)
		}
		if err := store.PutFriends(ctx, user, []string{"friend-a", "friend-b"}); err != nil {
			t.Fatal(err)
		}
		_, err := r.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: aws.String(r.names.Of(schema.Players)), Key: map[string]types.AttributeValue{schema.AttrPlayerID: s(user)},
			UpdateExpression:          aws.String("SET #secret = :s"),
			ExpressionAttributeNames:  map[string]string{"#secret": analytics.SecretAttr},
			ExpressionAttributeValues: map[string]types.AttributeValue{":s": &types.AttributeValueMemberB{Value: secret}},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	users := []string{"fresh"}
	for u := range legacy {
		users = append(users, u)
	}
	results := make([]map[string]string, 12)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() {
			pids, err := pidsOf(ctx, r.pseudonyms(), users)
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
	for u, secret := range legacy {
		if want := analytics.PID(secret, u); results[0][u] != want {
			t.Errorf("%s: PID %s after the move, %s before", u, results[0][u], want)
		}
		moved, ok := r.secretItem(t, u)[analytics.SecretAttr].(*types.AttributeValueMemberB)
		if !ok || string(moved.Value) != string(secret) {
			t.Errorf("%s: AnalyticsSecrets holds %#v, want the legacy secret", u, r.secretItem(t, u))
		}
		profile := r.player(t, u)
		if _, ok := profile[analytics.SecretAttr]; ok {
			t.Errorf("%s: the secret is still in the profile", u)
		}
		if profile[schema.AttrDisplayName] == nil || profile[schema.AttrFriendIDs] == nil {
			t.Errorf("%s: the move disturbed the profile: %v", u, profile)
		}
	}
	if !pidPattern.MatchString(results[0]["fresh"]) {
		t.Errorf("a user with no secret anywhere got PID %q", results[0]["fresh"])
	}
	if _, ok := r.player(t, "fresh")[schema.AttrPlayerID]; ok {
		t.Error("creating a secret made a Players item")
	}
	again, err := pidsOf(ctx, r.pseudonyms(), users)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "PIDs once moved", again, results[0])
}

// secretItem reads a user's AnalyticsSecrets item.
func (r rig) secretItem(t *testing.T, id string) map[string]types.AttributeValue {
	t.Helper()
	out, err := r.db.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String(r.names.Of(schema.AnalyticsSecrets)), Key: map[string]types.AttributeValue{schema.AttrUserID: s(id)},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item
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
