package leaderboards_test

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/redis/go-redis/v9"

	"github.com/rallyhq/rally/infra/local/apitest"
	"github.com/rallyhq/rally/infra/local/stack"
	"github.com/rallyhq/rally/infra/local/stacktest"
	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/infra/local/testenv/await"
	"github.com/rallyhq/rally/shared/config"
	"github.com/rallyhq/rally/shared/leaderboards"
	lbbind "github.com/rallyhq/rally/shared/leaderboards/bind"
	"github.com/rallyhq/rally/shared/leaderboards/mirror"
	"github.com/rallyhq/rally/shared/ranking"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
	"github.com/rallyhq/rally/shared/streams"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func startStack(t *testing.T, redisURL string) (*stack.Stack, *apitest.Client) {
	t.Helper()
	s := stacktest.Start(t, stack.Options{RedisURL: redisURL})
	return s, apitest.New(t, s)
}

// board is a leaderboard as the model knows it.
type board struct {
	ID       string `json:"-"`
	Title    string `json:"title"`
	Policy   string `json:"policy"`
	Order    string `json:"order"`
	Reset    string `json:"reset"`
	TieBreak string `json:"tie_break"`
	MaxN     int    `json:"max_n"`
	Timezone string `json:"timezone"`
	Regional bool   `json:"regional,omitempty"`
	// Partitions spreads the board over score-range partitions in Redis.
	Partitions int `json:"partitions,omitempty"`
}

func define(t testing.TB, c *apitest.Client, b board) {
	t.Helper()
	r := c.Service("PUT", "/v1/leaderboards/"+b.ID, b)
	if r.Status != 201 && r.Status != 200 {
		t.Fatalf("define %s: %d %s", b.ID, r.Status, r.Body)
	}
}

// held is a player's score in the model.
type held struct {
	score   int64
	reached int64 // Unix ms
}

// model is a plain in-memory leaderboard: the rules written out again,
// independently of the code under test.
type model struct {
	b       board
	scores  map[string]held
	matches map[string]bool
}

func newModel(b board) *model {
	return &model{b: b, scores: map[string]held{}, matches: map[string]bool{}}
}

// submit applies a match; it reports whether the match id was new.
func (m *model) submit(player, match string, score int64, at time.Time) bool {
	if m.matches[player+"/"+match] {
		return false
	}
	m.matches[player+"/"+match] = true
	ms := at.UnixMilli()
	cur, ok := m.scores[player]
	switch {
	case !ok:
		m.scores[player] = held{score, ms}
	case m.b.Policy == "best":
		if (m.b.Order == "desc" && score > cur.score) || (m.b.Order == "asc" && score < cur.score) {
			m.scores[player] = held{score, ms}
		}
	case m.b.Policy == "increment":
		if score != 0 {
			m.scores[player] = held{cur.score + score, max(cur.reached, ms)}
		}
	case m.b.Policy == "latest":
		if ms >= cur.reached {
			m.scores[player] = held{score, ms}
		}
	}
	return true
}

type ranked struct {
	Rank     int    `json:"rank"`
	PlayerID string `json:"player_id"`
	Score    int64  `json:"score"`
}

// standings sorts players by score (per the board's order), then the
// earlier time reached, then id, and numbers them per the tie-break.
func standings(b board, scores map[string]held, among []string) []ranked {
	type row struct {
		id string
		held
	}
	var rows []row
	for id, h := range scores {
		rows = append(rows, row{id, h})
	}
	if among != nil {
		rows = rows[:0]
		for _, id := range among {
			if h, ok := scores[id]; ok {
				rows = append(rows, row{id, h})
			}
		}
	}
	sort.Slice(rows, func(i, j int) bool {
		a, c := rows[i], rows[j]
		if a.score != c.score {
			if b.Order == "asc" {
				return a.score < c.score
			}
			return a.score > c.score
		}
		if a.reached != c.reached {
			return a.reached < c.reached
		}
		return a.id < c.id
	})
	out := make([]ranked, len(rows))
	for i, r := range rows {
		out[i] = ranked{Rank: i + 1, PlayerID: r.id, Score: r.score}
		if b.TieBreak == "shared" && i > 0 && r.score == rows[i-1].score {
			out[i].Rank = out[i-1].Rank
		}
	}
	return out
}

