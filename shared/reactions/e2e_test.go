package reactions_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/rallyhq/rally/infra/local/apitest"
	"github.com/rallyhq/rally/infra/local/stack"
	"github.com/rallyhq/rally/infra/local/stacktest"
	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/infra/local/testenv/await"
	"github.com/rallyhq/rally/shared/api"
	"github.com/rallyhq/rally/shared/config"
	"github.com/rallyhq/rally/shared/obs"
	"github.com/rallyhq/rally/shared/schema"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// startStack runs a local stack with budgets high enough for load tests and
// frequent trending snapshots.
func startStack(t *testing.T, redisURL string) (*stack.Stack, *apitest.Client) {
	t.Helper()
	return startStackLogging(t, redisURL, testenv.FailureLog(t))
}

// startStackLogging is startStack with its logs and metrics sent to log.
func startStackLogging(t *testing.T, redisURL string, log io.Writer) (*stack.Stack, *apitest.Client) {
	t.Helper()
	s := stacktest.Start(t, stack.Options{
		RedisURL: redisURL,
		Log:      log,
		Configure: func(c *config.Config) {
			c.Budgets = map[string]int{"favorite": 1000, "like": 1000, "ip": 1_000_000}
			c.SnapshotEvery = 50 * time.Millisecond
		},
	})
	return s, apitest.New(t, s)
}

type edgeRow struct {
	UserID   string `dynamodbav:"user_id"`
	Kind     string `dynamodbav:"kind"`
	TargetID string `dynamodbav:"target_id"`
	State    string `dynamodbav:"state"`
	Trend    *bool  `dynamodbav:"trend"`
}

// truth is what the Reactions table says every count and all-time
// trending score must converge to, per kind/target: its ACTIVE edges, and
// those of them that count in trending (an edge without the flag does).
type truth struct {
	active, trending map[string]int64
}

// activeEdges counts ACTIVE edges per kind/target straight from the
// Reactions table.
func activeEdges(t *testing.T, s *stack.Stack) truth {
	t.Helper()
	out := truth{active: map[string]int64{}, trending: map[string]int64{}}
	in := &dynamodb.ScanInput{TableName: aws.String(s.Tables().Of(schema.Reactions)), ConsistentRead: aws.Bool(true)}
	for {
		page, err := s.DB().Scan(context.Background(), in)
		if err != nil {
			t.Fatal(err)
		}
		var rows []edgeRow
		if err := attributevalue.UnmarshalListOfMaps(page.Items, &rows); err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			if r.State == "ACTIVE" {
				out.active[r.Kind+"/"+r.TargetID]++
				if r.Trend == nil || *r.Trend {
					out.trending[r.Kind+"/"+r.TargetID]++
				}
			}
		}
		if len(page.LastEvaluatedKey) == 0 {
			return out
		}
		in.ExclusiveStartKey = page.LastEvaluatedKey
	}
}

func countOf(t testing.TB, c *apitest.Client, kind, id string) (int64, bool) {
	path := "/v1/games/" + id + "/favorites/count"
	if kind == "like" {
		path = "/v1/posts/" + id + "/likes/count"
	}
	var body struct {
		Count    int64 `json:"count"`
		Degraded bool  `json:"degraded"`
	}
	c.Player("reader", "GET", path, nil).Expect(t, 200).JSON(t, &body)
	return body.Count, body.Degraded
}

func allTimeScores(t testing.TB, c *apitest.Client) (map[string]int64, bool) {
	var body struct {
		Items []struct {
			GameID string `json:"game_id"`
			Score  int64  `json:"score"`
			Rank   int    `json:"rank"`
		} `json:"items"`
		Degraded bool `json:"degraded"`
	}
	c.Player("reader", "GET", "/v1/games/top?window=all&limit=100", nil).Expect(t, 200).JSON(t, &body)
	out := map[string]int64{}
	for i, it := range body.Items {
		if it.Rank != i+1 {
			t.Fatalf("rank %d at position %d", it.Rank, i)
		}
		out[it.GameID] = it.Score
	}
	return out, body.Degraded
}

