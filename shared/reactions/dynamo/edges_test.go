package dynamo_test

import (
	"context"
	"fmt"
	"math/rand"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/shared/errs"
	"github.com/rallyhq/rally/shared/reactions"
	"github.com/rallyhq/rally/shared/reactions/dynamo"
	"github.com/rallyhq/rally/shared/schema"
	"github.com/rallyhq/rally/shared/streams"
)

// t0 is in the coming year: DynamoDB Local expires items by TTL against the
// wall clock, and markers and buckets written at t0 must outlive the test.
var t0 = time.Date(time.Now().Year()+1, 11, 22, 10, 0, 0, 0, time.UTC)

func newEdges(t *testing.T) *dynamo.Edges {
	t.Helper()
	db, names, _ := testenv.DynamoDB(t)
	return &dynamo.Edges{DB: db, Table: names.Of(schema.Reactions)}
}

func TestAddAndRemoveChangeStateOnceAndBumpTheVersion(t *testing.T) {
	ctx := context.Background()
	s := newEdges(t)
	ref := reactions.Ref{UserID: "alice", Kind: reactions.Favorite, TargetID: "g1"}

	e, changed, err := s.Add(ctx, ref, t0, reactions.InTrending)
	if err != nil || !changed || !e.Active() || e.Version != 1 || !e.CreatedAt.Equal(t0) {
		t.Fatalf("first add: %+v changed=%v err=%v", e, changed, err)
	}
	e, changed, err = s.Add(ctx, ref, t0.Add(time.Minute), reactions.InTrending)
	if err != nil || changed || e.Version != 1 || !e.CreatedAt.Equal(t0) {
		t.Fatalf("repeated add must change nothing and report the original time: %+v changed=%v err=%v", e, changed, err)
	}
	e, changed, err = s.Remove(ctx, ref, t0.Add(2*time.Minute))
	if err != nil || !changed || e.Active() || e.Version != 2 {
		t.Fatalf("remove: %+v changed=%v err=%v", e, changed, err)
	}
	if _, changed, _ = s.Remove(ctx, ref, t0.Add(3*time.Minute)); changed {
		t.Fatal("removing a removed edge reported a change")
	}
	never := reactions.Ref{UserID: "alice", Kind: reactions.Favorite, TargetID: "never"}
	if _, changed, err = s.Remove(ctx, never, t0); changed || err != nil {
		t.Fatalf("removing an edge that never existed: changed=%v err=%v", changed, err)
	}
	e, changed, _ = s.Add(ctx, ref, t0.Add(4*time.Minute), reactions.InTrending)
	if !changed || e.Version != 3 || !e.CreatedAt.Equal(t0.Add(4*time.Minute)) {
		t.Fatalf("re-adding: %+v changed=%v", e, changed)
	}
	got, err := s.Get(ctx, "alice", reactions.Favorite, []string{"g1", "never", "g1"})
	if err != nil || len(got) != 2 || !got["g1"].Active() || got["never"].Active() || got["never"].Version != 0 {
		t.Fatalf("get: %+v %v", got, err)
	}
}

