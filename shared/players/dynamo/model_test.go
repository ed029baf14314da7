package dynamo_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/players/dynamo"
	"github.com/rallyhq/rally/shared/schema"
)

// friendModel is what the friend lists should be: each player's list as
// last put, minus the erased.
type friendModel map[string][]string

// inverse is the model's (friend, lister) pairs, distinct.
func (m friendModel) inverse() map[[2]string]bool {
	out := map[[2]string]bool{}
	for by, list := range m {
		for _, f := range list {
			out[[2]string{f, by}] = true
		}
	}
	return out
}

func (m friendModel) erase(p string) {
	delete(m, p)
	for by, list := range m {
		m[by] = slices.DeleteFunc(list, func(f string) bool { return f == p })
		if len(m[by]) == 0 {
			delete(m, by)
		}
	}
}

// checkModel compares every list and every reverse entry in Players with
// the model, and, for each erased player, that no item names them.
func checkModel(t *testing.T, client *dynamodb.Client, s *dynamo.Players, m friendModel, ids []string, erasedIDs []string, when string) {
	t.Helper()
	ctx := context.Background()
	for _, p := range ids {
		got, err := s.Friends(ctx, p)
		if err != nil {
			t.Fatalf("%s: friends of %s: %v", when, p, err)
		}
		if !slices.Equal(got, m[p]) {
			t.Fatalf("%s: friends of %s are %v, the model says %v", when, p, got, m[p])
		}
	}
	entries := map[[2]string]bool{}
	for _, it := range testenv.TableItems(t, client, s.Table) {
		for _, e := range erasedIDs {
			if mentionsExactly(it, e) {
				t.Fatalf("%s: an item still names the erased %s: %v", when, e, it)
			}
		}
		listed, ok := it[schema.AttrListedID].(*types.AttributeValueMemberS)
		if !ok {
			continue
		}
		by := it[schema.AttrListedBy].(*types.AttributeValueMemberS).Value
		entries[[2]string{listed.Value, by}] = true
	}
	want := m.inverse()
	for e := range want {
		if !entries[e] {
			t.Fatalf("%s: %s lists %s, but no reverse entry says so", when, e[1], e[0])
		}
	}
	for e := range entries {
		if !want[e] {
			t.Fatalf("%s: a reverse entry says %s lists %s, the model does not", when, e[1], e[0])
		}
	}
}

// randomList is a list of up to n of pool, with repeats now and then.
func randomList(r *rand.Rand, pool []string, n int) []string {
	k := r.IntN(n + 1)
	var out []string
	for range k {
		out = append(out, pool[r.IntN(len(pool))])
	}
	if len(out) > 0 && r.IntN(4) == 0 {
		out = append(out, out[0])
	}
	return out
}

