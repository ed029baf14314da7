package ops_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/infra/local/apitest"
	"github.com/rallyhq/rally/infra/local/stack"
	"github.com/rallyhq/rally/infra/local/stacktest"
	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/infra/local/testenv/await"
	"github.com/rallyhq/rally/shared/jobs"
	"github.com/rallyhq/rally/shared/leaderboards"
	leaderboardsbind "github.com/rallyhq/rally/shared/leaderboards/bind"
	lbmirror "github.com/rallyhq/rally/shared/leaderboards/mirror"
	"github.com/rallyhq/rally/shared/ranking"
	"github.com/rallyhq/rally/shared/reactions"
	reactionsbind "github.com/rallyhq/rally/shared/reactions/bind"
	rxmirror "github.com/rallyhq/rally/shared/reactions/mirror"
	"github.com/rallyhq/rally/shared/schema"
	stmirror "github.com/rallyhq/rally/shared/streaks/mirror"
)

type jobBody struct {
	ID       string `json:"job_id"`
	Kind     string `json:"kind"`
	Target   string `json:"target"`
	State    string `json:"state"`
	Progress struct {
		Done  int64 `json:"done"`
		Total int64 `json:"total"`
	} `json:"progress"`
	Checked    int64    `json:"checked"`
	Drifted    int64    `json:"drifted"`
	Repaired   int64    `json:"repaired"`
	Examples   []string `json:"examples"`
	Error      string   `json:"error"`
	StartedAt  string   `json:"started_at"`
	FinishedAt *string  `json:"finished_at"`
}

// runJob starts a job through POST /v1/ops/jobs and awaits its end.
func runJob(t *testing.T, c *apitest.Client, kind, target string) jobBody {
	t.Helper()
	var started struct {
		ID    string `json:"job_id"`
		State string `json:"state"`
	}
	r := c.Service("POST", "/v1/ops/jobs", map[string]any{"kind": kind, "target": target}).Expect(t, 202)
	r.JSON(t, &started)
	if started.State != "RUNNING" || started.ID == "" || r.Header.Get("Location") != "/v1/ops/jobs/"+started.ID {
		t.Fatalf("start %s %s: %s (Location %q)", kind, target, r.Body, r.Header.Get("Location"))
	}
	var j jobBody
	await.Until(t, 2*time.Minute, kind+" "+target+" to finish", func() bool {
		c.Service("GET", "/v1/ops/jobs/"+started.ID, nil).Expect(t, 200).JSON(t, &j)
		return j.State != "RUNNING"
	})
	if j.State != "DONE" || j.FinishedAt == nil {
		t.Fatalf("%s %s ended %s: %s", kind, target, j.State, j.Error)
	}
	return j
}

// world is the data the job tests start from, and the model of what
// every derived value must say: favorites per game (and those of them in
// trending), scores on one board, and streaks of several lengths.
type world struct {
	favorites map[string]int64 // game → net favorites
	trending  map[string]int64 // game → net favorites in trending
	scores    map[string]int64 // player → best score on "arena"
	streaks   map[string]int64 // player → current streak
}

func seed(t *testing.T, s *stack.Stack, c *apitest.Client) world {
	t.Helper()
	w := world{favorites: map[string]int64{}, trending: map[string]int64{}, scores: map[string]int64{}, streaks: map[string]int64{}}
	for g := range 5 {
		game := fmt.Sprintf("game-%d", g)
		for p := range g + 1 {
			c.Player(fmt.Sprintf("fan-%d", p), "POST", "/v1/favorites/"+game, nil).Expect(t, 200)
			w.favorites[game]++
			w.trending[game]++
		}
	}
	c.Player("fan-0", "DELETE", "/v1/favorites/game-4", nil).Expect(t, 200)
	w.favorites["game-4"]--
	w.trending["game-4"]--
	// A player flipping game-1 eleven times within the hour: the last
	// favorite counts, and is kept out of trending.
	for i := 1; i <= reactions.MaxTrendingFlips+1; i++ {
		method := "POST"
		if i%2 == 0 {
			method = "DELETE"
		}
		c.Player("flipper", method, "/v1/favorites/game-1", nil).Expect(t, 200)
	}
	w.favorites["game-1"]++

	c.Service("PUT", "/v1/leaderboards/arena", map[string]any{
		"title": "Arena", "policy": "best", "order": "desc", "reset": "none", "tie_break": "earliest", "max_n": 100, "timezone": "UTC",
	}).Expect(t, 201)
	for p := range 8 {
		player := fmt.Sprintf("pro-%d", p)
		for m, score := range []int64{int64(10 * p), int64(10*p + 7)} {
			c.Service("POST", "/v1/leaderboards/arena/scores", map[string]any{
				"player_id": player, "match_id": fmt.Sprintf("m-%d-%d", p, m), "score": score,
			}).Expect(t, 200)
		}
		w.scores[player] = int64(10*p + 7)
	}

	// Streaks of one to three days, all live: player p is active from
	// day p%3 on.
	for day := range 3 {
		for p := range 6 {
			if day < p%3 {
				continue
			}
			player := fmt.Sprintf("daily-%d", p)
			c.Do(apitest.Call{Method: "POST", Path: "/v1/activity", As: player,
				Body:   map[string]any{"event_type": "DAILY_OPEN", "source": "mobile_app", "timezone": "UTC"},
				Header: map[string]string{"Idempotency-Key": fmt.Sprintf("open-%d-%d", p, day)}}).Expect(t, 200)
			w.streaks[player] = int64(day - p%3 + 1)
		}
		if day < 2 {
			s.Clock().Advance(24 * time.Hour)
		}
	}
	if err := s.WaitIdle(context.Background()); err != nil {
		t.Fatal(err)
	}
	return w
}