// Conditional writes make exactly one of many concurrent favorites of the
// same edge report a change.
func TestConcurrentAddsOfOneEdgeChangeItOnce(t *testing.T) {
	s := newEdges(t)
	ref := reactions.Ref{UserID: "bob", Kind: reactions.Like, TargetID: "p1"}
	var wg sync.WaitGroup
	var mu sync.Mutex
	changes := 0
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, changed, err := s.Add(context.Background(), ref, t0, reactions.InTrending)
			if err != nil {
				t.Error(err)
			}
			if changed {
				mu.Lock()
				changes++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if changes != 1 {
		t.Fatalf("%d adds reported a change, want exactly 1", changes)
	}
}

// Goroutines favoriting and unfavoriting one edge: successful adds and
// removes alternate, so the final state is the last successful write.
func TestRacingAddsAndRemovesEndInTheLastSuccessfulWrite(t *testing.T) {
	s := newEdges(t)
	ref := reactions.Ref{UserID: "carol", Kind: reactions.Favorite, TargetID: "g9"}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var adds, removes int
	var lastVersion int64
	lastActive := false
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(seed int64) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(seed))
			for i := 0; i < 25; i++ {
				var e reactions.Edge
				var changed bool
				var err error
				if rng.Intn(2) == 0 {
					e, changed, err = s.Add(context.Background(), ref, t0, reactions.InTrending)
				} else {
					e, changed, err = s.Remove(context.Background(), ref, t0)
				}
				if err != nil {
					t.Error(err)
					return
				}
				if changed {
					mu.Lock()
					if e.Active() {
						adds++
					} else {
						removes++
					}
					if e.Version > lastVersion {
						lastVersion, lastActive = e.Version, e.Active()
					}
					mu.Unlock()
				}
			}
		}(int64(g))
	}
	wg.Wait()
	final, err := s.Get(context.Background(), ref.UserID, ref.Kind, []string{ref.TargetID})
	if err != nil {
		t.Fatal(err)
	}
	e := final[ref.TargetID]
	if e.Version != lastVersion || e.Active() != lastActive {
		t.Fatalf("final %+v, last successful write had version %d active=%v", e, lastVersion, lastActive)
	}
	if want := adds - removes; want < 0 || want > 1 || (want == 1) != e.Active() {
		t.Fatalf("%d successful adds and %d removes cannot end in active=%v", adds, removes, e.Active())
	}
	if int64(adds+removes) != e.Version {
		t.Fatalf("version %d after %d state changes", e.Version, adds+removes)
	}
}

// With an Idempotency-Key, the flip records the key on the edge: a retry
// gets the edge as the flip left it and flips nothing, even after other
// flips; the key with another request is refused; a toggle costs the
// edge's write and its target's entry, 2 WCU, as one without a key.
func TestAToggleRetryFindsItsFlipOnTheEdge(t *testing.T) {
	ctx := context.Background()
	s, c := meteredEdges(t)
	ref := reactions.Ref{UserID: "dave", Kind: reactions.Like, TargetID: "p7"}
	toggle := func(at time.Time, key, hash string) (reactions.Edge, bool, error) {
		commit := &reactions.Commit{Key: key, Hash: hash}
		e, err := s.Toggle(ctx, ref, at, reactions.InTrending, commit)
		return e, commit.Replayed, err
	}
	e, replayed, err := toggle(t0, "k1", "h1")
	if err != nil || !e.Active() || e.Version != 1 || replayed {
		t.Fatalf("toggle: %+v replayed=%v %v", e, replayed, err)
	}
	if c.wcu != 2 {
		t.Errorf("a keyed toggle cost %v WCU, want 2", c.wcu)
	}
	if e, replayed, err = toggle(t0.Add(time.Second), "k1", "h1"); err != nil || !e.Active() || e.Version != 1 || !replayed {
		t.Fatalf("a retry must replay the flip: %+v replayed=%v %v", e, replayed, err)
	}
	if e, _, err = toggle(t0.Add(2*time.Second), "k2", "h2"); err != nil || e.Active() || e.Version != 2 {
		t.Fatalf("another key flips again: %+v %v", e, err)
	}
	// The first key's retry, after the second flip, still answers liked.
	if e, replayed, err = toggle(t0.Add(3*time.Second), "k1", "h1"); err != nil || !e.Active() || !replayed {
		t.Fatalf("a late retry must replay the first flip's state: %+v replayed=%v %v", e, replayed, err)
	}
	if _, _, err = toggle(t0.Add(4*time.Second), "k1", "another request"); !errs.Is(err, errs.KeyReused) {
		t.Fatalf("the key with another request: %v, want key reused", err)
	}
	if e, err := s.Get(ctx, "dave", reactions.Like, []string{"p7"}); err != nil || e["p7"].Active() || e["p7"].Version != 2 {
		t.Fatalf("retries must have changed nothing: %+v %v", e, err)
	}
	// A day later the key is forgotten, as an Idempotency-Key record would be.
	if e, replayed, err = toggle(t0.Add(reactions.FlipMemoryFor+time.Minute), "k1", "h1"); err != nil || replayed || !e.Active() {
		t.Fatalf("a day later the key is new: %+v replayed=%v %v", e, replayed, err)
	}
}