func window(rows []ranked, player string, k int) (ranked, []ranked, bool) {
	for i, r := range rows {
		if r.PlayerID == player {
			return r, rows[max(0, i-k):min(len(rows), i+k+1)], true
		}
	}
	return ranked{}, nil, false
}

func percentile(rank int, total int) float64 {
	return math.Round(float64(total-rank)/float64(total)*10000) / 100
}

// check compares every read of every board with the model; degraded says
// whether the reads must come from DynamoDB (Redis down) or from Redis.
// sample bounds how many players' ranks are checked per board (0 = all).
func check(t *testing.T, c *apitest.Client, models []*model, friends map[string][]string, degraded bool, sample int) {
	t.Helper()
	for _, m := range models {
		want := standings(m.b, m.scores, nil)
		var top struct {
			Entries  []ranked `json:"entries"`
			Total    int      `json:"total"`
			Degraded bool     `json:"degraded"`
		}
		c.Player("reader", "GET", "/v1/leaderboards/"+m.b.ID+"/top?n=1000", nil).Expect(t, 200).JSON(t, &top)
		if top.Degraded != degraded {
			t.Fatalf("%s top: degraded=%v, want %v", m.b.ID, top.Degraded, degraded)
		}
		if fmt.Sprint(top.Entries) != fmt.Sprint(want) || top.Total != len(want) {
			t.Fatalf("%s top differs from the brute-force sort:\n got %v (total %d)\nwant %v", m.b.ID, top.Entries, top.Total, want)
		}
		// Pages further down, some starting inside a tie, one past the end.
		for _, from := range []int{2, 3, len(want) / 3, len(want) / 2, len(want) - 2, len(want) + 1} {
			if from < 1 {
				continue
			}
			var page struct {
				Entries  []ranked `json:"entries"`
				Total    int      `json:"total"`
				Degraded bool     `json:"degraded"`
			}
			c.Player("reader", "GET", fmt.Sprintf("/v1/leaderboards/%s/top?n=7&from_rank=%d", m.b.ID, from), nil).Expect(t, 200).JSON(t, &page)
			wantPage := want[min(from-1, len(want)):min(from-1+7, len(want))]
			if fmt.Sprint(page.Entries) != fmt.Sprint(wantPage) || page.Total != len(want) || page.Degraded != degraded {
				t.Fatalf("%s page from rank %d:\n got %v (total %d, degraded %v)\nwant %v", m.b.ID, from, page.Entries, page.Total, page.Degraded, wantPage)
			}
		}
		players := make([]string, 0, len(want))
		for _, r := range want {
			players = append(players, r.PlayerID)
		}
		if sample > 0 && len(players) > sample {
			rng := rand.New(rand.NewSource(int64(len(players))))
			rng.Shuffle(len(players), func(i, j int) { players[i], players[j] = players[j], players[i] })
			players = players[:sample]
		}
		for _, p := range players {
			self, win, _ := window(want, p, 4)
			var got struct {
				Score      int64    `json:"score"`
				Rank       int      `json:"rank"`
				Percentile float64  `json:"percentile"`
				Total      int      `json:"total"`
				Neighbors  []ranked `json:"neighbors"`
				Degraded   bool     `json:"degraded"`
			}
			c.Player("reader", "GET", "/v1/leaderboards/"+m.b.ID+"/players/"+p+"/rank?k=4", nil).Expect(t, 200).JSON(t, &got)
			if got.Rank != self.Rank || got.Score != self.Score || got.Total != len(want) ||
				got.Percentile != percentile(self.Rank, len(want)) || fmt.Sprint(got.Neighbors) != fmt.Sprint(win) || got.Degraded != degraded {
				t.Fatalf("%s rank of %s: got %+v\nwant rank %d score %d total %d percentile %v neighbours %v degraded %v",
					m.b.ID, p, got, self.Rank, self.Score, len(want), percentile(self.Rank, len(want)), win, degraded)
			}
		}
		for p, fs := range friends {
			among := standings(m.b, m.scores, append([]string{p}, fs...))
			self, win, ok := window(among, p, 2)
			r := c.Player(p, "GET", "/v1/leaderboards/"+m.b.ID+"/players/"+p+"/friends-rank?k=2", nil)
			if !ok {
				r.Expect(t, 404)
				continue
			}
			var got struct {
				Score        int64    `json:"score"`
				FriendsRank  int      `json:"friends_rank"`
				FriendsTotal int      `json:"friends_total"`
				Neighbors    []ranked `json:"neighbors"`
				Degraded     bool     `json:"degraded"`
			}
			r.Expect(t, 200).JSON(t, &got)
			if got.FriendsRank != self.Rank || got.FriendsTotal != len(among) || fmt.Sprint(got.Neighbors) != fmt.Sprint(win) || got.Degraded != degraded {
				t.Fatalf("%s friends rank of %s: got %+v, want rank %d of %d, neighbours %v", m.b.ID, p, got, self.Rank, len(among), win)
			}
		}
	}
}

