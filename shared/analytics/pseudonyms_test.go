package analytics_test

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/shared/analytics"
	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/players"
	pldynamo "github.com/rallyhq/rally/shared/players/dynamo"
	"github.com/rallyhq/rally/shared/privacy"
	"github.com/rallyhq/rally/shared/schema"
	"github.com/rallyhq/rally/shared/secrets"
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

// A batch of new players gets one secret each, stored in a few calls
// rather than a call per player, and the PIDs a later call (one player at
// a time) finds; a legacy secret keeps its PID; an erased player in the
// batch gets no PID, and no secret is made for them again.
func TestABatchOfNewPlayersGetsOneSecretEach(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ctx := context.Background()
	db := &countingDB{DB: r.db}
	erasures := &privacy.Records{DB: r.db, Table: r.names.Of(schema.Erasures),
		Hasher: privacy.NewHasher(secrets.Fixed([]byte("erasure-key"), nil))}
	pids := &analytics.Pseudonyms{DB: db, Table: r.names.Of(schema.AnalyticsSecrets), Legacy: r.names.Of(schema.Players), Guard: erasures}
	before := time.Date(year, 3, 10, 9, 0, 0, 0, time.UTC)

	// gone had a secret and was erased after the batch's events.
	if first, err := pids.PIDsSince(ctx, map[string]time.Time{"gone": before}); err != nil || first["gone"] == "" {
		t.Fatalf("PID before the erasure: %v %v", first, err)
	}
	if _, err := erasures.Request(ctx, "gone", before.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := (&analytics.Eraser{DB: r.db, Table: r.names.Of(schema.AnalyticsSecrets)}).Erase(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	legacy := map[string][]byte{}
	for i := range 5 {
		user := fmt.Sprintf("old-%d", i)
		legacy[user] = bytes.Repeat([]byte{byte(i + 1)}, 32)
		if _, err := r.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(r.names.Of(schema.Players)), Item: map[string]types.AttributeValue{
			schema.AttrPlayerID: s(user), analytics.SecretAttr: &types.AttributeValueMemberB{Value: legacy[user]},
		}}); err != nil {
			t.Fatal(err)
		}
	}
	since := map[string]time.Time{"gone": before}
	for u := range legacy {
		since[u] = before
	}
	const fresh = 400
	for i := range fresh {
		since[fmt.Sprintf("new-%03d", i)] = before.Add(time.Duration(i) * time.Second)
	}
	db.transacts.Store(0)

	got, err := pids.PIDsSince(ctx, since)
	if err != nil {
		t.Fatal(err)
	}
	if got["gone"] != "" {
		t.Errorf("the erased player's late event got PID %q", got["gone"])
	}
	if n := db.transacts.Load(); n > fresh/10 {
		t.Errorf("%d transactions stored the secrets of %d new players", n, fresh)
	}
	stored := r.secrets(t)
	if _, ok := stored["gone"]; ok {
		t.Error("the erased player's secret was made again")
	}
	if len(stored) != len(since)-1 {
		t.Errorf("%d secrets stored for %d players who may have one", len(stored), len(since)-1)
	}
	for u := range since {
		if u == "gone" {
			continue
		}
		if want := analytics.PID(stored[u], u); got[u] != want {
			t.Errorf("%s: PID %q, from the stored secret %q", u, got[u], want)
		}
		if secret, ok := legacy[u]; ok && got[u] != analytics.PID(secret, u) {
			t.Errorf("%s: PID %q is not the one the legacy secret gives", u, got[u])
		}
		one, err := pids.PIDsSince(ctx, map[string]time.Time{u: since[u]})
		if err != nil || one[u] != got[u] {
			t.Fatalf("%s alone: PID %v %v, in the batch %q", u, one, err, got[u])
		}
	}
	if one, err := pids.PIDsSince(ctx, map[string]time.Time{"gone": before}); err != nil || one["gone"] != "" {
		t.Fatalf("the erased player alone: %v %v", one, err)
	}
	if _, ok := r.secrets(t)["gone"]; ok {
		t.Error("the erased player's secret was made again")
	}
}

// secrets reads every secret in AnalyticsSecrets, by user.
func (r rig) secrets(t *testing.T) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	p := dynamodb.NewScanPaginator(r.db, &dynamodb.ScanInput{TableName: aws.String(r.names.Of(schema.AnalyticsSecrets)), ConsistentRead: aws.Bool(true)})
	for p.HasMorePages() {
		page, err := p.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range page.Items {
			id := it[schema.AttrUserID].(*types.AttributeValueMemberS).Value
			if _, dup := out[id]; dup {
				t.Fatalf("two items for one user")
			}
			out[id] = it[analytics.SecretAttr].(*types.AttributeValueMemberB).Value
		}
	}
	return out
}

// countingDB counts the transactions a store writes.
type countingDB struct {
	ddb.DB
	transacts atomic.Int64
}

func (c *countingDB) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	c.transacts.Add(1)
	return c.DB.TransactWriteItems(ctx, in, opts...)
}