// Retries racing the first attempt flip the edge once: the losers find
// the winner's key when they read the edge again.
func TestRacingRetriesOfAToggleFlipOnce(t *testing.T) {
	s := newEdges(t)
	ref := reactions.Ref{UserID: "gus", Kind: reactions.Like, TargetID: "p9"}
	var wg sync.WaitGroup
	var mu sync.Mutex
	liked, replays := 0, 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			commit := &reactions.Commit{Key: "same", Hash: "h"}
			e, err := s.Toggle(context.Background(), ref, t0, reactions.InTrending, commit)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if e.Active() {
				liked++
			}
			if commit.Replayed {
				replays++
			}
		}()
	}
	wg.Wait()
	if liked != 8 || replays != 7 {
		t.Fatalf("%d answers liked and %d replayed, want 8 and 7", liked, replays)
	}
	got, err := s.Get(context.Background(), "gus", reactions.Like, []string{"p9"})
	if err != nil || got["p9"].Version != 1 {
		t.Fatalf("the edge flipped more than once: %+v %v", got, err)
	}
}

// An edge remembers its last FlipMemory keys: the item stays one write
// unit however many flips it had.
func TestAnEdgeRemembersItsLastFlipsAndStaysSmall(t *testing.T) {
	ctx := context.Background()
	s, c := meteredEdges(t)
	ref := reactions.Ref{UserID: "hal", Kind: reactions.Like, TargetID: "p1"}
	key := func(i int) string { return fmt.Sprintf("%0200d", i) } // long keys: only their digest is kept
	for i := range 3 * reactions.FlipMemory {
		c.wcu = 0
		if _, err := s.Toggle(ctx, ref, t0.Add(time.Duration(i)*time.Second), reactions.InTrending, &reactions.Commit{Key: key(i), Hash: "0123456789abcdef0123"}); err != nil {
			t.Fatal(err)
		}
		if c.wcu > 2 {
			t.Fatalf("flip %d cost %v WCU: the edge outgrew a write unit", i, c.wcu)
		}
	}
	last := 3*reactions.FlipMemory - 1
	for _, k := range []struct {
		i      int
		replay bool
	}{{last, true}, {last - reactions.FlipMemory + 1, true}, {last - reactions.FlipMemory, false}} {
		commit := &reactions.Commit{Key: key(k.i), Hash: "0123456789abcdef0123"}
		if _, err := s.Toggle(ctx, ref, t0.Add(time.Hour), reactions.InTrending, commit); err != nil || commit.Replayed != k.replay {
			t.Fatalf("key %d: replayed=%v %v, want %v", k.i, commit.Replayed, err, k.replay)
		}
		if !k.replay {
			break
		}
	}
}

func TestConcurrentTogglesAllApply(t *testing.T) {
	s := newEdges(t)
	ref := reactions.Ref{UserID: "erin", Kind: reactions.Like, TargetID: "p3"}
	var wg sync.WaitGroup
	for i := 0; i < 10; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Toggle(context.Background(), ref, t0, reactions.InTrending, nil); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	got, _ := s.Get(context.Background(), ref.UserID, ref.Kind, []string{ref.TargetID})
	if e := got[ref.TargetID]; e.Version != 10 || e.Active() {
		t.Fatalf("after 10 toggles: %+v, want version 10 and inactive", e)
	}
}