// check asserts that every count, trending score, board entry and streak
// the API serves equals the model.
func (w world) check(t *testing.T, c *apitest.Client) {
	t.Helper()
	for game, want := range w.favorites {
		var body struct {
			Count int64 `json:"count"`
		}
		c.Player("reader", "GET", "/v1/games/"+game+"/favorites/count", nil).Expect(t, 200).JSON(t, &body)
		if body.Count != want {
			t.Errorf("%s has %d favorites, want %d", game, body.Count, want)
		}
	}
	var top struct {
		Items []struct {
			ID    string `json:"game_id"`
			Score int64  `json:"score"`
		} `json:"items"`
	}
	c.Player("reader", "GET", "/v1/games/top?window=all&limit=10", nil).Expect(t, 200).JSON(t, &top)
	trending := map[string]int64{}
	for _, it := range top.Items {
		trending[it.ID] = it.Score
	}
	for game, want := range w.trending {
		if trending[game] != want {
			t.Errorf("all-time trending scores %s %d, want %d (%+v)", game, trending[game], want, top.Items)
		}
	}
	var board struct {
		Entries []struct {
			Player string `json:"player_id"`
			Score  int64  `json:"score"`
			Rank   int    `json:"rank"`
		} `json:"entries"`
		Total int64 `json:"total"`
	}
	c.Player("reader", "GET", "/v1/leaderboards/arena/top?n=20", nil).Expect(t, 200).JSON(t, &board)
	if board.Total != int64(len(w.scores)) || len(board.Entries) != len(w.scores) {
		t.Errorf("arena: total %d, %d entries, want %d", board.Total, len(board.Entries), len(w.scores))
	}
	for i, e := range board.Entries {
		if w.scores[e.Player] != e.Score || e.Rank != i+1 || (i > 0 && e.Score > board.Entries[i-1].Score) {
			t.Errorf("arena entry %d: %+v, want score %d in order", i, e, w.scores[e.Player])
		}
	}
	var streaks struct {
		Entries []struct {
			User   string `json:"user_id"`
			Streak int64  `json:"current_streak"`
		} `json:"entries"`
	}
	c.Player("reader", "GET", "/v1/streaks/top?n=20", nil).Expect(t, 200).JSON(t, &streaks)
	if len(streaks.Entries) != len(w.streaks) {
		t.Errorf("streak board: %+v, want %v", streaks.Entries, w.streaks)
	}
	for _, e := range streaks.Entries {
		if w.streaks[e.User] != e.Streak {
			t.Errorf("streak board: %s at %d, want %d", e.User, e.Streak, w.streaks[e.User])
		}
	}
}

// deleteCountItems deletes the durable count items whose target key
// (kind#id) pick picks, and says how many it deleted.
func deleteCountItems(t *testing.T, s *stack.Stack, pick func(target string) bool) int {
	t.Helper()
	counters := s.Tables().Of(schema.Counters)
	deleted := 0
	for _, it := range testenv.TableItems(t, s.DB(), counters) {
		sk, _ := it[schema.AttrSK].(*types.AttributeValueMemberS)
		pk, _ := it[schema.AttrPK].(*types.AttributeValueMemberS)
		if sk == nil || pk == nil || sk.Value != schema.CountersTotalSK || !pick(pk.Value) {
			continue
		}
		if _, err := s.DB().DeleteItem(context.Background(), &dynamodb.DeleteItemInput{TableName: aws.String(counters),
			Key: map[string]types.AttributeValue{schema.AttrPK: pk, schema.AttrSK: sk}}); err != nil {
			t.Fatal(err)
		}
		deleted++
	}
	return deleted
}