// Random submissions for 240 players (1,200 under RALLY_TEST_SCALE=full)
// over four boards that cover every policy, order and tie-break — with
// repeated match ids, a reused match id with another score, matches
// arriving out of order, and stream records redelivered and delivered
// stale — leave every top, rank, neighbour
// window, percentile and friends rank equal to a brute-force sort of what
// was submitted: from Redis, from DynamoDB with Redis down, and from Redis
// again once it has been rebuilt (every top whole; every rank from Redis
// first, then samples of each board, whole under RALLY_TEST_SCALE=full).
func TestBoardsEqualABruteForceSortOfWhatWasSubmitted(t *testing.T) {
	t.Parallel()
	srv := testenv.Redis(t)
	s, c := startStack(t, srv.URL())
	models, friends := playTheModel(t, s, c, testenv.Scale(240, 1200))
	check(t, c, models, friends, false, 0)

	// Redis down: ranks are counted in DynamoDB, a few hundred
	// milliseconds each here: a sample of each board (tops stay whole).
	srv.Stop()
	check(t, c, models, friends, true, testenv.Scale(25, 60))

	ctx := context.Background()
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// The restarted Redis is empty; the processor's tick rebuilds every
	// board from DynamoDB, then reads leave the fallback.
	await.Until(t, 20*time.Second, "boards served from Redis again after it came back", func() bool {
		var top struct {
			Degraded bool `json:"degraded"`
		}
		c.Player("reader", "GET", "/v1/leaderboards/"+models[0].b.ID+"/top", nil).Expect(t, 200).JSON(t, &top)
		return !top.Degraded
	})
	check(t, c, models, friends, false, testenv.Scale(100, 0))
}