// converged reports the first difference between served counts (and the
// all-time trending scores) and the ACTIVE edges in DynamoDB (those that
// count in trending), or "".
func converged(t *testing.T, c *apitest.Client, truth truth, games, posts []string) string {
	scores, degraded := allTimeScores(t, c)
	if degraded {
		return "trending served from the stored snapshot"
	}
	for _, g := range games {
		n, _ := countOf(t, c, "favorite", g)
		if want := truth.active["favorite/"+g]; n != want {
			return fmt.Sprintf("game %s: count %d, %d ACTIVE edges", g, n, want)
		}
		if want := truth.trending["favorite/"+g]; scores[g] != want {
			return fmt.Sprintf("game %s: all-time score %d, %d ACTIVE edges in trending", g, scores[g], want)
		}
	}
	for _, p := range posts {
		n, _ := countOf(t, c, "like", p)
		if want := truth.active["like/"+p]; n != want {
			return fmt.Sprintf("post %s: count %d, %d ACTIVE edges", p, n, want)
		}
	}
	return ""
}

func awaitConvergence(t *testing.T, s *stack.Stack, c *apitest.Client, games, posts []string, within time.Duration) time.Duration {
	t.Helper()
	return awaitTruth(t, c, activeEdges(t, s), games, posts, within)
}

// awaitTruth waits until every served count and all-time trending score
// equals truth's.
func awaitTruth(t *testing.T, c *apitest.Client, truth truth, games, posts []string, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	await.Success(t, within, "served counts converged on the truth after the last write", func() error {
		if diff := converged(t, c, truth, games, posts); diff != "" {
			return errors.New(diff)
		}
		return nil
	})
	return time.Since(start)
}

func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%02d", prefix, i)
	}
	return out
}

// 80 players (200 under RALLY_TEST_SCALE=full) favorite, unfavorite, like,
// unlike and toggle at random, all at once, retrying on transient answers
// and replaying Idempotency-Keys; within 5 s of the last write every count
// and all-time trending score equals what the operations say: each player
// acts on their own edges one request at a time, so the model knows each
// edge's last state (accounts are old enough to trend).
func TestCountsConvergeUnderConcurrentRandomReactions(t *testing.T) {
	s := stacktest.Start(t, stack.Options{
		Log: testenv.FailureLog(t),
		Configure: func(c *config.Config) {
			c.Budgets = map[string]int{"favorite": 1000, "like": 1000, "ip": 1_000_000}
			c.SnapshotEvery = 50 * time.Millisecond
			c.YoungAccountAge = 0
		},
	})
	c := apitest.New(t, s)
	games, posts := ids("game", 15), ids("post", 15)
	t.Parallel()
	players, opsEach := testenv.Scale(80, 200), 8
	var wg sync.WaitGroup
	errc := make(chan error, players)
	sem := make(chan struct{}, 64)
	var mu sync.Mutex
	model := truth{active: map[string]int64{}, trending: map[string]int64{}}
	for p := 0; p < players; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			edges, err := playRandomly(c, fmt.Sprintf("player-%03d", p), int64(p), opsEach, games, posts)
			if err != nil {
				errc <- err
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for edge, on := range edges {
				if on {
					model.active[edge]++
					model.trending[edge]++
				}
			}
		}(p)
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	took := awaitTruth(t, c, model, games, posts, 5*time.Second)
	t.Logf("converged %v after the last of %d writes", took.Round(time.Millisecond), players*opsEach)
}

