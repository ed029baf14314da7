package dynamo_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/leaderboards"
	"github.com/rallyhq/rally/shared/leaderboards/dynamo"
	"github.com/rallyhq/rally/shared/schema"
)

// failing fails the first call of the kind it is told, once.
type failing struct {
	ddb.DB
	put, del bool
}

var errCut = errors.New("cut short")

func (f *failing) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	if f.put {
		f.put = false
		return nil, errCut
	}
	return f.DB.PutItem(ctx, in, o...)
}

func (f *failing) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, o ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	if f.del {
		f.del = false
		return nil, errCut
	}
	return f.DB.DeleteItem(ctx, in, o...)
}

// A strike of the player who opens an archive page, cut short after the
// page lost them but before its pointer was keyed by the new opener, is
// finished by the next strike: no item names the player, and every other
// entry is still found on its page.
func TestAStrikeCutShortIsFinishedByTheNext(t *testing.T) {
	ctx := context.Background()
	d := board("sprint", leaderboards.Best, leaderboards.Desc, leaderboards.Earliest)
	const period = "2026-11-22"
	for _, cut := range []string{"before the new pointer", "before the old pointer went"} {
		t.Run(cut, func(t *testing.T) {
			client, names, _ := testenv.DynamoDB(t)
			f := &failing{DB: client}
			a := &dynamo.Archives{DB: f, Table: names.Of(schema.Archives)}
			// Three pages of three, ranked 1..9 by descending score.
			var entries []leaderboards.Entry
			for i := range 9 {
				entries = append(entries, leaderboards.Entry{Rank: i + 1, PlayerID: fmt.Sprintf("p%d", i+1), Score: int64(100 - i), ReachedAt: t0.Add(time.Duration(i) * time.Second)})
			}
			if err := a.PutPages(ctx, d, period, 0, [][]leaderboards.Entry{entries[:3], entries[3:6], entries[6:]}); err != nil {
				t.Fatal(err)
			}
			opener := entries[3]
			score := leaderboards.Score{Board: d.ID, Period: period, PlayerID: opener.PlayerID, Score: opener.Score, ReachedAt: opener.ReachedAt}
			page, found, err := a.PageOf(ctx, d, period, score)
			if err != nil || !found || page != 1 {
				t.Fatalf("PageOf the second page's opener = %d, %v, %v; want 1", page, found, err)
			}
			f.put, f.del = cut == "before the new pointer", cut == "before the old pointer went"
			if _, err := a.Strike(ctx, d, period, page, score); !errors.Is(err, errCut) {
				t.Fatalf("the cut strike: %v, want it cut short", err)
			}
			if names := mentioning(t, client, names.Of(schema.Archives), opener.PlayerID); len(names) == 0 {
				t.Fatal("the cut strike left no key naming the player: the test cuts nothing")
			}
			if there, err := a.Strike(ctx, d, period, page, score); err != nil || there {
				t.Fatalf("the next strike: there=%v, %v; want not there, no error", there, err)
			}
			if left := mentioning(t, client, names.Of(schema.Archives), opener.PlayerID); len(left) != 0 {
				t.Fatalf("after the next strike %d items still name %s: %v", len(left), opener.PlayerID, left)
			}
			for i, e := range entries {
				if e.PlayerID == opener.PlayerID {
					continue
				}
				s := leaderboards.Score{PlayerID: e.PlayerID, Score: e.Score, ReachedAt: e.ReachedAt}
				got, found, err := a.PageOf(ctx, d, period, s)
				if err != nil || !found || got != i/3 {
					t.Fatalf("PageOf %s = %d, %v, %v; want %d", e.PlayerID, got, found, err, i/3)
				}
			}
			second, err := a.Page(ctx, d.ID, period, 1)
			if err != nil {
				t.Fatal(err)
			}
			if len(second) != 2 || second[0].PlayerID != "p5" || second[0].Rank != 5 || second[1].Rank != 6 {
				t.Fatalf("the second page after the strike: %+v, want p5 and p6 at ranks 5 and 6", second)
			}
		})
	}
}