func jobStack(t *testing.T) (*stack.Stack, *apitest.Client) {
	t.Helper()
	s := stacktest.Start(t, stack.Options{Log: testenv.FailureLog(t), TickEvery: 200 * time.Millisecond})
	return s, apitest.New(t, s)
}

// Derived state corrupted on purpose (a durable count, a Redis board
// entry, a streak board entry) is what a reconcile reports, exactly, and
// repairs; a second reconcile finds nothing.
func TestAReconcileFindsAndRepairsExactlyWhatDrifted(t *testing.T) {
	s, c := jobStack(t)
	w := seed(t, s, c)
	ctx := context.Background()
	d := s.Deps()

	clean := runJob(t, c, "reconcile", "all")
	if clean.Drifted != 0 || clean.Checked == 0 {
		t.Fatalf("a reconcile of clean state: %+v", clean)
	}

	// A durable count off its edges.
	counts := reactionsbind.Counts(d)
	g2 := reactions.Target{Kind: reactions.Favorite, ID: "game-2"}
	tally, err := counts.TargetTally(ctx, g2, s.Clock().Now())
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := counts.SetTotals(ctx, g2, reactions.Totals{Count: 42, Trending: tally.Trending}, tally.Version, s.Clock().Now()); err != nil || !ok {
		t.Fatalf("corrupt the count: %v %v", ok, err)
	}
	// An all-time trending total off its edges (game-1 has a favorite
	// kept out of trending).
	g1 := reactions.Target{Kind: reactions.Favorite, ID: "game-1"}
	tally, err = counts.TargetTally(ctx, g1, s.Clock().Now())
	if err != nil || tally.Count != 3 || tally.Trending != 2 {
		t.Fatalf("game-1 before the corruption: %+v %v", tally, err)
	}
	if ok, err := counts.SetTotals(ctx, g1, reactions.Totals{Count: 3, Trending: 3}, tally.Version, s.Clock().Now()); err != nil || !ok {
		t.Fatalf("corrupt the trending total: %v %v", ok, err)
	}
	// A count item lost (its target's edges are all there).
	if n := deleteCountItems(t, s, func(target string) bool { return target == "favorite#game-3" }); n != 1 {
		t.Fatalf("deleted %d count items of game-3, want 1", n)
	}
	// A Redis board entry off its score (a version ahead, so nothing
	// replaces it on its own).
	def, err := leaderboardsbind.Definitions(d).Get(ctx, "arena")
	if err != nil {
		t.Fatal(err)
	}
	scores, err := leaderboardsbind.Scores(d).Get(ctx, "arena", def.PeriodAt(s.Clock().Now()), []string{"pro-3"})
	if err != nil || len(scores) != 1 {
		t.Fatalf("read pro-3: %v %v", scores, err)
	}
	bad := scores[0]
	bad.Score, bad.Version = 999, bad.Version+5
	if _, _, err := lbmirror.New(d.Redis, d.Generations(lbmirror.Scope)).Upsert(ctx, def, bad); err != nil {
		t.Fatal(err)
	}
	// A streak board entry off the player's streak.
	if _, err := ranking.New(d.Redis).Upsert(ctx, stmirror.Board(""), ranking.Item{ID: "daily-1", Score: 30, Version: 1 << 40}); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	found := runJob(t, c, "reconcile", "all")
	took := time.Since(start)
	if found.Drifted != 5 || found.Repaired != 5 || len(found.Examples) != 5 {
		t.Fatalf("reconcile found %d drifted, %d repaired: %q; want the five corrupted values", found.Drifted, found.Repaired, found.Examples)
	}
	for _, want := range []string{
		"count: favorite:game-2: count 42, 3 active edges", "count: favorite:game-1: all-time trending 3, 2 active edges in trending",
		fmt.Sprintf("count: favorite:game-3: no count item, %d active edges (%d in trending)", w.favorites["game-3"], w.trending["game-3"]),
		"board: arena#", "pro-3 has 999 in redis, 37 in dynamodb", `streak_board: board "global": daily-1 has 30 in redis, 2 in dynamodb`,
	} {
		if !slices.ContainsFunc(found.Examples, func(e string) bool { return strings.Contains(e, want) }) {
			t.Errorf("no example says %q: %q", want, found.Examples)
		}
	}
	t.Logf("reconcile of %d values with %d drifted took %v", found.Checked, found.Drifted, took)

	again := runJob(t, c, "reconcile", "all")
	if again.Drifted != 0 || again.Checked != found.Checked {
		t.Fatalf("a second reconcile: %+v", again)
	}
	for g, want := range map[reactions.Target]int64{g2: 3, {Kind: reactions.Favorite, ID: "game-3"}: w.favorites["game-3"]} {
		if n, err := counts.Count(ctx, g); err != nil || n.N != want {
			t.Fatalf("%s's durable count after the repair: %+v %v, want %d", g, n, err, want)
		}
	}
	w.check(t, c)

	var health struct {
		Redis struct {
			Reachable bool `json:"reachable"`
		} `json:"redis"`
		DynamoDB struct {
			Reachable bool `json:"reachable"`
		} `json:"dynamodb"`
		Processors    []map[string]any `json:"processors"`
		JobsRunning   int              `json:"jobs_running"`
		LastReconcile *struct {
			ID      string `json:"job_id"`
			Drifted int64  `json:"drifted"`
		} `json:"last_reconcile"`
	}
	c.Service("GET", "/v1/ops/health", nil).Expect(t, 200).JSON(t, &health)
	if !health.Redis.Reachable || !health.DynamoDB.Reachable || health.JobsRunning != 0 ||
		health.LastReconcile == nil || health.LastReconcile.ID != again.ID || len(health.Processors) == 0 {
		t.Fatalf("health after the reconciles: %+v", health)
	}
}

