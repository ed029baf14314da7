package leaderboards_test

import (
	"context"
	"fmt"
	"math/rand"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/redis/go-redis/v9"

	"github.com/rallyhq/rally/infra/local/apitest"
	"github.com/rallyhq/rally/infra/local/stack"
	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/infra/local/testenv/await"
	"github.com/rallyhq/rally/shared/leaderboards/dynamo"
	"github.com/rallyhq/rally/shared/schema"
)

// regions the players of the regional model live in; "" is a profile
// without a region, and "oceania" a region nobody is in.
var (
	livedIn  = []string{"eu", "na", "apac", ""}
	readable = []string{"eu", "na", "apac", "oceania"}
)

// regional is the model of regional boards: each board's global model,
// and where each player's score shows, which is their profile's region
// when their last new match was applied.
type regional struct {
	models  []*model
	profile map[string]string            // player → profile region now
	shownIn map[*model]map[string]string // board → player → view
	friends map[string][]string
}

// in returns a board's scores shown in one region.
func (r *regional) in(m *model, region string) map[string]held {
	out := map[string]held{}
	for p, h := range m.scores {
		if r.shownIn[m][p] == region {
			out[p] = h
		}
	}
	return out
}

// Two regional boards take submissions from players spread over regions,
// some of whom move (a move shows on their next new match, even one that
// does not change their score), some of whom retry a match (which moves
// nothing). Every region's top, rank + K, friends rank and total equal a
// brute-force sort of the scores the model shows there — from Redis, from
// DynamoDB with Redis down, after Redis came back empty and was rebuilt,
// after the views' member counts were lost and recomputed, and after a
// player was erased.
func TestRegionalViewsFollowTheModel(t *testing.T) {
	t.Parallel()
	srv := testenv.Redis(t)
	s, c := startStack(t, srv.URL())
	r := playRegions(t, s, c, testenv.Scale(40, 400))
	checkRegions(t, c, r, false, 0)

	// The views' member counts are derived: lost, a recompute brings them
	// back from the scores, and a rebuild finds every view again.
	ctx := context.Background()
	for _, m := range r.models {
		for _, board := range []string{m.b.ID, m.b.ID + "@eu"} {
			_, err := s.DB().DeleteItem(ctx, &dynamodb.DeleteItemInput{
				TableName: aws.String(s.Tables().Of(schema.Scores)),
				Key: map[string]types.AttributeValue{
					schema.AttrPK: &types.AttributeValueMemberS{Value: dynamo.PeriodKey(board, currentPeriod(m))}, schema.AttrPlayerID: &types.AttributeValueMemberS{Value: dynamo.MetaID},
				},
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	runLeaderboardJob(t, c, "recompute")
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	awaitRedis(t, c, r)
	checkRegions(t, c, r, false, sampled)

	srv.Stop()
	checkRegions(t, c, r, true, sampled)
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	awaitRedis(t, c, r)
	checkRegions(t, c, r, false, sampled)

	// An erased player leaves every view as well as the boards.
	erased := ""
	for p, region := range r.shownIn[r.models[0]] {
		if region == "eu" && (erased == "" || p < erased) {
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
	if err := s.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	for _, m := range r.models {
		delete(m.scores, erased)
		delete(r.shownIn[m], erased)
	}
	delete(r.friends, erased)
	for p, fs := range r.friends {
		r.friends[p] = dedupe(fs, erased)
	}
	checkRegions(t, c, r, false, sampled)
}

// awaitRedis waits until the processor has rebuilt the boards and their
// views in a Redis that lost them, and reads leave DynamoDB.
func awaitRedis(t *testing.T, c *apitest.Client, r *regional) {
	t.Helper()
	await.Until(t, 30*time.Second, "views served from Redis again", func() bool {
		var top struct {
			Degraded bool `json:"degraded"`
		}
		c.Player("reader", "GET", "/v1/leaderboards/"+r.models[0].b.ID+"/top?region=eu", nil).Expect(t, 200).JSON(t, &top)
		return !top.Degraded
	})
}

func currentPeriod(m *model) string {
	if m.b.Reset == "weekly" {
		return "2026-W46" // the model plays on 2026-11-15, a Sunday
	}
	return "all"
}

// runLeaderboardJob runs a leaderboard job through POST /v1/ops/jobs and
// awaits its end.
func runLeaderboardJob(t *testing.T, c *apitest.Client, kind string) {
	t.Helper()
	var j struct {
		ID    string `json:"job_id"`
		State string `json:"state"`
		Error string `json:"error"`
	}
	c.Service("POST", "/v1/ops/jobs", map[string]any{"kind": kind, "target": "leaderboard"}).Expect(t, 202).JSON(t, &j)
	await.Until(t, time.Minute, kind+" to finish", func() bool {
		c.Service("GET", "/v1/ops/jobs/"+j.ID, nil).Expect(t, 200).JSON(t, &j)
		return j.State != "RUNNING"
	})
	if j.State != "DONE" {
		t.Fatalf("%s ended %s: %s", kind, j.State, j.Error)
	}
}

// playRegions defines two regional boards and plays three rounds on them:
// everyone submits, a third of the players move (or lose their region),
// then half of the players submit again, some retrying a match.
func playRegions(t *testing.T, s *stack.Stack, c *apitest.Client, players int) *regional {
	t.Helper()
	s.Clock().Set(time.Date(2026, 11, 15, 12, 0, 0, 0, time.UTC))
	r := &regional{profile: map[string]string{}, shownIn: map[*model]map[string]string{}, friends: map[string][]string{}}
	for _, b := range []board{
		{ID: "cup", Policy: "best", Order: "desc", TieBreak: "earliest", Reset: "none"},
		{ID: "league", Policy: "increment", Order: "desc", TieBreak: "shared", Reset: "weekly"},
	} {
		b.Title, b.MaxN, b.Timezone, b.Regional = "Board "+b.ID, 1000, "UTC", true
		define(t, c, b)
		m := newModel(b)
		r.models = append(r.models, m)
		r.shownIn[m] = map[string]string{}
	}
	rng := rand.New(rand.NewSource(11))
	setRegion := func(p, region string) {
		body := map[string]any{"display_name": "Player " + p}
		if region != "" {
			body["region"] = region
		}
		c.Service("PUT", "/v1/players/"+p+"/profile", body).Expect(t, 200)
		r.profile[p] = region
	}
	name := func(i int) string { return fmt.Sprintf("p%04d", i) }
	for i := 0; i < players; i++ {
		setRegion(name(i), livedIn[rng.Intn(len(livedIn))])
	}
	base := time.Date(2026, 11, 15, 6, 0, 0, 0, time.UTC)
	round := func(who []int, seed int64) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		errc := make(chan error, len(who))
		sem := make(chan struct{}, 16)
		for _, i := range who {
			wg.Add(1)
			go func(p string, rng *rand.Rand) {
				defer wg.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				for _, m := range r.models {
					match := fmt.Sprintf("m%d", rng.Intn(3)) // a retry now and then
					score := int64(rng.Intn(20))
					at := base.Add(time.Duration(rng.Intn(60)) * time.Minute)
					body := map[string]any{"player_id": p, "match_id": match, "score": score, "occurred_at": at.Format(time.RFC3339)}
					res, err := c.Try(apitest.Call{Method: "POST", Path: "/v1/leaderboards/" + m.b.ID + "/scores", Body: body, Service: true})
					if err != nil || res.Status != 200 {
						errc <- fmt.Errorf("submit %v: %v %d %s", body, err, res.Status, res.Body)
						return
					}
					mu.Lock()
					if m.submit(p, match, score, at) {
						r.shownIn[m][p] = r.profile[p]
					}
					mu.Unlock()
				}
			}(name(i), rand.New(rand.NewSource(seed*1000+int64(i))))
		}
		wg.Wait()
		close(errc)
		for err := range errc {
			t.Fatal(err)
		}
	}
	all := make([]int, players)
	for i := range all {
		all[i] = i
	}
	round(all, 1)
	for i := 0; i < players; i += 3 {
		setRegion(name(i), livedIn[rng.Intn(len(livedIn))])
	}
	round(all[:players/2], 2)
	round(all[players/4:], 3)
	if err := s.WaitIdle(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		p := name(rng.Intn(players))
		var fs []string
		for j := 1 + rng.Intn(10); j > 0; j-- {
			fs = append(fs, name(rng.Intn(players)))
		}
		c.Service("PUT", "/v1/players/"+p+"/friends", map[string]any{"friend_ids": fs}).Expect(t, 200)
		r.friends[p] = dedupe(fs, p)
	}
	return r
}

// sampled is how many players' ranks a check after the first reads per
// view (every one under RALLY_TEST_SCALE=full); tops, totals and friends
// ranks are read whole every time.
var sampled = testenv.Scale(8, 0)

// checkRegions compares every region's reads of every board with the
// model; sample bounds the players whose rank is read per view (0 = all).
func checkRegions(t *testing.T, c *apitest.Client, r *regional, degraded bool, sample int) {
	t.Helper()
	for _, m := range r.models {
		for _, region := range readable {
			scores := r.in(m, region)
			want := standings(m.b, scores, nil)
			q := "region=" + url.QueryEscape(region)
			var top struct {
				Region   string   `json:"region"`
				Entries  []ranked `json:"entries"`
				Total    int      `json:"total"`
				Degraded bool     `json:"degraded"`
			}
			c.Player("reader", "GET", "/v1/leaderboards/"+m.b.ID+"/top?n=1000&"+q, nil).Expect(t, 200).JSON(t, &top)
			if fmt.Sprint(top.Entries) != fmt.Sprint(want) || top.Total != len(want) || top.Region != region || top.Degraded != degraded {
				t.Fatalf("%s top of %s (degraded %v):\n got %v (total %d)\nwant %v", m.b.ID, region, top.Degraded, top.Entries, top.Total, want)
			}
			var def struct {
				Total    int  `json:"total"`
				Regional bool `json:"regional"`
			}
			c.Player("reader", "GET", "/v1/leaderboards/"+m.b.ID+"?"+q, nil).Expect(t, 200).JSON(t, &def)
			if def.Total != len(want) || !def.Regional {
				t.Fatalf("%s in %s: total %d, regional %v; want %d", m.b.ID, region, def.Total, def.Regional, len(want))
			}
			step := 1 // a sample spreads over the whole view
			if sample > 0 && len(want) > sample {
				step = len(want) / sample
			}
			for i := 0; i < len(want); i += step {
				row := want[i]
				self, win, _ := window(want, row.PlayerID, 3)
				var got struct {
					Rank      int      `json:"rank"`
					Score     int64    `json:"score"`
					Total     int      `json:"total"`
					Neighbors []ranked `json:"neighbors"`
				}
				c.Player("reader", "GET", "/v1/leaderboards/"+m.b.ID+"/players/"+row.PlayerID+"/rank?k=3&"+q, nil).Expect(t, 200).JSON(t, &got)
				if got.Rank != self.Rank || got.Score != self.Score || got.Total != len(want) || fmt.Sprint(got.Neighbors) != fmt.Sprint(win) {
					t.Fatalf("%s rank of %s in %s: got %+v, want %+v of %d, neighbours %v", m.b.ID, row.PlayerID, region, got, self, len(want), win)
				}
			}
			for p, fs := range r.friends {
				among := standings(m.b, scores, append([]string{p}, fs...))
				self, win, ok := window(among, p, 2)
				res := c.Player(p, "GET", "/v1/leaderboards/"+m.b.ID+"/players/"+p+"/friends-rank?k=2&"+q, nil)
				if !ok {
					res.Expect(t, 404)
					continue
				}
				var got struct {
					FriendsRank  int      `json:"friends_rank"`
					FriendsTotal int      `json:"friends_total"`
					Neighbors    []ranked `json:"neighbors"`
				}
				res.Expect(t, 200).JSON(t, &got)
				if got.FriendsRank != self.Rank || got.FriendsTotal != len(among) || fmt.Sprint(got.Neighbors) != fmt.Sprint(win) {
					t.Fatalf("%s friends rank of %s in %s: got %+v, want %d of %d, %v", m.b.ID, p, region, got, self.Rank, len(among), win)
				}
			}
		}
		// A player outside a view is not ranked in it.
		for p, region := range r.shownIn[m] {
			other := "eu"
			if region == "eu" {
				other = "na"
			}
			c.Player("reader", "GET", "/v1/leaderboards/"+m.b.ID+"/players/"+p+"/rank?region="+other, nil).Expect(t, 404)
			break
		}
		// The global board holds everyone, wherever they are.
		var top struct {
			Entries []ranked `json:"entries"`
		}
		c.Player("reader", "GET", "/v1/leaderboards/"+m.b.ID+"/top?n=1000", nil).Expect(t, 200).JSON(t, &top)
		if want := standings(m.b, m.scores, nil); fmt.Sprint(top.Entries) != fmt.Sprint(want) {
			t.Fatalf("%s global top:\n got %v\nwant %v", m.b.ID, top.Entries, want)
		}
	}
}

// A cheater's score comes off a board at once, everywhere it showed: the
// global board and its region's view, in every period or in one. Everyone
// below moves up (the reads equal the model without the cheater, from
// Redis and from DynamoDB); resending a removed match brings nothing
// back, and a new match starts the player afresh.
func TestRemovingACheaterMovesEveryoneBelowUp(t *testing.T) {
	t.Parallel()
	srv := testenv.Redis(t)
	s, c := startStack(t, srv.URL())
	r := playRegions(t, s, c, testenv.Scale(24, 200))
	cup, league := r.models[0], r.models[1]
	top := func(m *model) string { return standings(m.b, m.scores, nil)[0].PlayerID }

	cheater := top(cup)
	c.Service("DELETE", "/v1/leaderboards/cup/players/"+cheater, nil).Expect(t, 204)
	delete(cup.scores, cheater)
	delete(r.shownIn[cup], cheater)
	// Redis forgot the score before the answer.
	awaitTop(t, c, cup)
	c.Player("reader", "GET", "/v1/leaderboards/cup/players/"+cheater+"/rank", nil).Expect(t, 404)

	// On the weekly league, from this week only; a resent match is
	// remembered and adds nothing, a new one counts from zero.
	cheater = top(league)
	c.Service("DELETE", "/v1/leaderboards/league/players/"+cheater+"?period=2026-W46", nil).Expect(t, 204)
	delete(league.scores, cheater)
	delete(r.shownIn[league], cheater)
	c.Service("DELETE", "/v1/leaderboards/league/players/"+cheater+"?period=2026-W46", nil).Expect(t, 204) // again: nothing to do
	at := time.Date(2026, 11, 15, 7, 0, 0, 0, time.UTC)
	for _, match := range []string{"m0", "m1", "m2", "fresh"} {
		body := map[string]any{"player_id": cheater, "match_id": match, "score": 5, "occurred_at": at.Format(time.RFC3339)}
		res := c.Service("POST", "/v1/leaderboards/league/scores", body).Expect(t, 200).Map(t)
		if isNew := league.submit(cheater, match, 5, at); res["applied"] != isNew {
			t.Fatalf("%s after removal: applied=%v, the model says %v", match, res["applied"], isNew)
		}
		if res["applied"] == true {
			r.shownIn[league][cheater] = r.profile[cheater]
		}
	}
	if err := s.WaitIdle(context.Background()); err != nil {
		t.Fatal(err)
	}
	awaitTop(t, c, league)
	checkRegions(t, c, r, false, sampled)
	srv.Stop()
	checkRegions(t, c, r, true, sampled)

	c.Service("DELETE", "/v1/leaderboards/nope/players/p0001", nil).Expect(t, 404)
	c.Service("DELETE", "/v1/leaderboards/cup/players/p0001?period=2026-W46", nil).Expect(t, 400) // cup never resets
	c.Player("p0001", "DELETE", "/v1/leaderboards/cup/players/p0001", nil).Expect(t, 403)
}

// A banned player is hidden from every board and view at once (everyone
// below moves up), from Redis, from DynamoDB and from a Redis rebuilt
// empty; their submissions answer 403 and write nothing; an unban puts
// their scores back where they rank.
func TestABannedPlayerIsHiddenEverywhereUntilUnbanned(t *testing.T) {
	t.Parallel()
	srv := testenv.Redis(t)
	s, c := startStack(t, srv.URL())
	r := playRegions(t, s, c, testenv.Scale(24, 200))
	cup := r.models[0]
	banned := standings(cup.b, cup.scores, nil)[0].PlayerID
	kept := map[*model]held{}
	shown := map[*model]string{}
	for _, m := range r.models {
		if h, ok := m.scores[banned]; ok {
			kept[m], shown[m] = h, r.shownIn[m][banned]
			delete(m.scores, banned)
			delete(r.shownIn[m], banned)
		}
	}
	var ban struct {
		Banned   bool    `json:"banned"`
		BannedAt *string `json:"banned_at"`
	}
	c.Service("PUT", "/v1/ops/players/"+banned+"/ban", nil).Expect(t, 200).JSON(t, &ban)
	if !ban.Banned || ban.BannedAt == nil {
		t.Fatalf("ban answer: %+v", ban)
	}
	awaitTop(t, c, cup)
	checkRegions(t, c, r, false, sampled)
	for _, m := range r.models {
		c.Player("reader", "GET", "/v1/leaderboards/"+m.b.ID+"/players/"+banned+"/rank", nil).Expect(t, 404)
		body := map[string]any{"player_id": banned, "match_id": "after-ban", "score": 99}
		c.Service("POST", "/v1/leaderboards/"+m.b.ID+"/scores", body).Expect(t, 403)
	}
	c.Service("PUT", "/v1/ops/players/"+banned+"/ban", nil).Expect(t, 200) // again: nothing more to do

	ctx := context.Background()
	srv.Stop()
	checkRegions(t, c, r, true, sampled)
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	awaitRedis(t, c, r)
	checkRegions(t, c, r, false, sampled)

	c.Service("DELETE", "/v1/ops/players/"+banned+"/ban", nil).Expect(t, 200).JSON(t, &ban)
	if ban.Banned || ban.BannedAt != nil {
		t.Fatalf("unban answer: %+v", ban)
	}
	for m, h := range kept {
		m.scores[banned], r.shownIn[m][banned] = h, shown[m]
	}
	awaitTop(t, c, cup)
	checkRegions(t, c, r, false, sampled)
	// The match refused during the ban was never recorded: it counts now.
	body := map[string]any{"player_id": banned, "match_id": "after-ban", "score": 99, "occurred_at": "2026-11-15T07:00:00Z"}
	c.Service("POST", "/v1/leaderboards/cup/scores", body).Expect(t, 200)
	cup.submit(banned, "after-ban", 99, time.Date(2026, 11, 15, 7, 0, 0, 0, time.UTC))
	awaitTop(t, c, cup)

	c.Player(banned, "PUT", "/v1/ops/players/"+banned+"/ban", nil).Expect(t, 403)
	c.Service("PUT", "/v1/ops/players/not%20an%20id/ban", nil).Expect(t, 400)
}

// awaitTop waits until a board's top equals the model: a change Redis took
// at once shows once the 250 ms a hot board may be reused have passed.
func awaitTop(t *testing.T, c *apitest.Client, m *model) {
	t.Helper()
	await.Success(t, 5*time.Second, m.b.ID+" top to equal the model", func() error {
		var got struct {
			Entries []ranked `json:"entries"`
		}
		c.Player("reader", "GET", "/v1/leaderboards/"+m.b.ID+"/top?n=1000", nil).Expect(t, 200).JSON(t, &got)
		if want := standings(m.b, m.scores, nil); fmt.Sprint(got.Entries) != fmt.Sprint(want) {
			return fmt.Errorf("got %v, want %v", got.Entries, want)
		}
		return nil
	})
}
