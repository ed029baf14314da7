package dynamo_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/shared/errs"
	"github.com/rallyhq/rally/shared/leaderboards"
	"github.com/rallyhq/rally/shared/leaderboards/dynamo"
	"github.com/rallyhq/rally/shared/schema"
)

func TestDefinitionsCreateUpdateAndKeepImmutableFields(t *testing.T) {
	ctx := context.Background()
	s := newStores(t)
	d := board("season-1", leaderboards.Best, leaderboards.Desc, leaderboards.Earliest)
	d.Scope = leaderboards.Scope{Game: "g1", Mode: "ranked", Region: "eu"}
	d.Timezone = "Europe/Berlin"

	s.clock.Set(t0)
	got, created, err := s.defs.Put(ctx, d)
	if err != nil || !created || got.Version != 1 || !got.CreatedAt.Equal(t0) || got.Scope != d.Scope || got.Timezone != "Europe/Berlin" {
		t.Fatalf("create: %+v created=%v err=%v", got, created, err)
	}

	later := t0.Add(time.Hour)
	s.clock.Set(later)
	d.Title, d.Status, d.MaxN, d.Scope = "Season one", leaderboards.Frozen, 50, leaderboards.Scope{}
	got, created, err = s.defs.Put(ctx, d)
	if err != nil || created || got.Version != 2 || got.Title != "Season one" || got.Status != leaderboards.Frozen || got.MaxN != 50 ||
		got.Scope != (leaderboards.Scope{}) || !got.CreatedAt.Equal(t0) || !got.UpdatedAt.Equal(later) {
		t.Fatalf("update of mutable fields: %+v created=%v err=%v", got, created, err)
	}

	changed := d
	changed.Policy, changed.Order, changed.Title = leaderboards.Latest, leaderboards.Asc, "renamed too"
	_, _, err = s.defs.Put(ctx, changed)
	var e *errs.Error
	if !errors.As(err, &e) || e.Kind != errs.Conflict {
		t.Fatalf("changing policy and order: %v, want a Conflict", err)
	}
	if !strings.Contains(e.Detail, "policy") || !strings.Contains(e.Detail, "order") || strings.Contains(e.Detail, "tie_break") {
		t.Fatalf("the conflict must name exactly the changed fields: %q", e.Detail)
	}
	var fields []string
	for _, f := range e.Fields {
		fields = append(fields, f.Field)
	}
	if !slices.Equal(fields, []string{"policy", "order"}) {
		t.Fatalf("conflict fields %v", fields)
	}
	for _, field := range []func(*leaderboards.Definition){
		func(d *leaderboards.Definition) { d.Reset = leaderboards.Daily },
		func(d *leaderboards.Definition) { d.TieBreak = leaderboards.Shared },
		func(d *leaderboards.Definition) { d.Timezone = "UTC" },
	} {
		c := d
		field(&c)
		if _, _, err := s.defs.Put(ctx, c); !errs.Is(err, errs.Conflict) {
			t.Fatalf("changing an immutable field of %+v: %v", c, err)
		}
	}

	stored, err := s.defs.Get(ctx, d.ID)
	if err != nil || stored.Version != 2 || stored.Title != "Season one" || stored.Policy != leaderboards.Best {
		t.Fatalf("a refused change wrote something: %+v %v", stored, err)
	}
	if _, err := s.defs.Get(ctx, "nope"); !errs.Is(err, errs.NotFound) || !strings.Contains(err.Error(), "leaderboard nope not found") {
		t.Fatalf("unknown board: %v", err)
	}

	if _, _, err := s.defs.Put(ctx, board("other", leaderboards.Increment, leaderboards.Asc, leaderboards.Shared)); err != nil {
		t.Fatal(err)
	}
	all, err := s.defs.List(ctx)
	if err != nil || len(all) != 2 {
		t.Fatalf("list: %+v %v", all, err)
	}
}

// Concurrent creations of one board: exactly one creates it, the others
// update it, and the version counts every write.
func TestConcurrentPutsOfOneBoardCreateItOnce(t *testing.T) {
	s := newStores(t)
	d := board("race", leaderboards.Best, leaderboards.Desc, leaderboards.Earliest)
	results := make(chan bool, 10)
	for i := 0; i < 10; i++ {
		go func() {
			_, created, err := s.defs.Put(context.Background(), d)
			if err != nil {
				t.Error(err)
			}
			results <- created
		}()
	}
	creations := 0
	for i := 0; i < 10; i++ {
		if <-results {
			creations++
		}
	}
	got, err := s.defs.Get(context.Background(), d.ID)
	if creations != 1 || err != nil || got.Version != 10 {
		t.Fatalf("%d creations, stored %+v %v; want 1 creation and version 10", creations, got, err)
	}
}