// The disaster-recovery drill: every derived item is lost (the durable
// counts, the boards' member counts, all of Redis); a recompute rebuilds
// DynamoDB's derived state from its truth and a rebuild Redis from
// DynamoDB, and every count, trending score, board and streak board
// equals the model again.
func TestTheRecomputeDrillBringsBackEveryDerivedValue(t *testing.T) {
	s, c := jobStack(t)
	w := seed(t, s, c)
	ctx := context.Background()
	d := s.Deps()

	// Lose the derived state: every count item and member count, and Redis.
	if lost := deleteCountItems(t, s, func(string) bool { return true }); lost != len(w.favorites) {
		t.Fatalf("deleted %d count items, want %d", lost, len(w.favorites))
	}
	scores := leaderboardsbind.Scores(d)
	if err := scores.SetMembers(ctx, "arena", leaderboards.AllTime, 0); err != nil {
		t.Fatal(err)
	}
	if err := d.Redis.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	recomputed := runJob(t, c, "recompute", "all")
	mid := time.Now()
	rebuilt := runJob(t, c, "rebuild", "all")
	t.Logf("recompute took %v (%d checked, %d rewritten), rebuild %v (%d values)",
		mid.Sub(start), recomputed.Checked, recomputed.Repaired, time.Since(mid), rebuilt.Checked)
	// Every lost count (5) and the member count come back.
	if recomputed.Repaired != int64(len(w.favorites))+1 {
		t.Fatalf("recompute rewrote %d values: %q", recomputed.Repaired, recomputed.Examples)
	}
	if n, err := scores.Members(ctx, "arena", leaderboards.AllTime); err != nil || n != int64(len(w.scores)) {
		t.Fatalf("arena's member count after the recompute: %d %v", n, err)
	}
	// Reads are served from Redis again (the processors' repair found
	// the rebuilt boards), and say what the model says.
	await.Until(t, time.Minute, "reads served from redis", func() bool {
		var body struct {
			Degraded bool `json:"degraded"`
		}
		c.Player("reader", "GET", "/v1/leaderboards/arena/top?n=1", nil).Expect(t, 200).JSON(t, &body)
		return !body.Degraded
	})
	w.check(t, c)
	m := lbmirror.New(d.Redis, d.Generations(lbmirror.Scope))
	stored, err := m.Stored(ctx, mustDef(t, s), leaderboards.AllTime, keys(w.scores))
	if err != nil {
		t.Fatal(err)
	}
	total, err := m.Size(ctx, mustDef(t, s), leaderboards.AllTime)
	if err != nil || total != int64(len(w.scores)) || len(stored) != len(w.scores) {
		t.Fatalf("redis board after the rebuild: %d of %d (%v)", len(stored), total, err)
	}
}

func mustDef(t *testing.T, s *stack.Stack) leaderboards.Definition {
	t.Helper()
	def, err := leaderboardsbind.Definitions(s.Deps()).Get(context.Background(), "arena")
	if err != nil {
		t.Fatal(err)
	}
	return def
}