func TestListIsNewestFirstPagedAndSkipsRemovedEdges(t *testing.T) {
	ctx := context.Background()
	s := newEdges(t)
	for i := 0; i < 7; i++ {
		ref := reactions.Ref{UserID: "fay", Kind: reactions.Favorite, TargetID: fmt.Sprintf("g%d", i)}
		if _, _, err := s.Add(ctx, ref, t0.Add(time.Duration(i)*time.Minute), reactions.InTrending); err != nil {
			t.Fatal(err)
		}
	}
	// A like and a removed favorite must not show up in the favorites list.
	if _, _, err := s.Add(ctx, reactions.Ref{UserID: "fay", Kind: reactions.Like, TargetID: "p1"}, t0, reactions.InTrending); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Remove(ctx, reactions.Ref{UserID: "fay", Kind: reactions.Favorite, TargetID: "g3"}, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	var got []string
	var after reactions.Position
	pages := 0
	for {
		page, err := s.List(ctx, "fay", reactions.Favorite, 2, after)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, e := range page.Edges {
			got = append(got, e.TargetID)
		}
		if page.Next == nil {
			break
		}
		after = page.Next
	}
	want := []string{"g6", "g5", "g4", "g2", "g1", "g0"}
	if fmt.Sprint(got) != fmt.Sprint(want) || pages != 3 {
		t.Fatalf("listed %v in %d pages, want %v in 3 (no empty last page)", got, pages, want)
	}
}

// Each activation writes whether it counts in trending; the stream
// carries it to the counter on the activation and, from the old image, on
// the deactivation or deletion that ends it, so every trending -1 takes
// back an earlier +1. The jobs' count of a target's edges in trending
// follows the same flag, and an edge written before it existed counts.
func TestTheTrendFlagRidesFromEachActivationToItsEnd(t *testing.T) {
	ctx := context.Background()
	s := newEdges(t)
	ref := reactions.Ref{UserID: "gil", Kind: reactions.Favorite, TargetID: "g1"}
	target := ref.Target()
	if _, _, err := s.Add(ctx, reactions.Ref{UserID: "hal", Kind: reactions.Favorite, TargetID: "g1"}, t0, reactions.InTrending); err != nil {
		t.Fatal(err)
	}
	item := func() map[string]types.AttributeValue {
		t.Helper()
		out, err := s.DB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.Table), ConsistentRead: aws.Bool(true), Key: map[string]types.AttributeValue{
			schema.AttrUserID: &types.AttributeValueMemberS{Value: ref.UserID}, schema.AttrEdge: &types.AttributeValueMemberS{Value: "favorite#g1"},
		}})
		if err != nil {
			t.Fatal(err)
		}
		return out.Item
	}
	totals := func(want reactions.Totals) {
		t.Helper()
		if got, err := s.CountActive(ctx, target); err != nil || got != want {
			t.Fatalf("active edges of g1: %+v %v, want %+v", got, err, want)
		}
	}
	prev := map[string]types.AttributeValue(nil)
	step := func(name string, write func() error, delta int, trend bool) {
		t.Helper()
		if err := write(); err != nil {
			t.Fatal(err)
		}
		cur := item()
		c, ok, err := dynamo.ChangeFromRecord(events.DynamoDBEventRecord{Change: events.DynamoDBStreamRecord{
			OldImage: streams.FromItem(prev), NewImage: streams.FromItem(cur), SequenceNumber: name,
		}})
		if err != nil || !ok || c.Delta != delta || c.Trend != trend || c.Deleted != (cur == nil) {
			t.Fatalf("%s: decoded %+v ok=%v %v; want delta %d, trend %v", name, c, ok, err, delta, trend)
		}
		prev = cur
	}
	out := reactions.OutOfTrending
	step("young favorite", func() error { _, _, err := s.Add(ctx, ref, t0, out); return err }, 1, false)
	totals(reactions.Totals{Count: 2, Trending: 1})
	step("its unfavorite", func() error { _, _, err := s.Remove(ctx, ref, t0.Add(time.Minute)); return err }, -1, false)
	totals(reactions.Totals{Count: 1, Trending: 1})
	step("trusted favorite", func() error { _, _, err := s.Add(ctx, ref, t0.Add(2*time.Minute), reactions.InTrending); return err }, 1, true)
	totals(reactions.Totals{Count: 2, Trending: 2})
	// A favorite of a favorited game changes nothing, its flag included.
	if _, changed, err := s.Add(ctx, ref, t0.Add(3*time.Minute), out); err != nil || changed {
		t.Fatalf("a repeated favorite: changed=%v %v", changed, err)
	}
	if cur := item(); !reflect.DeepEqual(cur, prev) {
		t.Fatalf("a repeated favorite rewrote the edge: %v, was %v", cur, prev)
	}
	totals(reactions.Totals{Count: 2, Trending: 2})
	step("trusted unfavorite", func() error { _, err := s.Toggle(ctx, ref, t0.Add(4*time.Minute), out, nil); return err }, -1, true)
	totals(reactions.Totals{Count: 1, Trending: 1})
	step("toggle out of trending", func() error { _, err := s.Toggle(ctx, ref, t0.Add(5*time.Minute), out, nil); return err }, 1, false)
	totals(reactions.Totals{Count: 2, Trending: 1})
	step("erasure", func() error {
		_, err := s.DB.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(s.Table), Key: map[string]types.AttributeValue{
			schema.AttrUserID: &types.AttributeValueMemberS{Value: ref.UserID}, schema.AttrEdge: &types.AttributeValueMemberS{Value: "favorite#g1"},
		}})
		return err
	}, -1, false)
	totals(reactions.Totals{Count: 1, Trending: 1})

	// An edge written before the flag existed counts in trending.
	legacy := item()
	if legacy != nil {
		t.Fatalf("the erased edge is still there: %v", legacy)
	}
	if _, _, err := s.Add(ctx, ref, t0.Add(6*time.Minute), reactions.InTrending); err != nil {
		t.Fatal(err)
	}
	legacy = item()
	delete(legacy, schema.AttrTrend)
	c, ok, err := dynamo.ChangeFromRecord(events.DynamoDBEventRecord{Change: events.DynamoDBStreamRecord{OldImage: streams.FromItem(legacy), SequenceNumber: "legacy"}})
	if err != nil || !ok || c.Delta != -1 || !c.Trend {
		t.Fatalf("the deletion of an edge without the flag: %+v ok=%v %v; want -1 in trending", c, ok, err)
	}
}