// playRandomly performs one player's random reactions, one request at a
// time, and returns the state each leaves the player's edges in ("kind/
// target" → active): a favorite or like makes its edge active, an
// unfavorite or unlike inactive, a toggle flips it. A request with an
// Idempotency-Key is sent twice: the retry must replay the first answer
// (and so change nothing).
func playRandomly(c *apitest.Client, player string, seed int64, ops int, games, posts []string) (map[string]bool, error) {
	rng := rand.New(rand.NewSource(seed))
	edges := map[string]bool{}
	for i := 0; i < ops; i++ {
		var call apitest.Call
		game, post := games[rng.Intn(len(games))], posts[rng.Intn(len(posts))]
		switch rng.Intn(5) {
		case 0:
			call = apitest.Call{Method: "POST", Path: "/v1/favorites/" + game}
			if rng.Intn(2) == 0 {
				call.Header = map[string]string{"Idempotency-Key": fmt.Sprintf("%s-fav-%d", player, i)}
			}
			edges["favorite/"+game] = true
		case 1:
			call = apitest.Call{Method: "DELETE", Path: "/v1/favorites/" + game}
			edges["favorite/"+game] = false
		case 2:
			call = apitest.Call{Method: "PUT", Path: "/v1/posts/" + post + "/like"}
			edges["like/"+post] = true
		case 3:
			call = apitest.Call{Method: "DELETE", Path: "/v1/posts/" + post + "/like"}
			edges["like/"+post] = false
		case 4:
			call = apitest.Call{Method: "POST", Path: "/v1/posts/" + post + "/like/toggle",
				Header: map[string]string{"Idempotency-Key": fmt.Sprintf("%s-toggle-%d", player, i)}}
			edges["like/"+post] = !edges["like/"+post]
		}
		call.As = player
		first, err := send(c, call)
		if err != nil {
			return nil, err
		}
		if call.Header["Idempotency-Key"] != "" {
			again, err := send(c, call)
			if err != nil {
				return nil, err
			}
			if string(again.Body) != string(first.Body) {
				return nil, fmt.Errorf("%s: retry with the same key answered %s, first answer %s", call.Path, again.Body, first.Body)
			}
		}
	}
	return edges, nil
}

// send retries what a well-behaved client retries: 409 (the same key is
// still in progress), 429 and 503.
func send(c *apitest.Client, call apitest.Call) (apitest.Response, error) {
	for attempt := 0; ; attempt++ {
		r, err := c.Try(call)
		if err != nil {
			return r, err
		}
		switch r.Status {
		case http.StatusOK:
			return r, nil
		case http.StatusConflict, http.StatusTooManyRequests, http.StatusServiceUnavailable:
			if attempt < 20 {
				time.Sleep(time.Duration(attempt+1) * 10 * time.Millisecond)
				continue
			}
		}
		return r, fmt.Errorf("%s %s: status %d: %s", call.Method, call.Path, r.Status, r.Body)
	}
}

// Goroutines favoriting and unfavoriting one game end in the state of the
// last successful write, and the count agrees.
func TestRacingFavoriteAndUnfavoriteEndConsistent(t *testing.T) {
	t.Parallel()
	s, c := startStack(t, "")
	var mu sync.Mutex
	adds, removes := 0, 0
	var wg sync.WaitGroup
	for g := 0; g < 10; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				method := "POST"
				if (g+i)%2 == 1 {
					method = "DELETE"
				}
				r, err := c.Try(apitest.Call{Method: method, Path: "/v1/favorites/contested", As: "racer"})
				if err != nil || r.Status != 200 {
					t.Errorf("%s: %v %d %s", method, err, r.Status, r.Body)
					return
				}
				var body struct {
					Favorited bool `json:"favorited"`
					Changed   bool `json:"changed"`
				}
				r.JSON(t, &body)
				if body.Changed {
					mu.Lock()
					if body.Favorited {
						adds++
					} else {
						removes++
					}
					mu.Unlock()
				}
			}
		}(g)
	}
	wg.Wait()
	var status struct {
		Statuses map[string]bool `json:"statuses"`
	}
	c.Player("racer", "GET", "/v1/favorites/status?game_ids=contested", nil).Expect(t, 200).JSON(t, &status)
	final := status.Statuses["contested"]
	if d := adds - removes; d < 0 || d > 1 || (d == 1) != final {
		t.Fatalf("%d successful favorites and %d unfavorites cannot end favorited=%v", adds, removes, final)
	}
	// The claim here is consistency, not speed (the convergence test above
	// times it), so a busy machine gets longer.
	awaitConvergence(t, s, c, []string{"contested"}, nil, 30*time.Second)
}