// TestFriendListsAndTheirReverseEntriesFollowTheModel puts random friend
// lists (adds, removals, repeats, racing PUTs of one player, lists larger
// than one transaction) and erases players now and then; after every
// erasure no item names the erased player, every list equals the model's
// and the reverse entries equal the model's inverse.
func TestFriendListsAndTheirReverseEntriesFollowTheModel(t *testing.T) {
	ctx := context.Background()
	client, names, _ := testenv.DynamoDB(t)
	s := &dynamo.Players{DB: client, Table: names.Of(schema.Players), Clock: clock.Fixed(t0)}
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 7))
	var ids []string
	for i := range 14 {
		ids = append(ids, fmt.Sprintf("p%d", i))
	}
	ids = append(ids, "p1-2") // an id that starts like another
	var big []string          // friends who are not players, for long lists
	for i := range 240 {
		big = append(big, fmt.Sprintf("f%03d", i))
	}
	model := friendModel{}
	var erasedIDs []string
	live := slices.Clone(ids)
	for step := range 120 {
		switch op := r.IntN(20); {
		case op == 0 && len(live) > 2:
			p := live[r.IntN(len(live))]
			done, err := s.ErasePlayer(ctx, p)
			if err != nil || !done {
				t.Fatalf("step %d: erase %s: %v %v", step, p, done, err)
			}
			model.erase(p)
			live = slices.DeleteFunc(live, func(x string) bool { return x == p })
			erasedIDs = append(erasedIDs, p)
			checkModel(t, client, s, model, ids, erasedIDs, fmt.Sprintf("step %d, after erasing %s", step, p))
		case op <= 2:
			// Racing PUTs of one player: one of them is the list.
			p := live[r.IntN(len(live))]
			lists := [][]string{randomList(r, live, 6), randomList(r, live, 6), randomList(r, big, 150)}
			var wg sync.WaitGroup
			errs := make([]error, len(lists))
			for i, l := range lists {
				wg.Add(1)
				go func() { defer wg.Done(); errs[i] = s.PutFriends(ctx, p, l) }()
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatalf("step %d: racing puts: %v", step, err)
			}
			got, err := s.Friends(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(lists, func(l []string) bool { return slices.Equal(l, got) }) {
				t.Fatalf("step %d: after racing puts %s's list is %v, none of %v", step, p, got, lists)
			}
			model[p] = got
			if len(got) == 0 {
				delete(model, p)
			}
		case op == 3:
			// A long list, replaced by another long one.
			p := live[r.IntN(len(live))]
			l := randomList(r, big, 240)
			if err := s.PutFriends(ctx, p, l); err != nil {
				t.Fatal(err)
			}
			model[p] = l
		case op == 4:
			// A repeat of the last PUT (a retry).
			p := live[r.IntN(len(live))]
			if err := s.PutFriends(ctx, p, model[p]); err != nil {
				t.Fatal(err)
			}
		default:
			p := live[r.IntN(len(live))]
			l := randomList(r, append(slices.Clone(live), big[:5]...), 8)
			if err := s.PutFriends(ctx, p, l); err != nil {
				t.Fatal(err)
			}
			model[p] = l
		}
		for p, l := range model {
			if len(l) == 0 {
				delete(model, p)
			}
		}
	}
	checkModel(t, client, s, model, ids, erasedIDs, "at the end")
	for _, p := range live {
		if done, err := s.ErasePlayer(ctx, p); err != nil || !done {
			t.Fatalf("erase %s: %v %v", p, done, err)
		}
		model.erase(p)
		erasedIDs = append(erasedIDs, p)
		checkModel(t, client, s, model, ids, erasedIDs, "erasing everyone, after "+p)
	}
}

// legacyList writes a friend list as it was written before reverse
// entries existed.
func legacyList(t *testing.T, client *dynamodb.Client, table, p string, friends []string) {
	t.Helper()
	if _, err := client.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{
		TableName: aws.String(table), Key: map[string]types.AttributeValue{schema.AttrPlayerID: &types.AttributeValueMemberS{Value: p}},
		UpdateExpression:         aws.String("SET #f = :f"),
		ExpressionAttributeNames: map[string]string{"#f": schema.AttrFriendIDs},
		ExpressionAttributeValues: map[string]types.AttributeValue{":f": &types.AttributeValueMemberL{Value: func() []types.AttributeValue {
			var out []types.AttributeValue
			for _, f := range friends {
				out = append(out, &types.AttributeValueMemberS{Value: f})
			}
			return out
		}()}},
	}); err != nil {
		t.Fatal(err)
	}
}