// meteredEdges is an edge store whose updates' capacity c sums.
func meteredEdges(t *testing.T) (*dynamo.Edges, *capacityDB) {
	t.Helper()
	db, names, _ := testenv.DynamoDB(t)
	c := &capacityDB{Client: db}
	return &dynamo.Edges{DB: c, Table: names.Of(schema.Reactions)}, c
}

// capacityDB asks each UpdateItem for the capacity it consumed and sums it.
type capacityDB struct {
	*dynamodb.Client
	wcu float64
}

func (c *capacityDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	in.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
	out, err := c.Client.UpdateItem(ctx, in, o...)
	if err == nil && out.ConsumedCapacity != nil {
		c.wcu += aws.ToFloat64(out.ConsumedCapacity.CapacityUnits)
	}
	return out, err
}

// A favorite is listed newest first; a like is never listed, so it stays
// out of the by_time index and its write costs one unit less: the edge and
// its target's entry (2 WCU) against a favorite's 3.
func TestALikeCostsNoListingWrite(t *testing.T) {
	ctx := context.Background()
	s, c := meteredEdges(t)
	like := reactions.Ref{UserID: "fay", Kind: reactions.Like, TargetID: "p1"}
	fav := reactions.Ref{UserID: "fay", Kind: reactions.Favorite, TargetID: "g1"}
	if _, _, err := s.Add(ctx, like, t0, reactions.InTrending); err != nil {
		t.Fatal(err)
	}
	if c.wcu != 2 {
		t.Errorf("a like cost %v WCU, want 2 (the edge and its target's entry)", c.wcu)
	}
	c.wcu = 0
	if _, _, err := s.Add(ctx, fav, t0, reactions.InTrending); err != nil {
		t.Fatal(err)
	}
	if c.wcu != 3 {
		t.Errorf("a favorite cost %v WCU, want 3 (the edge, its place in the list and its target's entry)", c.wcu)
	}
	page, err := s.List(ctx, "fay", reactions.Favorite, 10, nil)
	if err != nil || len(page.Edges) != 1 || page.Edges[0].TargetID != "g1" {
		t.Fatalf("favorites list: %+v %v", page, err)
	}
	if got, err := s.CountActive(ctx, like.Target()); err != nil || got.Count != 1 {
		t.Fatalf("the like must still count for its post: %+v %v", got, err)
	}
}

