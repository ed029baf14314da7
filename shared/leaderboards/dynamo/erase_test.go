package dynamo_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/shared/leaderboards"
	"github.com/rallyhq/rally/shared/leaderboards/dynamo"
	"github.com/rallyhq/rally/shared/schema"
)

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
	db := &testenv.SmallPages{Client: client}
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
	want := []leaderboards.BoardPeriod{{Board: "best", Period: periods[0]}, {Board: "best", Period: periods[1]}, {Board: "wins", Period: periods[0]}, {Board: "wins", Period: periods[1]}}

	// The first run dies once the scores are gone, before the matches are.
	db.FailBatch = func(in *dynamodb.BatchWriteItemInput) error {
		if _, ok := in.RequestItems[s.Events]; ok {
			return errors.New("the process died")
		}
		return nil
	}
	if _, err := s.ErasePlayer(ctx, erased, ids); err == nil || strings.Contains(err.Error(), erased) {
		t.Fatalf("an erasure that died: %v, want an error that does not name the player", err)
	}
	db.FailBatch = nil
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