func keys(m map[string]int64) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// A job asked for wrongly is refused with a problem and starts nothing.
func TestABadJobIsRefused(t *testing.T) {
	_, c := jobStack(t)
	for _, body := range []map[string]any{
		{"kind": "explode", "target": "all"},
		{"kind": "rebuild", "target": "everything"},
		{"kind": "rebuild"},
		{"kind": "rebuild", "target": "counters", "id": "arena"},
		{"kind": "rebuild", "target": "leaderboard", "period": "2026-11-24"},
		{"kind": "rebuild", "target": "all", "extra": 1},
		{"kind": "rebuild", "target": "all", "source": "s3://bucket/key"},
		{"kind": "import"},
		{"kind": "import", "source": "ftp://example.com/scores.jsonl"},
		{"kind": "import", "source": "file://relative.jsonl"},
		{"kind": "import", "source": "s3://bucket-only"},
		{"kind": "import", "source": "s3://bucket/key", "target": "all"},
	} {
		r := c.Service("POST", "/v1/ops/jobs", body)
		if r.Status != 400 || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/problem+json") {
			t.Errorf("POST /v1/ops/jobs %v: %d %s", body, r.Status, r.Body)
		}
		wantSource := body["kind"] == "import" && body["target"] == nil || body["kind"] == "rebuild" && body["source"] != nil
		if wantSource && !strings.Contains(string(r.Body), `"field":"source"`) {
			t.Errorf("POST /v1/ops/jobs %v: the problem names no source field: %s", body, r.Body)
		}
	}
	c.Service("GET", "/v1/ops/jobs/job_nope", nil).Expect(t, 404)
	c.Service("POST", "/v1/ops/jobs", map[string]any{"kind": "rebuild", "target": "leaderboard", "id": "nope"}).Expect(t, 404)
	c.Player("mallory", "POST", "/v1/ops/jobs", map[string]any{"kind": "rebuild", "target": "all"}).Expect(t, 403)
	var health struct {
		JobsRunning int `json:"jobs_running"`
	}
	c.Service("GET", "/v1/ops/health", nil).Expect(t, 200).JSON(t, &health)
	if health.JobsRunning != 0 {
		t.Fatalf("a refused job runs: %+v", health)
	}
}

// racingMirror is Redis as a reconcile sees it when the counter processor
// applies a change between the reconcile's read of the counts and its
// read of Redis: race runs before the first read of Redis.
type racingMirror struct {
	reactions.JobMirror
	race func()
	once sync.Once
}

func (m *racingMirror) Stored(ctx context.Context, targets []reactions.Target) (map[reactions.Target]reactions.Count, map[reactions.Target]int64, error) {
	m.once.Do(m.race)
	return m.JobMirror.Stored(ctx, targets)
}

// A change applied while a reconcile runs is not drift: Redis, a change
// ahead of the count the reconcile read, keeps it (a reset would put the
// older count back until the target's next change).
func TestAReconcileKeepsAChangeAppliedMeanwhile(t *testing.T) {
	s, c := jobStack(t)
	w := seed(t, s, c)
	d := s.Deps()
	raced := false
	m := &racingMirror{JobMirror: rxmirror.New(d.Redis, d.Generations(rxmirror.Scope)), race: func() {
		raced = true
		c.Player("late-fan", "POST", "/v1/favorites/game-0", nil).Expect(t, 200)
		w.favorites["game-0"]++
		w.trending["game-0"]++
		await.Until(t, time.Minute, "the late favorite to be counted", func() bool {
			var body struct {
				Count int64 `json:"count"`
			}
			c.Player("reader", "GET", "/v1/games/game-0/favorites/count", nil).Expect(t, 200).JSON(t, &body)
			return body.Count == w.favorites["game-0"]
		})
	}}
	rx := &reactions.Jobs{Edges: reactionsbind.Edges(d), Counts: reactionsbind.Counts(d), Mirror: m, Clock: d.Clock}
	reconcile := rx.Tasks()[jobs.Key{Kind: jobs.Reconcile, Target: jobs.Counters}]
	work := jobs.NewWork(nil)
	cursor, done := "", false
	for !done {
		var err error
		if cursor, done, err = reconcile.Run(context.Background(), jobs.Spec{Kind: jobs.Reconcile, Target: jobs.Counters}, cursor, work); err != nil {
			t.Fatal(err)
		}
	}
	if !raced || work.Findings.Drifted != 0 || work.Findings.Checked == 0 {
		t.Fatalf("a reconcile with a change applied meanwhile (raced %v): %+v", raced, *work.Findings)
	}
	w.check(t, c)
}