// A target's counts come from its edges: those in trending, those kept
// out (in a by_target partition of their own, at no extra index write),
// and those kept out before that split (in by_untrended too).
func TestCountingSeesEdgesInAndOutOfTrendingOldAndNew(t *testing.T) {
	ctx := context.Background()
	s, c := meteredEdges(t)
	db, table := c.Client, s.Table
	g := reactions.Target{Kind: reactions.Favorite, ID: "g1"}
	ref := func(user string) reactions.Ref { return reactions.Ref{UserID: user, Kind: g.Kind, TargetID: g.ID} }
	if _, _, err := s.Add(ctx, ref("fan"), t0, reactions.InTrending); err != nil {
		t.Fatal(err)
	}
	c.wcu = 0
	if _, _, err := s.Add(ctx, ref("young"), t0, reactions.OutOfTrending); err != nil {
		t.Fatal(err)
	}
	if c.wcu != 3 {
		t.Errorf("a favorite kept out of trending cost %v WCU, want 3 as any other", c.wcu)
	}
	// An edge kept out of trending as it was written before the split.
	legacy := map[string]types.AttributeValue{
		schema.AttrUserID: &types.AttributeValueMemberS{Value: "old"}, schema.AttrEdge: &types.AttributeValueMemberS{Value: "favorite#g1"},
		"kind": &types.AttributeValueMemberS{Value: "favorite"}, "target_id": &types.AttributeValueMemberS{Value: "g1"},
		schema.AttrState: &types.AttributeValueMemberS{Value: string(reactions.Active)}, schema.AttrVer: &types.AttributeValueMemberN{Value: "1"},
		schema.AttrListedAt: &types.AttributeValueMemberS{Value: "favorite#2020-01-01T00:00:00.000Z#g1"},
		schema.AttrTarget:   &types.AttributeValueMemberS{Value: "favorite#g1"}, schema.AttrUntrended: &types.AttributeValueMemberS{Value: "favorite#g1"},
		"trend": &types.AttributeValueMemberBOOL{Value: false},
	}
	if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: legacy}); err != nil {
		t.Fatal(err)
	}
	want := func(count, trending int64) {
		t.Helper()
		got, err := s.CountActive(ctx, g)
		if err != nil || got != (reactions.Totals{Count: count, Trending: trending}) {
			t.Fatalf("counted %+v (%v), want %d edges, %d in trending", got, err, count, trending)
		}
	}
	want(3, 1)
	if _, _, err := s.Remove(ctx, ref("young"), t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	want(2, 1)
	// The old edge's next change leaves by_untrended behind.
	if _, _, err := s.Remove(ctx, ref("old"), t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Add(ctx, ref("old"), t0.Add(2*time.Minute), reactions.InTrending); err != nil {
		t.Fatal(err)
	}
	want(2, 2)
	targets, _, err := s.ScanTargets(ctx, nil)
	if err != nil || len(targets) != 1 || targets[0] != g {
		t.Fatalf("targets: %v %v", targets, err)
	}
	if _, _, err := s.Add(ctx, ref("young-2"), t0, reactions.OutOfTrending); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Remove(ctx, ref("fan"), t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Remove(ctx, ref("old"), t0.Add(3*time.Minute)); err != nil {
		t.Fatal(err)
	}
	want(1, 0)
	if targets, _, err = s.ScanTargets(ctx, nil); err != nil || len(targets) != 1 || targets[0] != g {
		t.Fatalf("a target whose every edge is out of trending must still be found: %v %v", targets, err)
	}
}