// With Redis stopped, every reaction route still answers — reads from
// DynamoDB or the stored snapshot, marked degraded — and writes succeed;
// once Redis is back, counts match again and reads stop being degraded.
// The metrics an operator watches say the same: degraded reads and cache
// misses during the outage, cache hits again after it.
func TestReactionsSurviveRedisOutage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := testenv.Redis(t)
	emitted := testenv.NewEmitted(testenv.FailureLog(t))
	s, c := startStackLogging(t, srv.URL(), emitted)
	metrics := func() (degraded, hits, misses float64) {
		return emitted.Sum(api.MetricDegradedReads), emitted.Sum(obs.MetricCacheHits), emitted.Sum(obs.MetricCacheMisses)
	}
	games := []string{"g-a", "g-b", "g-c"}
	c.Service("PUT", "/v1/games/g-a", map[string]any{"title": "Alpha"}).Expect(t, 200)
	for i, p := range []string{"p1", "p2", "p3"} {
		for _, g := range games[:i+1] {
			c.Player(p, "POST", "/v1/favorites/"+g, nil).Expect(t, 200)
		}
	}
	c.Player("p1", "PUT", "/v1/posts/post-1/like", nil).Expect(t, 200)
	awaitConvergence(t, s, c, games, []string{"post-1"}, 5*time.Second)
	if err := s.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	beforeTop := ranking(t, c.Player("reader", "GET", "/v1/games/top?window=24h", nil).Expect(t, 200))

	srv.Stop()

	// Writes succeed without Redis.
	c.Player("p4", "POST", "/v1/favorites/g-c", nil).Expect(t, 200)
	c.Player("p1", "DELETE", "/v1/favorites/g-a", nil).Expect(t, 200)
	c.Player("p2", "PUT", "/v1/posts/post-1/like", nil).Expect(t, 200)
	c.Player("p1", "DELETE", "/v1/posts/post-1/like", nil).Expect(t, 200)
	c.Do(apitest.Call{Method: "POST", Path: "/v1/posts/post-2/like/toggle", As: "p3", Header: map[string]string{"Idempotency-Key": "outage-1"}}).Expect(t, 200)
	c.Service("PUT", "/v1/games/g-b", map[string]any{"title": "Beta"}).Expect(t, 200)
	if err := s.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}

	// Reads answer correctly from DynamoDB, marked degraded.
	degradedBefore, hitsBefore, missesBefore := metrics()
	truth := activeEdges(t, s)
	for _, g := range games {
		n, degraded := countOf(t, c, "favorite", g)
		if !degraded || n != truth.active["favorite/"+g] {
			t.Errorf("count of %s during the outage: %d degraded=%v, want %d degraded", g, n, degraded, truth.active["favorite/"+g])
		}
	}
	if n, degraded := countOf(t, c, "like", "post-2"); !degraded || n != 1 {
		t.Errorf("likes of post-2: %d degraded=%v", n, degraded)
	}
	status := c.Player("p1", "GET", "/v1/favorites/status?game_ids=g-a,g-b,g-c", nil).Expect(t, 200).Map(t)
	if status["degraded"] != true || fmt.Sprint(status["statuses"]) != "map[g-a:false g-b:false g-c:false]" {
		t.Errorf("p1's own writes during the outage: %v", status)
	}
	list := c.Player("p3", "GET", "/v1/users/p3/favorites", nil).Expect(t, 200).Map(t)
	if items := list["items"].([]any); len(items) != 3 {
		t.Errorf("p3 lists %d favorites, want 3", len(items))
	}
	top := c.Player("reader", "GET", "/v1/games/top?window=24h", nil).Expect(t, 200)
	if top.Map(t)["degraded"] != true || ranking(t, top) != beforeTop {
		t.Errorf("top during the outage must be the stored snapshot, degraded: %s (before: %s)", top.Body, beforeTop)
	}
	// Six degraded answers (four counts, the statuses, the top); every value
	// they hold fell through: four counts, three statuses, one top.
	degraded, hits, misses := metrics()
	if degraded-degradedBefore != 6 || hits != hitsBefore || misses-missesBefore != 8 {
		t.Errorf("during the outage: %v degraded reads, %v hits, %v misses; want 6, 0, 8",
			degraded-degradedBefore, hits-hitsBefore, misses-missesBefore)
	}

	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// With no further writes, the processor's scheduled tick rebuilds
	// Redis from DynamoDB; reads then come from Redis again, and agree.
	await.Until(t, 10*time.Second, "reads served from Redis again after it came back", func() bool {
		_, degraded := countOf(t, c, "favorite", "g-b")
		_, topDegraded := allTimeScores(t, c)
		return !degraded && !topDegraded
	})
	awaitConvergence(t, s, c, games, []string{"post-1", "post-2"}, time.Second)
	degradedBefore, hitsBefore, _ = metrics()
	countOf(t, c, "favorite", "g-a")
	countOf(t, c, "favorite", "g-a")
	if degraded, hits, _ := metrics(); degraded != degradedBefore || hits-hitsBefore < 1 {
		t.Errorf("after the outage: %v degraded reads and %v hits in two reads of one count; want 0 and at least 1",
			degraded-degradedBefore, hits-hitsBefore)
	}
	c.Player("p5", "POST", "/v1/favorites/g-b", nil).Expect(t, 200)
	awaitConvergence(t, s, c, games, []string{"post-1", "post-2"}, 5*time.Second)
}