// Listing boards queries an index and reads only the boards it returns
// (and one more that says a next page exists): every filter's pages
// together are exactly the model's boards, each once, after boards moved
// between statuses and games; a game with no board reads nothing. Boards
// stored before the index are keyed into it by Relist.
func TestListingBoardsQueriesAnIndex(t *testing.T) {
	ctx := context.Background()
	client, names, _ := testenv.DynamoDB(t)
	db := &countingDB{DB: client}
	defs := &dynamo.Definitions{DB: db, Table: names.Of(schema.Leaderboards), Clock: &fixedClock{at: t0}}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 2))
	games := []string{"", "space-race", "tile-town", "kart"}
	statuses := []leaderboards.Status{leaderboards.Active, leaderboards.Frozen, leaderboards.Archived}
	model := map[string]leaderboards.Filter{} // id → its game and status
	put := func(id string) {
		f := leaderboards.Filter{Game: games[rng.IntN(len(games))], Status: statuses[rng.IntN(len(statuses))]}
		d := board(id, leaderboards.Best, leaderboards.Desc, leaderboards.Earliest)
		d.Scope.Game, d.Status = f.Game, f.Status
		if _, _, err := defs.Put(ctx, d); err != nil {
			t.Fatal(err)
		}
		model[id] = f
	}
	const boards = 240
	for i := range boards {
		put(fmt.Sprintf("b%03d", i))
	}
	for range 60 { // moved: another game, another status
		put(fmt.Sprintf("b%03d", rng.IntN(boards)))
	}
	// Two boards stored before the index: no listing keys.
	for _, id := range []string{"legacy-1", "legacy-2"} {
		item, err := attributevalue.MarshalMap(map[string]any{
			schema.AttrBoardID: id, "title": id, "policy": "best", "order": "desc", "reset": "none", "tie_break": "earliest",
			"scope": map[string]string{"game": "kart"}, "status": "ACTIVE", "max_n": 100, "timezone": "UTC", "ver": 1,
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(defs.Table), Item: item}); err != nil {
			t.Fatal(err)
		}
	}
	list := func(f leaderboards.Filter, limit int) []string {
		t.Helper()
		var ids []string
		after := ""
		for pages := 0; ; pages++ {
			if pages > len(model)+2 {
				t.Fatalf("%+v: the listing does not end", f)
			}
			db.items.Store(0)
			page, next, err := defs.Page(ctx, f, after, limit)
			if err != nil {
				t.Fatal(err)
			}
			if read := db.items.Load(); read > int64(len(page)+1) {
				t.Fatalf("%+v: a page of %d read %d boards", f, len(page), read)
			}
			for _, d := range page {
				ids = append(ids, d.ID)
			}
			if next == "" {
				return ids
			}
			after = next
		}
	}
	check := func(when string) {
		t.Helper()
		for _, game := range append(games, "nomatch") {
			for _, st := range append([]leaderboards.Status{""}, statuses...) {
				f := leaderboards.Filter{Game: game, Status: st}
				var want []string
				for id, m := range model {
					if (game == "" || m.Game == game) && (st == "" || m.Status == st) {
						want = append(want, id)
					}
				}
				for _, limit := range []int{1, 7, 100} {
					got := list(f, limit)
					if len(got) != len(slices.Compact(slices.Sorted(slices.Values(got)))) {
						t.Fatalf("%s, %+v, limit %d: a board listed twice: %v", when, f, limit, got)
					}
					slices.Sort(got)
					slices.Sort(want)
					if !slices.Equal(got, want) {
						t.Fatalf("%s, %+v, limit %d: %d boards %v, want %d %v", when, f, limit, len(got), got, len(want), want)
					}
				}
			}
		}
	}
	if got := list(leaderboards.Filter{Game: "kart"}, 100); slices.Contains(got, "legacy-1") {
		t.Fatal("a board stored without listing keys is listed by game: the test's legacy items are not legacy")
	}
	keyed, err := defs.Relist(ctx)
	if err != nil || keyed != 2 {
		t.Fatalf("Relist keyed %d, %v; want the 2 legacy boards", keyed, err)
	}
	model["legacy-1"] = leaderboards.Filter{Game: "kart", Status: leaderboards.Active}
	model["legacy-2"] = model["legacy-1"]
	if keyed, err := defs.Relist(ctx); err != nil || keyed != 0 {
		t.Fatalf("Relist again keyed %d, %v; want none", keyed, err)
	}
	check("after moves and a relist")
	db.items.Store(0)
	if page, _, err := defs.Page(ctx, leaderboards.Filter{Game: "nomatch"}, "", 100); err != nil || len(page) != 0 || db.items.Load() != 0 {
		t.Fatalf("a game with no boards: %d boards, %d read, %v", len(page), db.items.Load(), err)
	}
}