// The same model on a local Redis Cluster of three nodes, as ElastiCache
// runs one. Two boards are defined with "partitions": 4: each board's
// score-range partitions under their own hash tags, on whichever shards
// own them. The other two are defined without, and outgrow the
// partitioning threshold (15 members here, RALLY_PARTITION_AT): each
// starts as one sorted set and is converted to partitions while it
// serves. The processor and the reconcile job split and convert the
// boards as they fill; reads equal the model before and after, after
// Redis lost everything and the boards were rebuilt, and after an
// erasure.
func TestBoardsEqualTheModelOnARedisCluster(t *testing.T) {
	t.Parallel()
	cl := testenv.RedisCluster(t)
	const threshold = 15
	s := stacktest.Start(t, stack.Options{RedisURL: cl.URL(), RedisCluster: true, Configure: func(c *config.Config) {
		c.PartitionAt = threshold
	}})
	c := apitest.New(t, s)
	models, friends := playTheModel(t, s, c, testenv.Scale(160, 1200), 4, 0)
	check(t, c, models, friends, false, 0)

	ctx := context.Background()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()[:1]})
	defer rdb.Close()
	runLeaderboardJob(t, c, "reconcile")
	for _, m := range models {
		d := leaderboards.Definition{ID: m.b.ID, Reset: leaderboards.Reset(m.b.Reset), Timezone: "UTC", Partitions: m.b.Partitions}
		parts, err := ranking.New(rdb).Partitions(ctx, mirror.Board(d, d.PeriodAt(s.Clock().Now())))
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case m.b.Partitions > 0 && len(parts) != m.b.Partitions:
			t.Fatalf("%s after a reconcile: %d partitions, want %d", m.b.ID, len(parts), m.b.Partitions)
		case m.b.Partitions == 0 && (len(parts) < 2 || len(parts) > (len(m.scores)+threshold/2-1)/(threshold/2)):
			// Converted: about threshold/2 members per partition.
			t.Fatalf("%s (%d members) after a reconcile: %d partitions, want about %d members each", m.b.ID, len(m.scores), len(parts), threshold/2)
		}
	}
	check(t, c, models, friends, false, 0)

	err := rdb.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return n.FlushAll(ctx).Err() })
	if err != nil {
		t.Fatal(err)
	}
	await.Until(t, 30*time.Second, "boards served from Redis again after it lost everything", func() bool {
		var top struct {
			Degraded bool `json:"degraded"`
		}
		c.Player("reader", "GET", "/v1/leaderboards/"+models[0].b.ID+"/top", nil).Expect(t, 200).JSON(t, &top)
		return !top.Degraded
	})
	check(t, c, models, friends, false, testenv.Scale(40, 0))

	erased := ""
	for p := range models[0].scores {
		if erased == "" || p < erased {
			erased = p
		}
	}
	c.Service("DELETE", "/v1/ops/users/"+erased, nil).Expect(t, 202)
	await.Until(t, time.Minute, "the erasure of "+erased+" to complete", func() bool {
		var st struct {
			Status string `json:"status"`
		}
		c.Service("GET", "/v1/ops/users/"+erased+"/erasure", nil).Expect(t, 200).JSON(t, &st)
		if st.Status != "COMPLETED" {
			if err := s.WaitIdle(ctx); err != nil {
				t.Fatal(err)
			}
		}
		return st.Status == "COMPLETED"
	})
	delete(models[0].scores, erased)
	check(t, c, models, friends, false, testenv.Scale(40, 0))
}

// playTheModel defines four boards (every policy, order and tie-break),
// has players submit to them at once, redelivers stale and repeated
// stream records, gives some players friends, and returns the model of
// each board and the friend lists.
// partitions, when given, are the boards' "partitions" in turn.
func playTheModel(t *testing.T, s *stack.Stack, c *apitest.Client, players int, partitions ...int) ([]*model, map[string][]string) {
	t.Helper()
	s.Clock().Set(time.Date(2026, 11, 15, 12, 0, 0, 0, time.UTC))
	boards := []board{
		{ID: "best-desc-earliest", Policy: "best", Order: "desc", TieBreak: "earliest", Reset: "none"},
		{ID: "increment-desc-shared", Policy: "increment", Order: "desc", TieBreak: "shared", Reset: "none"},
		{ID: "latest-asc-earliest", Policy: "latest", Order: "asc", TieBreak: "earliest", Reset: "monthly"},
		{ID: "best-asc-shared", Policy: "best", Order: "asc", TieBreak: "shared", Reset: "weekly"},
	}
	models := make([]*model, len(boards))
	for i, b := range boards {
		b.Title, b.MaxN, b.Timezone = "Board "+b.ID, 1000, "UTC"
		if len(partitions) > 0 {
			b.Partitions = partitions[i%len(partitions)]
		}
		define(t, c, b)
		models[i] = newModel(b)
	}
	// Every player plays on one board, in order; players play at once.
	base := time.Date(2026, 11, 15, 6, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	var wg sync.WaitGroup
	errc := make(chan error, players)
	sem := make(chan struct{}, 24)
	for p := 0; p < players; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			rng := rand.New(rand.NewSource(int64(p)))
			m := models[p%len(models)]
			player := fmt.Sprintf("player-%04d", p)
			for i, n := 0, 1+rng.Intn(4); i < n; i++ {
				match := fmt.Sprintf("m%d", rng.Intn(4))
				score := int64(rng.Intn(30))
				if m.b.Policy == "increment" {
					score = int64(rng.Intn(14) - 3)
				}
				at := base.Add(time.Duration(rng.Intn(80)) * time.Minute) // few distinct times: many equal ones
				body := map[string]any{"player_id": player, "match_id": match, "score": score, "occurred_at": at.Format(time.RFC3339)}
				r, err := c.Try(apitest.Call{Method: "POST", Path: "/v1/leaderboards/" + m.b.ID + "/scores", Body: body, Service: true})
				if err != nil || r.Status != 200 {
					errc <- fmt.Errorf("submit %v: %v %d %s", body, err, r.Status, r.Body)
					return
				}
				mu.Lock()
				isNew := m.submit(player, match, score, at)
				mu.Unlock()
				if got := strings.Contains(string(r.Body), `"applied":true`); got != isNew {
					errc <- fmt.Errorf("%s %s match %s: applied=%v, the model says %v: %s", m.b.ID, player, match, got, isNew, r.Body)
					return
				}
			}
		}(p)
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	redeliverStaleAndRepeatedRecords(t, s)

	friends := map[string][]string{}
	rng := rand.New(rand.NewSource(7))
	for i := 0; i < 60; i++ {
		p := fmt.Sprintf("player-%04d", rng.Intn(players))
		var fs []string
		for j := rng.Intn(12); j > 0; j-- {
			fs = append(fs, fmt.Sprintf("player-%04d", rng.Intn(players+200))) // some never played
		}
		c.Service("PUT", "/v1/players/"+p+"/friends", map[string]any{"friend_ids": append([]string{}, fs...)}).Expect(t, 200)
		friends[p] = dedupe(fs, p)
	}
	return models, friends
}