// TestTheFriendsRecomputeIndexesListsOlderThanTheirEntries: lists written
// before the reverse entries existed get them from the recompute, from a
// PUT that adds a friend, and keep them
// exact under removals; an erasure then reaches every one.
func TestTheFriendsRecomputeIndexesListsOlderThanTheirEntries(t *testing.T) {
	ctx := context.Background()
	client, names, _ := testenv.DynamoDB(t)
	table := names.Of(schema.Players)
	s := &dynamo.Players{DB: &testenv.SmallPages{Client: client}, Table: table, Clock: clock.Fixed(t0)}
	var long []string
	for i := range 130 {
		long = append(long, fmt.Sprintf("f%03d", i))
	}
	model := friendModel{
		"ann": {erased, "bo"},
		"bo":  {"cy", erased, erased},
		"cy":  append([]string{erased}, long...),
		"di":  {"ann", erased},
		"ed":  {erased, "ann"},
	}
	for p, l := range model {
		legacyList(t, client, table, p, l)
	}
	ids := []string{"ann", "bo", "cy", "di", "ed", "fa"}
	// Before the recompute: a PUT that only removes keeps di unindexed
	// and exact; one that adds indexes ed first.
	if err := s.PutFriends(ctx, "di", []string{erased}); err != nil {
		t.Fatal(err)
	}
	model["di"] = []string{erased}
	if err := s.PutFriends(ctx, "ed", []string{erased, "ann", "fa"}); err != nil {
		t.Fatal(err)
	}
	model["ed"] = []string{erased, "ann", "fa"}
	after, indexed := "", 0
	for {
		_, n, next, err := s.IndexFriends(ctx, after)
		if err != nil {
			t.Fatal(err)
		}
		indexed += n
		if next == "" {
			break
		}
		after = next
	}
	if indexed != 4 {
		t.Fatalf("the recompute indexed %d lists, want 4 (ann, bo, cy, di)", indexed)
	}
	checkModel(t, client, s, model, ids, nil, "after the recompute")
	if _, n, _, err := s.IndexFriends(ctx, ""); err != nil || n != 0 {
		t.Fatalf("a second recompute indexed %d: %v", n, err)
	}
	if done, err := s.ErasePlayer(ctx, erased); err != nil || !done {
		t.Fatal(done, err)
	}
	model.erase(erased)
	checkModel(t, client, s, model, ids, []string{erased}, "after the erasure")
}

// errCut is the crash a resume test cuts an erasure with.
var errCut = errors.New("cut")

// TestAnErasureCutShortAtAnyWriteIsFinishedByTheNext cuts an erasure
// before its n-th write, for every n (a failed call, or a crash: what
// was written before stays), or ends its context right after the n-th
// (the run reports not done), then runs it again: the outcome is always
// the uncut one's.
func TestAnErasureCutShortAtAnyWriteIsFinishedByTheNext(t *testing.T) {
	ctx := context.Background()
	ids := []string{erased, "bo", "cy", "di", "ed", "fa", "gu"}
	seedLists := friendModel{
		erased: {"bo", "cy", "zz"},
		"bo":   {erased, "cy"},
		"cy":   {erased},
		"di":   {"x", erased, "y", erased},
		"ed":   {"bo", "erased-ann-2"},
		"fa":   {erased, "ed"},
		"gu":   {erased, "bo", "cy"},
	}
	for _, byContext := range []bool{false, true} {
		for n := 1; ; n++ {
			client, names, _ := testenv.DynamoDB(t)
			db := &hooked{Client: client}
			s := &dynamo.Players{DB: db, Table: names.Of(schema.Players), Clock: clock.Fixed(t0)}
			model := friendModel{}
			for p, l := range seedLists {
				if err := s.PutFriends(ctx, p, l); err != nil {
					t.Fatal(err)
				}
				model[p] = slices.Clone(l)
			}
			cctx, cancel := context.WithCancel(ctx)
			writes, cut := 0, false
			if byContext {
				db.after = func() {
					if writes++; writes == n {
						cut = true
						cancel()
					}
				}
			} else {
				db.before = func(context.Context, string) error {
					if writes++; writes == n {
						cut = true
						return errCut
					}
					return nil
				}
			}
			done, err := s.ErasePlayer(cctx, erased)
			cancel()
			if !cut {
				if err != nil || !done {
					t.Fatalf("uncut: %v %v", done, err)
				}
				if n < 4 {
					t.Fatalf("the erasure wrote %d times only", n-1)
				}
				break // n is past the last write
			}
			switch {
			case done:
				t.Fatalf("cut at write %d (by its context: %v), the run says done", n, byContext)
			case !byContext && !errors.Is(err, errCut):
				t.Fatalf("cut before write %d: %v", n, err)
			}
			db.before, db.after = nil, nil
			if done, err := s.ErasePlayer(ctx, erased); err != nil || !done {
				t.Fatalf("resumed after a cut at write %d: %v %v", n, done, err)
			}
			model.erase(erased)
			checkModel(t, client, s, model, ids, []string{erased}, fmt.Sprintf("cut at write %d (by its context: %v), resumed", n, byContext))
		}
	}
}