// ranking renders a top response as "id=score,..." without metadata.
func ranking(t *testing.T, r apitest.Response) string {
	var body struct {
		Items []struct {
			GameID string `json:"game_id"`
			Score  int64  `json:"score"`
		} `json:"items"`
	}
	r.JSON(t, &body)
	var parts []string
	for _, it := range body.Items {
		parts = append(parts, fmt.Sprintf("%s=%d", it.GameID, it.Score))
	}
	return strings.Join(parts, ",")
}

// Listing pages newest first with game metadata, and the cursor carries on
// exactly where the previous page stopped.
func TestFavoritesListPagesNewestFirstWithMetadata(t *testing.T) {
	s, c := startStack(t, "")
	clk := s.Clock()
	var want []string
	for i := 0; i < 5; i++ {
		g := fmt.Sprintf("lg-%d", i)
		c.Player("lister", "POST", "/v1/favorites/"+g, nil).Expect(t, 200)
		want = append([]string{g}, want...)
		clk.Advance(time.Second)
	}
	c.Service("PUT", "/v1/games/lg-4", map[string]any{"title": "Newest", "thumbnail_url": "https://cdn.example.com/n.png"}).Expect(t, 200)
	var got []string
	path := "/v1/users/lister/favorites?limit=2"
	for pages := 0; ; pages++ {
		var page struct {
			Items []struct {
				GameID string `json:"game_id"`
				Game   *struct {
					Title string `json:"title"`
				} `json:"game"`
			} `json:"items"`
			NextCursor *string `json:"next_cursor"`
		}
		c.Player("someone-else", "GET", path, nil).Expect(t, 200).JSON(t, &page)
		for _, it := range page.Items {
			got = append(got, it.GameID)
			if (it.GameID == "lg-4") != (it.Game != nil) || (it.Game != nil && it.Game.Title != "Newest") {
				t.Errorf("metadata of %s: %+v", it.GameID, it.Game)
			}
		}
		if page.NextCursor == nil {
			break
		}
		path = "/v1/users/lister/favorites?limit=2&cursor=" + *page.NextCursor
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("listed %v, want %v", got, want)
	}
}