func dedupe(ids []string, self string) []string {
	seen := map[string]bool{self: true}
	var out []string
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// redeliverStaleAndRepeatedRecords hands the leaderboard processor, as
// Lambda might after retries and shard splits, every current score again
// and an older version of each with a different value, shuffled.
func redeliverStaleAndRepeatedRecords(t *testing.T, s *stack.Stack) {
	t.Helper()
	ctx := context.Background()
	out, err := s.DB().Scan(ctx, &dynamodb.ScanInput{TableName: aws.String(s.Tables().Of(schema.Scores))})
	if err != nil {
		t.Fatal(err)
	}
	var records []events.DynamoDBEventRecord
	for i, item := range out.Items {
		var head struct {
			PlayerID string `dynamodbav:"player_id"`
			Ver      int64  `dynamodbav:"ver"`
		}
		if err := attributevalue.UnmarshalMap(item, &head); err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(head.PlayerID, "#") {
			continue
		}
		records = append(records, record(i*2, item))
		if head.Ver > 1 {
			stale := map[string]types.AttributeValue{}
			for k, v := range item {
				stale[k] = v
			}
			stale["ver"] = &types.AttributeValueMemberN{Value: fmt.Sprint(head.Ver - 1)}
			stale["score"] = &types.AttributeValueMemberN{Value: "-999999"}
			records = append(records, record(i*2+1, stale))
		}
	}
	rand.New(rand.NewSource(3)).Shuffle(len(records), func(i, j int) { records[i], records[j] = records[j], records[i] })
	handler := s.Deps().Stream(lbbind.Leaderboards, routes.LeaderboardProcessor)
	for start := 0; start < len(records); start += 100 {
		resp, err := handler(ctx, events.DynamoDBEvent{Records: records[start:min(start+100, len(records))]})
		if err != nil || len(resp.BatchItemFailures) > 0 {
			t.Fatalf("redelivery: %+v %v", resp, err)
		}
	}
}

func record(i int, item map[string]types.AttributeValue) events.DynamoDBEventRecord {
	return events.DynamoDBEventRecord{
		EventID: fmt.Sprintf("redelivered-%d", i), EventName: "MODIFY", EventSource: "aws:dynamodb",
		Change: events.DynamoDBStreamRecord{
			NewImage: streams.FromItem(item), SequenceNumber: fmt.Sprintf("9%020d", i), StreamViewType: "NEW_AND_OLD_IMAGES",
		},
	}
}
