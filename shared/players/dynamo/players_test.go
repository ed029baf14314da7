package dynamo_test

import (
	"context"
	"reflect"
	"slices"
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
	"github.com/rallyhq/rally/shared/players"
	"github.com/rallyhq/rally/shared/players/dynamo"
	"github.com/rallyhq/rally/shared/schema"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var t0 = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

const erased = "erased-ann"

func newStore(t *testing.T) *dynamo.Players {
	t.Helper()
	db, names, _ := testenv.DynamoDB(t)
	return &dynamo.Players{DB: db, Table: names.Of(schema.Players), Clock: clock.Fixed(t0)}
}

// mentionsExactly reports whether an item holds id as a whole string value
// (in a set, list or map too); "erased-ann-2" is another player.
func mentionsExactly(item map[string]types.AttributeValue, id string) bool {
	var holds func(av types.AttributeValue) bool
	holds = func(av types.AttributeValue) bool {
		switch v := av.(type) {
		case *types.AttributeValueMemberS:
			return v.Value == id
		case *types.AttributeValueMemberSS:
			return slices.Contains(v.Value, id)
		case *types.AttributeValueMemberL:
			return slices.ContainsFunc(v.Value, holds)
		case *types.AttributeValueMemberM:
			for _, x := range v.Value {
				if holds(x) {
					return true
				}
			}
		}
		return false
	}
	return holds(&types.AttributeValueMemberM{Value: item})
}

func TestProfilesAndFriendsDoNotOverwriteEachOther(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	p := players.Profile{PlayerID: "hal", DisplayName: "Hal", AvatarURL: "https://a/h.png", Region: "eu"}
	if err := s.PutProfile(ctx, p); err != nil {
		t.Fatal(err)
	}
	if err := s.PutFriends(ctx, "hal", []string{"ivy", "jo"}); err != nil {
		t.Fatal(err)
	}
	p.DisplayName = "Hal 9000"
	if err := s.PutProfile(ctx, p); err != nil {
		t.Fatal(err)
	}
	friends, err := s.Friends(ctx, "hal")
	if err != nil || !slices.Equal(friends, []string{"ivy", "jo"}) {
		t.Fatalf("a profile update lost the friends: %v %v", friends, err)
	}
	if err := s.PutFriends(ctx, "hal", []string{"kim"}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutFriends(ctx, "ivy", []string{"hal"}); err != nil {
		t.Fatal(err)
	}
	profiles, err := s.Profiles(ctx, []string{"hal", "ivy", "nobody", "hal"})
	if err != nil || len(profiles) != 1 {
		t.Fatalf("profiles: %+v %v, want only hal's", profiles, err)
	}
	if got := profiles["hal"]; got.DisplayName != "Hal 9000" || got.AvatarURL != "https://a/h.png" || got.Region != "eu" {
		t.Fatalf("a friends update changed the profile: %+v", got)
	}
	if friends, _ := s.Friends(ctx, "hal"); !slices.Equal(friends, []string{"kim"}) {
		t.Fatalf("friends not replaced: %v", friends)
	}
	if err := s.PutFriends(ctx, "hal", nil); err != nil {
		t.Fatal(err)
	}
	if friends, err := s.Friends(ctx, "hal"); err != nil || len(friends) != 0 {
		t.Fatalf("cleared friends: %v %v", friends, err)
	}
	if friends, err := s.Friends(ctx, "nobody"); err != nil || friends != nil {
		t.Fatalf("friends of an unknown player: %v %v", friends, err)
	}
}

func TestErasePlayerDeletesTheProfileAndTakesThePlayerOutOfEveryFriendList(t *testing.T) {
	ctx := context.Background()
	client, names, _ := testenv.DynamoDB(t)
	db := &hooked{Client: client}
	clk := clock.NewSettable()
	clk.Set(t0)
	s := &dynamo.Players{DB: db, Table: names.Of(schema.Players), Clock: clk}
	friends := map[string][]string{
		erased: {"bo", "cy"},
		"bo":   {erased, "cy"},
		"cy":   {erased},
		"di":   {"x", erased, "y", erased},
		"ed":   {"bo", "erased-ann-2"}, // a different player whose id starts alike
		"fa":   nil,
	}
	for p, fs := range friends {
		if err := s.PutProfile(ctx, players.Profile{PlayerID: p, DisplayName: strings.ToUpper(p), Region: "eu"}); err != nil {
			t.Fatal(err)
		}
		if err := s.PutFriends(ctx, p, fs); err != nil {
			t.Fatal(err)
		}
	}
	// Another package keeps the player's analytics secret on the same item.
	if _, err := client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:        aws.String(names.Of(schema.Players)),
		Key:              map[string]types.AttributeValue{schema.AttrPlayerID: &types.AttributeValueMemberS{Value: erased}},
		UpdateExpression: aws.String("SET #secret = :s"), ExpressionAttributeNames: map[string]string{"#secret": analytics.SecretAttr},
		ExpressionAttributeValues: map[string]types.AttributeValue{":s": &types.AttributeValueMemberB{Value: []byte("0123456789abcdef")}},
	}); err != nil {
		t.Fatal(err)
	}
	// Between the read and the rewrite of bo's list, bo's list changes:
	// the rewrite must notice, read it again and keep the new friend.
	var once sync.Once
	db.before = func(_ context.Context, write string) error {
		if write != "bo" {
			return nil
		}
		once.Do(func() {
			if err := (&dynamo.Players{DB: client, Table: s.Table, Clock: clk}).PutFriends(ctx, "bo", []string{"cy", erased, "zed"}); err != nil {
				t.Error(err)
			}
		})
		return nil
	}
	clk.Set(t0.Add(1))

	if done, err := s.ErasePlayer(ctx, erased); err != nil || !done {
		t.Fatal(done, err)
	}
	wantFriends := map[string][]string{"bo": {"cy", "zed"}, "cy": nil, "di": {"x", "y"}, "ed": {"bo", "erased-ann-2"}, "fa": nil, erased: nil}
	check := func(when string) {
		t.Helper()
		for p, want := range wantFriends {
			if got, err := s.Friends(ctx, p); err != nil || !slices.Equal(got, want) {
				t.Fatalf("%s: friends of %s: %v %v, want %v", when, p, got, err, want)
			}
		}
		own, err := client.GetItem(ctx, &dynamodb.GetItemInput{
			TableName: aws.String(names.Of(schema.Players)), ConsistentRead: aws.Bool(true),
			Key: map[string]types.AttributeValue{schema.AttrPlayerID: &types.AttributeValueMemberS{Value: erased}},
		})
		if err != nil || len(own.Item) > 0 {
			t.Fatalf("%s: the player's item (profile, friends, analytics secret): %v %v, want none", when, own.Item, err)
		}
		profiles, err := s.Profiles(ctx, []string{erased, "bo", "cy", "di", "ed", "fa"})
		if err != nil || len(profiles) != 5 {
			t.Fatalf("%s: profiles %v %v, want the 5 others'", when, profiles, err)
		}
		for _, it := range testenv.TableItems(t, client, names.Of(schema.Players)) {
			if mentionsExactly(it, erased) {
				t.Fatalf("%s: an item still names the player: %v", when, it)
			}
		}
	}
	check("after erasure")
	before := testenv.TableItems(t, client, names.Of(schema.Players))
	clk.Set(t0.Add(2))
	if done, err := s.ErasePlayer(ctx, erased); err != nil || !done {
		t.Fatal(done, err)
	}
	check("after a second erasure")
	if after := testenv.TableItems(t, client, names.Of(schema.Players)); !reflect.DeepEqual(before, after) {
		t.Fatal("a second erasure changed the Players table")
	}
}
