package privacy_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rallyhq/rally/shared/app/all"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/parquet-go/parquet-go"

	"github.com/rallyhq/rally/infra/local/apitest"
	"github.com/rallyhq/rally/infra/local/stack"
	"github.com/rallyhq/rally/infra/local/stacktest"
	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/infra/local/testenv/await"
	"github.com/rallyhq/rally/shared/analytics"
	"github.com/rallyhq/rally/shared/exports"
	"github.com/rallyhq/rally/shared/privacy"
	privacybind "github.com/rallyhq/rally/shared/privacy/bind"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
	"github.com/rallyhq/rally/shared/streams"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// The user erased in these tests, and players who stay. The id is
// distinctive so that finding it anywhere means it was left behind.
const (
	erased = "zed-erasable-7q"
	bob    = "bob"
	cat    = "cat"
)

// world is a local stack with a day of activity by the erased user and
// two others: favorites and likes (with an Idempotency-Key), scores on an
// all-time and a daily board over two days, friends, profiles, activity in
// a region over two days, and their analytics export.
type world struct {
	s   *stack.Stack
	c   *apitest.Client
	dir string
	// erasures gates the erasure processor: closed, it acknowledges its
	// records without acting, as if a run had crashed after reading them.
	erasures atomic.Bool
}

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{dir: t.TempDir()}
	w.erasures.Store(true)
	var real atomic.Pointer[streams.Handler]
	gate := func(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		h := real.Load()
		if h == nil || !w.erasures.Load() {
			return events.DynamoDBEventResponse{}, nil
		}
		return (*h)(ctx, ev)
	}
	w.s = stacktest.Start(t, stack.Options{StateDir: w.dir, Processors: map[string]streams.Handler{
		routes.ErasureProcessor.Function: gate,
	}})
	h := w.s.Deps().Stream(all.Erasure, routes.ErasureProcessor)
	real.Store(&h)
	w.c = apitest.New(t, w.s)
	// Items with a TTL are dated in the coming year: DynamoDB Local expires
	// them against the wall clock.
	day1 := time.Date(time.Now().Year()+1, 5, 4, 9, 0, 0, 0, time.UTC)
	w.s.Clock().Set(day1)

	c := w.c
	for _, g := range []string{"g1", "g2"} {
		c.Service("PUT", "/v1/games/"+g, map[string]any{"title": "Game " + g}).Expect(t, 200)
	}
	c.Service("PUT", "/v1/leaderboards/cup", map[string]any{"title": "Cup", "policy": "increment"}).Expect(t, 201)
	c.Service("PUT", "/v1/leaderboards/sprint", map[string]any{"title": "Sprint", "policy": "best", "reset": "daily"}).Expect(t, 201)
	for _, p := range []string{erased, bob, cat} {
		c.Service("PUT", "/v1/players/"+p+"/profile", map[string]any{"display_name": "Player " + p, "region": "eu"}).Expect(t, 200)
	}
	c.Service("PUT", "/v1/players/"+erased+"/friends", map[string]any{"friend_ids": []string{bob}}).Expect(t, 200)
	c.Service("PUT", "/v1/players/"+bob+"/friends", map[string]any{"friend_ids": []string{erased, cat}}).Expect(t, 200)
	c.Service("PUT", "/v1/players/"+cat+"/friends", map[string]any{"friend_ids": []string{erased}}).Expect(t, 200)

	submit := func(board, player, match string, score int) {
		c.Service("POST", "/v1/leaderboards/"+board+"/scores", map[string]any{"player_id": player, "match_id": match, "score": score}).Expect(t, 200)
	}
	act := func(player, key string) { // a game server reports a won match
		c.Do(apitest.Call{Method: "POST", Path: "/v1/ops/activity", Service: true, Header: map[string]string{"Idempotency-Key": key},
			Body: map[string]any{"user_id": player, "event_type": "MATCH_WON", "source": "console"}}).Expect(t, 200)
	}
	submit("cup", erased, "m1", 50)
	submit("cup", erased, "m2", 70)
	submit("cup", bob, "m1", 30)
	submit("sprint", erased, "m1", 900)
	submit("sprint", bob, "m1", 400)
	act(erased, "a1")
	act(bob, "b1")

	w.s.Clock().Set(day1.Add(24 * time.Hour))
	submit("sprint", erased, "m2", 800)
	submit("sprint", cat, "m2", 100)
	act(erased, "a2")
	act(cat, "c1")
	// Reactions come last, on the day of the erasure: their rate-limit
	// counters live for the current minute (by the stack's clock, which
	// jumped a day above, while Redis expires them by the wall clock).
	c.Do(apitest.Call{Method: "POST", Path: "/v1/favorites/g1", As: erased, Header: map[string]string{"Idempotency-Key": "fav-g1"}}).Expect(t, 200)
	c.Player(erased, "POST", "/v1/favorites/g2", nil).Expect(t, 200)
	c.Player(erased, "DELETE", "/v1/favorites/g2", nil).Expect(t, 200)
	c.Player(erased, "PUT", "/v1/posts/p1/like", nil).Expect(t, 200)
	c.Player(bob, "POST", "/v1/favorites/g1", nil).Expect(t, 200)
	c.Player(cat, "PUT", "/v1/posts/p1/like", nil).Expect(t, 200)
	w.idle(t)
	// The user exported their data: a record and a document to erase.
	var export struct {
		ExportID string `json:"export_id"`
		Status   string `json:"status"`
	}
	c.Player(erased, "POST", "/v1/users/"+erased+"/export", nil).Expect(t, 202).JSON(t, &export)
	await.Success(t, time.Minute, "the export ready", func() error {
		w.idle(t)
		c.Service("GET", "/v1/ops/users/"+erased+"/exports/"+export.ExportID, nil).Expect(t, 200).JSON(t, &export)
		if export.Status != "READY" {
			return fmt.Errorf("still %s", export.Status)
		}
		return nil
	})
	if len(w.exportFiles(t, erased)) == 0 {
		t.Fatal("the export left no document")
	}
	return w
}

