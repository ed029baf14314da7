package dynamo_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/shared/analytics"
	"github.com/rallyhq/rally/shared/leaderboards"
	"github.com/rallyhq/rally/shared/leaderboards/dynamo"
	"github.com/rallyhq/rally/shared/schema"
)

// pagedDB returns at most two items per Query or Scan page, so an erasure
// that trusted one page would leave items behind. beforeUpdate, when set,
// runs before every UpdateItem, to change an item under it; failBatch, when
// set, may fail a BatchWriteItem, as a crash there would.
type pagedDB struct {
	*dynamodb.Client
	beforeUpdate func(*dynamodb.UpdateItemInput)
	failBatch    func(*dynamodb.BatchWriteItemInput) error
}

func (d *pagedDB) BatchWriteItem(ctx context.Context, in *dynamodb.BatchWriteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error) {
	if d.failBatch != nil {
		if err := d.failBatch(in); err != nil {
			return nil, err
		}
	}
	return d.Client.BatchWriteItem(ctx, in, opts...)
}

func (d *pagedDB) Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	if in.Limit == nil {
		in.Limit = aws.Int32(2)
	}
	return d.Client.Query(ctx, in, opts...)
}

func (d *pagedDB) Scan(ctx context.Context, in *dynamodb.ScanInput, opts ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	if in.Limit == nil {
		in.Limit = aws.Int32(2)
	}
	return d.Client.Scan(ctx, in, opts...)
}

func (d *pagedDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if d.beforeUpdate != nil {
		d.beforeUpdate(in)
	}
	return d.Client.UpdateItem(ctx, in, opts...)
}

// holdsID reports whether av is, or (nested) holds, exactly the string id.
func holdsID(av types.AttributeValue, id string) bool {
	switch v := av.(type) {
	case *types.AttributeValueMemberS:
		return v.Value == id
	case *types.AttributeValueMemberSS:
		return slices.Contains(v.Value, id)
	case *types.AttributeValueMemberL:
		return slices.ContainsFunc(v.Value, func(x types.AttributeValue) bool { return holdsID(x, id) })
	case *types.AttributeValueMemberM:
		for _, x := range v.Value {
			if holdsID(x, id) {
				return true
			}
		}
	}
	return false
}

// mentioning returns the items of table holding s in any attribute value.
func mentioning(t *testing.T, db *dynamodb.Client, table, s string) []map[string]types.AttributeValue {
	t.Helper()
	var found []map[string]types.AttributeValue
	for _, it := range testenv.TableItems(t, db, table) {
		if testenv.Mentions(&types.AttributeValueMemberM{Value: it}, s) {
			found = append(found, it)
		}
	}
	return found
}

const erased, kept = "erased-ann", "kept-bob"