// A cursor lasts 24 hours: the next page answers until then, and after it
// the cursor is refused with a 400 naming it, so a client starts over from
// the first page rather than page through a list from days ago.
func TestAFavoritesCursorExpiresAfter24Hours(t *testing.T) {
	_, c := startStack(t, "")
	for _, g := range []string{"ex-1", "ex-2", "ex-3"} {
		c.Player("pager", "POST", "/v1/favorites/"+g, nil).Expect(t, 200)
	}
	var page struct {
		NextCursor *string `json:"next_cursor"`
	}
	c.Player("pager", "GET", "/v1/users/pager/favorites?limit=1", nil).Expect(t, 200).JSON(t, &page)
	if page.NextCursor == nil {
		t.Fatal("the first page of three favorites has no next cursor")
	}
	next := "/v1/users/pager/favorites?limit=1&cursor=" + *page.NextCursor
	advance := func(by string) {
		c.Do(apitest.Call{Method: "POST", Path: "/_local/clock", Body: map[string]string{"advance": by}}).Expect(t, 200)
	}
	advance("23h59m")
	c.Player("pager", "GET", next, nil).Expect(t, 200)
	advance("2m")
	var problem struct {
		Detail string `json:"detail"`
		Errors []struct {
			Field string `json:"field"`
		} `json:"errors"`
	}
	c.Player("pager", "GET", next, nil).Expect(t, 400).JSON(t, &problem)
	if problem.Detail != "cursor expired" || len(problem.Errors) != 1 || problem.Errors[0].Field != "cursor" {
		t.Fatalf("an expired cursor answers %+v, want detail \"cursor expired\" on field cursor", problem)
	}
	c.Player("pager", "GET", "/v1/users/pager/favorites?limit=1", nil).Expect(t, 200)
}

// Trending windows count net favorites made within the window.
func TestTrendingWindowsCountNetFavoritesInTheWindow(t *testing.T) {
	s, c := startStack(t, "")
	clk := s.Clock()
	// In the coming year: DynamoDB Local expires buckets by TTL against the
	// wall clock.
	year := time.Now().Year() + 1
	clk.Set(time.Date(year, 11, 10, 12, 0, 0, 0, time.UTC))
	for _, p := range []string{"a", "b", "c"} {
		c.Player(p, "POST", "/v1/favorites/old-hit", nil).Expect(t, 200)
	}
	clk.Set(time.Date(year, 11, 20, 12, 0, 0, 0, time.UTC))
	c.Player("a", "POST", "/v1/favorites/weekly", nil).Expect(t, 200)
	c.Player("b", "POST", "/v1/favorites/weekly", nil).Expect(t, 200)
	clk.Set(time.Date(year, 11, 22, 10, 0, 0, 0, time.UTC))
	c.Player("a", "POST", "/v1/favorites/fresh", nil).Expect(t, 200)
	c.Player("a", "DELETE", "/v1/favorites/old-hit", nil).Expect(t, 200)
	if err := s.WaitIdle(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"24h": "fresh=1",
		"7d":  "weekly=2,fresh=1",
		"all": "old-hit=2,weekly=2,fresh=1",
	}
	await.Success(t, 5*time.Second, "top games of every window", func() error {
		for w, expect := range want {
			var body struct {
				Items []struct {
					GameID string `json:"game_id"`
					Score  int64  `json:"score"`
				} `json:"items"`
			}
			c.Player("reader", "GET", "/v1/games/top?window="+w, nil).Expect(t, 200).JSON(t, &body)
			var parts []string
			for _, it := range body.Items {
				parts = append(parts, fmt.Sprintf("%s=%d", it.GameID, it.Score))
			}
			if got := strings.Join(parts, ","); got != expect {
				return fmt.Errorf("window %s: %q, want %q", w, got, expect)
			}
		}
		return nil
	})
}