// exportFiles lists the export documents and chunks of user.
func (w *world) exportFiles(t *testing.T, user string) []string {
	t.Helper()
	var found []string
	err := filepath.WalkDir(filepath.Join(w.dir, exports.UserPrefix(w.hash(user))), func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err == nil && !d.IsDir() {
			found = append(found, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

func (w *world) idle(t *testing.T) {
	t.Helper()
	if err := w.s.WaitIdle(context.Background()); err != nil {
		t.Fatal(err)
	}
}

type erasureBody struct {
	ErasureID   string     `json:"erasure_id"`
	Status      string     `json:"status"`
	RequestedAt time.Time  `json:"requested_at"`
	CompletedAt *time.Time `json:"completed_at"`
}

// erase asks for an erasure as a service and returns the answer.
func (w *world) erase(t *testing.T, user string) erasureBody {
	t.Helper()
	var b erasureBody
	w.c.Service("DELETE", "/v1/ops/users/"+user, nil).Expect(t, 202).JSON(t, &b)
	if b.Status != "PENDING" || !strings.HasPrefix(b.ErasureID, "er_") {
		t.Fatalf("erasure answer %+v", b)
	}
	return b
}

// completed waits until the erasure of user is COMPLETED, then until every
// processor has delivered what it caused.
func (w *world) completed(t *testing.T, user, id string) erasureBody {
	t.Helper()
	var b erasureBody
	await.Success(t, 60*time.Second, "erasure "+id+" completed", func() error {
		b = erasureBody{}
		w.c.Service("GET", "/v1/ops/users/"+user+"/erasure", nil).Expect(t, 200).JSON(t, &b)
		if b.ErasureID != id {
			t.Fatalf("status of erasure %s reports %+v", id, b)
		}
		if b.Status == "COMPLETED" {
			return nil
		}
		// Let the processors deliver what the erasure caused so far; its
		// next step waits for the processor's next tick, locally every
		// second.
		if err := w.s.WaitIdle(context.Background()); err != nil {
			t.Fatal(err)
		}
		return fmt.Errorf("still %s", b.Status)
	})
	if b.CompletedAt == nil || b.CompletedAt.Before(b.RequestedAt) {
		t.Fatalf("completed erasure without a sensible completion time: %+v", b)
	}
	w.idle(t)
	return b
}

// secret reads a player's analytics secret.
func (w *world) secret(t *testing.T, user string) []byte {
	t.Helper()
	out, err := w.s.DB().GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String(w.s.Tables().Of(schema.AnalyticsSecrets)),
		Key:       map[string]types.AttributeValue{schema.AttrUserID: &types.AttributeValueMemberS{Value: user}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if b, ok := out.Item[analytics.SecretAttr].(*types.AttributeValueMemberB); ok {
		return b.Value
	}
	return nil
}

// tablesHolding scans every table and returns "table: item" for each item
// that mentions id, and the Erasures items.
func (w *world) tablesHolding(t *testing.T, id string) (found []string, erasures []map[string]types.AttributeValue) {
	t.Helper()
	for _, tbl := range schema.Tables() {
		for _, it := range testenv.TableItems(t, w.s.DB(), w.s.Tables().Of(tbl)) {
			if tbl.Name == schema.Erasures.Name {
				erasures = append(erasures, it)
			}
			if testenv.Mentions(&types.AttributeValueMemberM{Value: it}, id) {
				found = append(found, fmt.Sprintf("%s: %v", tbl.Name, it))
			}
		}
	}
	return found, erasures
}

// hash is the erasure hash of id under the stack's erasure key.
func (w *world) hash(id string) string { return privacybind.Hasher(w.s.Deps()).Hash(id) }

// traceless asserts that nothing but the hashed erasure record holds id.
func (w *world) traceless(t *testing.T, id string) {
	t.Helper()
	found, erasures := w.tablesHolding(t, id)
	for _, f := range found {
		t.Errorf("left behind in DynamoDB: %s", f)
	}
	var mine int
	for _, it := range erasures {
		if h, ok := it[schema.AttrUserHash].(*types.AttributeValueMemberS); ok && h.Value == w.hash(id) {
			mine++
			for _, attr := range []string{"user_id", "pending", "lease_until"} {
				if _, ok := it[attr]; ok {
					t.Errorf("the completed erasure record keeps %s: %v", attr, it)
				}
			}
		}
	}
	if mine != 1 {
		t.Errorf("%d erasure records for the hash of %s, want 1", mine, id)
	}
	// Nothing else keeps the hash either (the versions an erasure awaits).
	byHash, _ := w.tablesHolding(t, w.hash(id))
	for _, f := range byHash {
		if !strings.HasPrefix(f, schema.Erasures.Name+":") {
			t.Errorf("left behind under the user's hash: %s", f)
		}
	}
	for _, k := range testenv.RedisTraces(t, w.s.Deps().Redis, id) {
		t.Errorf("left behind in Redis: %s", k)
	}
	for _, f := range w.exportFiles(t, id) {
		t.Errorf("an export document left behind: %s", f)
	}
}

func (w *world) getJSON(t *testing.T, as, path string, v any) {
	t.Helper()
	var r apitest.Response
	if as == "" {
		r = w.c.Service("GET", path, nil)
	} else {
		r = w.c.Player(as, "GET", path, nil)
	}
	r.Expect(t, 200).JSON(t, v)
}

func (w *world) count(t *testing.T, path string) int64 {
	t.Helper()
	var b struct {
		Count int64 `json:"count"`
	}
	w.getJSON(t, bob, path, &b)
	return b.Count
}

type entries struct {
	Entries []struct {
		PlayerID string `json:"player_id"`
		UserID   string `json:"user_id"`
		Rank     int    `json:"rank"`
	} `json:"entries"`
	Total *int64 `json:"total"`
}

func (e entries) ids() []string {
	var out []string
	for _, x := range e.Entries {
		out = append(out, x.PlayerID+x.UserID)
	}
	return out
}

// TestErasureLeavesNoTraceAndEveryCountFollows erases a user with data in
// every table through the API and checks what the issue asks: no item
// anywhere but the hashed record, no Redis key or member, counts, trending,
// boards and friends without them, their exported rows unlinkable; a second
// erasure is harmless.
func TestErasureLeavesNoTraceAndEveryCountFollows(t *testing.T) {
	w := newWorld(t)
	c := w.c
	if got := w.count(t, "/v1/games/g1/favorites/count"); got != 2 {
		t.Fatalf("g1 has %d favorites before the erasure, want 2", got)
	}
	if got := w.trending(t); len(got) != 1 || got[0].GameID != "g1" || got[0].Score != 2 {
		t.Fatalf("trending before the erasure: %+v, want g1 with 2", got)
	}
	secret := w.secret(t, erased)
	if secret == nil {
		t.Fatal("the user has no analytics secret before the erasure")
	}
	friendsBefore := w.friends(t)
	period1 := w.s.Clock().Now().Add(-24 * time.Hour).Format("2006-01-02")

	// Refusals write nothing.
	c.Player(bob, "DELETE", "/v1/users/"+erased, nil).Expect(t, 403)
	c.Player(bob, "GET", "/v1/users/"+erased+"/erasure", nil).Expect(t, 403)
	c.Service("DELETE", "/v1/ops/users/not%20an%20id", nil).Expect(t, 400)
	c.Player(erased, "DELETE", "/v1/ops/users/"+erased, nil).Expect(t, 403)
	c.Player(erased, "GET", "/v1/users/"+erased+"/erasure", nil).Expect(t, 404)
	if _, erasures := w.tablesHolding(t, erased); len(erasures) != 0 {
		t.Fatalf("a refused erasure wrote %v", erasures)
	}

	// The player erases themselves; asking again returns the same erasure.
	var first erasureBody
	c.Player(erased, "DELETE", "/v1/users/"+erased, nil).Expect(t, 202).JSON(t, &first)
	if again := w.erase(t, erased); again.ErasureID != first.ErasureID {
		t.Fatalf("a second request while pending started %s, want %s", again.ErasureID, first.ErasureID)
	}
	var own erasureBody
	w.getJSON(t, erased, "/v1/users/"+erased+"/erasure", &own)
	if own.ErasureID != first.ErasureID {
		t.Fatalf("the player sees erasure %+v", own)
	}
	w.completed(t, erased, first.ErasureID)
	w.traceless(t, erased)

	if got := w.count(t, "/v1/games/g1/favorites/count"); got != 1 {
		t.Errorf("g1 has %d favorites after the erasure, want 1 (bob's)", got)
	}
	if got := w.count(t, "/v1/games/g2/favorites/count"); got != 0 {
		t.Errorf("g2 has %d favorites, want 0", got)
	}
	if got := w.count(t, "/v1/posts/p1/likes/count"); got != 1 {
		t.Errorf("p1 has %d likes after the erasure, want 1 (cat's)", got)
	}
	// Summed trending windows are reused for a few seconds.
	await.Success(t, 15*time.Second, "trending after the erasure is g1 with 1", func() error {
		if got := w.trending(t); len(got) != 1 || got[0].GameID != "g1" || got[0].Score != 1 {
			return fmt.Errorf("trending is %+v", got)
		}
		return nil
	})

	var cup, sprint1, sprint2, streaks entries
	w.getJSON(t, bob, "/v1/leaderboards/cup/top?n=10", &cup)
	w.getJSON(t, bob, "/v1/leaderboards/sprint/top?n=10&period="+period1, &sprint1)
	w.getJSON(t, bob, "/v1/leaderboards/sprint/top?n=10", &sprint2)
	w.getJSON(t, bob, "/v1/streaks/top?n=10", &streaks)
	for name, e := range map[string]entries{"cup": cup, "sprint " + period1: sprint1, "sprint today": sprint2, "streaks": streaks} {
		if slices.Contains(e.ids(), erased) {
			t.Errorf("%s still ranks the erased user: %v", name, e.ids())
		}
	}
	if !slices.Equal(cup.ids(), []string{bob}) || !slices.Equal(sprint1.ids(), []string{bob}) || !slices.Equal(sprint2.ids(), []string{cat}) {
		t.Errorf("boards after the erasure: cup %v, sprint %v / %v", cup.ids(), sprint1.ids(), sprint2.ids())
	}
	if !slices.Contains(streaks.ids(), bob) || !slices.Contains(streaks.ids(), cat) {
		t.Errorf("streak board lost the others: %v", streaks.ids())
	}
	var board struct {
		Total *int64 `json:"total"`
	}
	w.getJSON(t, bob, "/v1/leaderboards/cup", &board)
	if board.Total == nil || *board.Total != 1 {
		t.Errorf("cup counts %v members after the erasure, want 1", board.Total)
	}
	friendsAfter := w.friends(t)
	if friendsAfter.FriendsTotal != friendsBefore.FriendsTotal-1 || friendsAfter.FriendsRank != 1 {
		t.Errorf("bob among friends: %+v before the erasure, %+v after", friendsBefore, friendsAfter)
	}
	for _, n := range friendsAfter.Neighbors {
		if n.PlayerID == erased {
			t.Errorf("bob's friends still include the erased user: %+v", friendsAfter)
		}
	}
	var rank struct {
		Rank int `json:"rank"`
	}
	w.getJSON(t, bob, "/v1/leaderboards/cup/players/"+bob+"/rank", &rank)
	if rank.Rank != 1 {
		t.Errorf("bob ranks %d on cup after the erasure, want 1", rank.Rank)
	}

	// The export keeps the user's events, but nothing can tie them to the
	// user again: their secret is gone and no new one was made for the
	// events shipped after it.
	pid := analytics.PID(secret, erased)
	rows := w.exported(t)
	if rows[pid] == 0 {
		t.Fatalf("the export has no event of the user before the erasure (pids %v)", rows)
	}
	if w.secret(t, erased) != nil {
		t.Fatal("the user's analytics secret came back")
	}

	// Erasing again is harmless: a new erasure with nothing to do.
	second := w.erase(t, erased)
	if second.ErasureID == first.ErasureID {
		t.Fatal("an erasure after a completed one reused its id")
	}
	w.completed(t, erased, second.ErasureID)
	w.traceless(t, erased)
	if got := w.count(t, "/v1/games/g1/favorites/count"); got != 1 {
		t.Errorf("g1 has %d favorites after a second erasure, want 1", got)
	}
	w.getJSON(t, bob, "/v1/leaderboards/cup", &board)
	if board.Total == nil || *board.Total != 1 {
		t.Errorf("cup counts %v members after a second erasure, want 1", board.Total)
	}
}

type trend struct {
	GameID string `json:"game_id"`
	Score  int64  `json:"score"`
}

// trending is the 24h trending list, read past the API's short cache.
func (w *world) trending(t *testing.T) []trend {
	t.Helper()
	var top struct {
		Items []trend `json:"items"`
	}
	w.getJSON(t, bob, "/v1/games/top?window=24h", &top)
	return top.Items
}

type friendsRank struct {
	FriendsRank  int   `json:"friends_rank"`
	FriendsTotal int64 `json:"friends_total"`
	Neighbors    []struct {
		PlayerID string `json:"player_id"`
	} `json:"neighbors"`
}

// friends is bob's rank among his friends on cup.
func (w *world) friends(t *testing.T) friendsRank {
	t.Helper()
	var f friendsRank
	w.getJSON(t, bob, "/v1/leaderboards/cup/players/"+bob+"/friends-rank?k=5", &f)
	return f
}

// exported counts the exported events per user_pid.
func (w *world) exported(t *testing.T) map[string]int {
	t.Helper()
	out := map[string]int{}
	err := filepath.WalkDir(filepath.Join(w.dir, "analytics"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".parquet") {
			return err
		}
		rows, err := parquet.ReadFile[analytics.Event](path)
		for _, e := range rows {
			out[e.UserPID]++
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestAnUnknownUserIsErasedWithNothingLeftBehind: the same answer as for a known
// user, and COMPLETED.
func TestAnUnknownUserIsErasedWithNothingLeftBehind(t *testing.T) {
	w := newWorld(t)
	before := w.count(t, "/v1/games/g1/favorites/count")
	e := w.erase(t, "nobody-at-all")
	w.completed(t, "nobody-at-all", e.ErasureID)
	w.traceless(t, "nobody-at-all")
	if got := w.count(t, "/v1/games/g1/favorites/count"); got != before {
		t.Errorf("erasing an unknown user changed a count: %d → %d", before, got)
	}
}

// TestAnInterruptedErasureCompletesWhenRunAgain: a run that dies after
// erasing reactions and scores, holding its lease, leaves the erasure
// PENDING; once the lease runs out the scheduled run finishes it.
func TestAnInterruptedErasureCompletesWhenRunAgain(t *testing.T) {
	w := newWorld(t)
	w.erasures.Store(false) // the stream's run "crashes" before acting
	e := w.erase(t, erased)
	w.idle(t)

	job := all.ErasureJob(w.s.Deps())
	crashing := *job
	// The dead-letter archive, reactions and scores, then the crash.
	crashing.Parts = append(slices.Clone(job.Parts[:3]), crash{})
	if err := crashing.Run(context.Background(), w.hash(erased)); err == nil || !strings.Contains(err.Error(), "process killed") {
		t.Fatalf("the crashing run returned %v", err)
	}
	// It died without giving its lease back.
	now := w.s.Clock().Now()
	cur, ok, err := job.Records.Get(context.Background(), w.hash(erased))
	if err != nil || !ok || cur.Status != privacy.Pending {
		t.Fatalf("after the crash: %+v %v %v", cur, ok, err)
	}
	if err := job.Records.Lease(context.Background(), cur, now, now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	w.idle(t)
	var cup entries
	w.getJSON(t, bob, "/v1/leaderboards/cup/top?n=10", &cup)
	if slices.Contains(cup.ids(), erased) {
		t.Fatalf("scores were erased before the crash, yet cup ranks %v", cup.ids())
	}
	var st struct {
		TotalPoints int64 `json:"total_points"`
	}
	w.getJSON(t, erased, "/v1/users/"+erased+"/streak", &st)
	if st.TotalPoints == 0 {
		t.Fatal("streaks came after the crash, yet they are gone")
	}

	// While the lease holds, the schedule leaves the erasure alone.
	w.erasures.Store(true)
	if err := job.Run(context.Background(), w.hash(erased)); err == nil {
		t.Fatal("a run took an erasure another run holds")
	}
	// The lease runs out. (A minute on, the rate-limit counters of the
	// reactions above are in the previous window, which erasure clears too.)
	w.s.Clock().Advance(61 * time.Second)
	w.completed(t, erased, e.ErasureID)
	w.traceless(t, erased)
	if got := w.count(t, "/v1/games/g1/favorites/count"); got != 1 {
		t.Errorf("g1 has %d favorites after the resumed erasure, want 1", got)
	}
}

type crash struct{}

func (crash) Name() string { return "crash" }

func (crash) Erase(context.Context, string) (bool, error) { return false, errors.New("process killed") }