func TestErasePlayerDeletesEveryScoreAndMatchAndCountsEachMemberOutOnce(t *testing.T) {
	ctx := context.Background()
	client, names, _ := testenv.DynamoDB(t)
	db := &pagedDB{Client: client}
	s := &dynamo.Scores{DB: db, Table: names.Of(schema.Scores), Events: names.Of(schema.ScoreEvents), Clock: &fixedClock{at: t0}}
	boards := []leaderboards.Definition{
		board("wins", leaderboards.Increment, leaderboards.Desc, leaderboards.Earliest),
		board("best", leaderboards.Best, leaderboards.Asc, leaderboards.Earliest),
	}
	periods := []string{"2026-11-22", "2026-11-23"}
	for _, d := range boards {
		for _, period := range periods {
			for _, player := range []string{erased, kept} {
				// Several matches each, so the events span pages.
				for i := range 3 {
					m := leaderboards.Match{PlayerID: player, MatchID: fmt.Sprintf("%s-%s-%d", period, player, i), Score: int64(10 + i), OccurredAt: t0}
					if _, err := s.Submit(ctx, d, period, m, apply(d, m)); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
	}
	// A score written before by_player existed has no player_key; the
	// player's recorded matches still lead to it.
	if _, err := client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(names.Of(schema.Scores)),
		Key: map[string]types.AttributeValue{
			schema.AttrPK: &types.AttributeValueMemberS{Value: dynamo.PeriodKey("best", periods[1])}, schema.AttrPlayerID: &types.AttributeValueMemberS{Value: erased},
		},
		UpdateExpression: aws.String("REMOVE " + schema.AttrPlayerKey),
	}); err != nil {
		t.Fatal(err)
	}
	if len(mentioning(t, client, names.Of(schema.Scores), erased)) == 0 || len(mentioning(t, client, names.Of(schema.ScoreEvents), erased)) == 0 {
		t.Fatal("the player's scores and matches were not stored")
	}
	keptScores := map[string][]leaderboards.Score{}
	for _, d := range boards {
		for _, period := range periods {
			if n, err := s.Members(ctx, d.ID, period); err != nil || n != 2 {
				t.Fatalf("members of %s/%s before erasure: %d %v", d.ID, period, n, err)
			}
			got, err := s.Get(ctx, d.ID, period, []string{kept})
			if err != nil || len(got) != 1 {
				t.Fatalf("kept player's score: %v %v", got, err)
			}
			keptScores[d.ID+"/"+period] = got
		}
	}
	keptEvents := len(mentioning(t, client, names.Of(schema.ScoreEvents), kept))

	ids := []string{"wins", "best", "never-played"}
	want := []dynamo.BoardPeriod{{"best", periods[0]}, {"best", periods[1]}, {"wins", periods[0]}, {"wins", periods[1]}}

	// The first run dies once the scores are gone, before the matches are.
	db.failBatch = func(in *dynamodb.BatchWriteItemInput) error {
		if _, ok := in.RequestItems[s.Events]; ok {
			return errors.New("the process died")
		}
		return nil
	}
	if _, err := s.ErasePlayer(ctx, erased, ids); err == nil || strings.Contains(err.Error(), erased) {
		t.Fatalf("an erasure that died: %v, want an error that does not name the player", err)
	}
	db.failBatch = nil
	got, err := s.ErasePlayer(ctx, erased, ids)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("the re-run reports board periods %v, want %v (again, so the caller clears them again)", got, want)
	}
	for _, table := range []schema.Table{schema.Scores, schema.ScoreEvents} {
		if left := mentioning(t, client, names.Of(table), erased); len(left) > 0 {
			t.Fatalf("%s still holds the player: %v", table.Name, left)
		}
	}
	check := func(when string) {
		t.Helper()
		for _, d := range boards {
			for _, period := range periods {
				if n, err := s.Members(ctx, d.ID, period); err != nil || n != 1 {
					t.Fatalf("%s: members of %s/%s: %d %v, want 1", when, d.ID, period, n, err)
				}
				got, err := s.Get(ctx, d.ID, period, []string{kept, erased})
				if err != nil || !reflect.DeepEqual(got, keptScores[d.ID+"/"+period]) {
					t.Fatalf("%s: scores in %s/%s: %+v %v, want only the kept player's, unchanged", when, d.ID, period, got, err)
				}
			}
		}
		if n := len(mentioning(t, client, names.Of(schema.ScoreEvents), kept)); n != keptEvents {
			t.Fatalf("%s: the kept player has %d matches recorded, want %d", when, n, keptEvents)
		}
	}
	check("after erasure")

	before := testenv.TableItems(t, client, names.Of(schema.Scores))
	again, err := s.ErasePlayer(ctx, erased, ids)
	if err != nil || len(again) != 0 {
		t.Fatalf("a second erasure found %v (%v), want nothing", again, err)
	}
	check("after a second erasure")
	if after := testenv.TableItems(t, client, names.Of(schema.Scores)); !reflect.DeepEqual(before, after) {
		t.Fatal("a second erasure changed the Scores table")
	}
}

func TestErasePlayerDeletesTheProfileAndTakesThePlayerOutOfEveryFriendList(t *testing.T) {
	ctx := context.Background()
	client, names, _ := testenv.DynamoDB(t)
	db := &pagedDB{Client: client}
	clk := &fixedClock{at: t0}
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
		if err := s.PutProfile(ctx, leaderboards.Profile{PlayerID: p, DisplayName: strings.ToUpper(p), Region: "eu"}); err != nil {
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
	// Between the scan and the rewrite of bo's list, bo's list changes:
	// the rewrite must notice, read it again and keep the new friend.
	var once sync.Once
	db.beforeUpdate = func(in *dynamodb.UpdateItemInput) {
		if in.Key[schema.AttrPlayerID].(*types.AttributeValueMemberS).Value != "bo" {
			return
		}
		once.Do(func() {
			if err := (&dynamo.Players{DB: client, Table: s.Table, Clock: clk}).PutFriends(ctx, "bo", []string{"cy", erased, "zed"}); err != nil {
				t.Error(err)
			}
		})
	}
	clk.Set(t0.Add(1))

	if err := s.ErasePlayer(ctx, erased); err != nil {
		t.Fatal(err)
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
			if holdsID(&types.AttributeValueMemberM{Value: it}, erased) {
				t.Fatalf("%s: an item still names the player: %v", when, it)
			}
		}
	}
	check("after erasure")
	before := testenv.TableItems(t, client, names.Of(schema.Players))
	clk.Set(t0.Add(2))
	if err := s.ErasePlayer(ctx, erased); err != nil {
		t.Fatal(err)
	}
	check("after a second erasure")
	if after := testenv.TableItems(t, client, names.Of(schema.Players)); !reflect.DeepEqual(before, after) {
		t.Fatal("a second erasure changed the Players table")
	}
}
