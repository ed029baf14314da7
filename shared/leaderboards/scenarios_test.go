package leaderboards_test

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/rallyhq/rally/infra/local/apitest"
	"github.com/rallyhq/rally/infra/local/authorizer"
	"github.com/rallyhq/rally/infra/local/stack"
	"github.com/rallyhq/rally/shared/schema"
)

func submit(t testing.TB, c *apitest.Client, board, player, match string, score int64) map[string]any {
	t.Helper()
	return c.Service("POST", "/v1/leaderboards/"+board+"/scores", map[string]any{"player_id": player, "match_id": match, "score": score}).Expect(t, 200).Map(t)
}

// The seed: a player ranked 361 asks for 4 neighbours on each side and
// gets ranks 357 to 365, in order.
func TestRank361SeesRanks357To365(t *testing.T) {
	_, c := startStack(t, "")
	define(t, c, board{ID: "tournament", Title: "Monthly tournament", Policy: "increment", Order: "desc", Reset: "monthly", TieBreak: "earliest", MaxN: 10, Timezone: "UTC"})
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := 1; i <= 400; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			// Player p-NNN ends with 1000-N points: rank N.
			submit(t, c, "tournament", fmt.Sprintf("p-%03d", i), "m1", int64(1000-i))
		}(i)
	}
	wg.Wait()
	var got struct {
		Rank      int `json:"rank"`
		Total     int `json:"total"`
		Neighbors []struct {
			Rank     int    `json:"rank"`
			PlayerID string `json:"player_id"`
		} `json:"neighbors"`
	}
	c.Player("p-361", "GET", "/v1/leaderboards/tournament/players/p-361/rank?k=4", nil).Expect(t, 200).JSON(t, &got)
	var ranks []string
	for _, n := range got.Neighbors {
		ranks = append(ranks, fmt.Sprintf("%d:%s", n.Rank, n.PlayerID))
	}
	want := "357:p-357 358:p-358 359:p-359 360:p-360 361:p-361 362:p-362 363:p-363 364:p-364 365:p-365"
	if got.Rank != 361 || got.Total != 400 || strings.Join(ranks, " ") != want {
		t.Fatalf("rank %d of %d, neighbours %v", got.Rank, got.Total, ranks)
	}
	// Top 10 is clamped to the board's max_n, and a win (+1) moves a player up at once.
	var top struct {
		Entries []struct {
			PlayerID string `json:"player_id"`
		} `json:"entries"`
	}
	c.Player("p-361", "GET", "/v1/leaderboards/tournament/top?n=50", nil).Expect(t, 200).JSON(t, &top)
	if len(top.Entries) != 10 || top.Entries[0].PlayerID != "p-001" {
		t.Fatalf("top: %+v", top.Entries)
	}
	res := submit(t, c, "tournament", "p-365", "m2", 5) // 635 + 5 = 640: ahead of p-360 (640, reached earlier)? no: later, so behind it
	if res["score"] != float64(640) || res["previous_score"] != float64(635) || res["rank"] != float64(361) {
		t.Fatalf("submission answer %v, want score 640 from 635 at rank 361", res)
	}
}

// A monthly board's November stays readable after the clock moves to
// December, and December starts empty.
func TestMonthlyBoardKeepsPastPeriodsReadable(t *testing.T) {
	s, c := startStack(t, "")
	s.Clock().Set(time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC))
	define(t, c, board{ID: "monthly", Title: "Monthly", Policy: "best", Order: "desc", Reset: "monthly", TieBreak: "earliest", MaxN: 100, Timezone: "Europe/Berlin"})
	submit(t, c, "monthly", "ann", "n1", 50)
	submit(t, c, "monthly", "bob", "n2", 70)
	nov := c.Player("ann", "GET", "/v1/leaderboards/monthly/top", nil).Expect(t, 200).Map(t)
	if nov["period"] != "2026-11" || nov["total"] != float64(2) {
		t.Fatalf("November: %v", nov)
	}
	// 30 Nov 23:30 UTC is already December in Berlin.
	s.Clock().Set(time.Date(2026, 11, 30, 23, 30, 0, 0, time.UTC))
	dec := c.Player("ann", "GET", "/v1/leaderboards/monthly/top", nil).Expect(t, 200).Map(t)
	if dec["period"] != "2026-12" || dec["total"] != float64(0) || len(dec["entries"].([]any)) != 0 {
		t.Fatalf("December must start empty: %v", dec)
	}
	def := c.Player("ann", "GET", "/v1/leaderboards/monthly", nil).Expect(t, 200).Map(t)
	if def["current_period"] != "2026-12" || def["total"] != float64(0) {
		t.Fatalf("definition: %v", def)
	}
	past := c.Player("ann", "GET", "/v1/leaderboards/monthly/top?period=2026-11", nil).Expect(t, 200).Map(t)
	entries := past["entries"].([]any)
	if len(entries) != 2 || entries[0].(map[string]any)["player_id"] != "bob" {
		t.Fatalf("November after the reset: %v", past)
	}
	rank := c.Player("ann", "GET", "/v1/leaderboards/monthly/players/ann/rank?period=2026-11", nil).Expect(t, 200).Map(t)
	if rank["rank"] != float64(2) {
		t.Fatalf("ann in November: %v", rank)
	}
	c.Player("ann", "GET", "/v1/leaderboards/monthly/players/ann/rank", nil).Expect(t, 404)
	// A match that happened in November but arrives in December counts for November.
	late := c.Service("POST", "/v1/leaderboards/monthly/scores", map[string]any{
		"player_id": "cid", "match_id": "n3", "score": 90, "occurred_at": "2026-11-29T18:00:00Z"}).Expect(t, 200).Map(t)
	if late["period"] != "2026-11" {
		t.Fatalf("late match: %v", late)
	}
}

// A match id is kept 90 days. On an increment board that never resets, a
// replay of a match within that horizon is recognised; one that occurred
// longer ago is refused (409 too-old) rather than risk counting twice,
// and nothing is written. A match that says it happened in 1970 is
// refused the same way.
func TestAMatchPastTheReplayHorizonIsRefused(t *testing.T) {
	s, c := startStack(t, "")
	start := time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)
	s.Clock().Set(start)
	define(t, c, board{ID: "career", Title: "Career points", Policy: "increment", Order: "desc", Reset: "none", TieBreak: "earliest", MaxN: 100, Timezone: "UTC"})
	match := map[string]any{"player_id": "ann", "match_id": "final", "score": 40, "occurred_at": start.Format(time.RFC3339)}
	c.Service("POST", "/v1/leaderboards/career/scores", match).Expect(t, 200)
	s.Clock().Set(start.Add(89 * 24 * time.Hour))
	if again := c.Service("POST", "/v1/leaderboards/career/scores", match).Expect(t, 200).Map(t); again["applied"] != false || again["score"] != float64(40) {
		t.Fatalf("a replay after 89 days: %v, want applied false and the score still 40", again)
	}
	s.Clock().Set(start.Add(91 * 24 * time.Hour))
	if err := s.WaitIdle(context.Background()); err != nil {
		t.Fatal(err)
	}
	before := itemCounts(t, s)
	for _, at := range []string{start.Format(time.RFC3339), "1970-01-01T00:00:00Z"} {
		match["occurred_at"] = at
		r := c.Service("POST", "/v1/leaderboards/career/scores", match).Expect(t, 409)
		if got := r.Map(t)["type"]; got != "urn:rally:problem:too-old" {
			t.Fatalf("occurred_at %s, 91 days on: problem %v, want urn:rally:problem:too-old", at, got)
		}
	}
	if after := itemCounts(t, s); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("refused replays wrote items: before %v, after %v", before, after)
	}
	got := c.Player("ann", "GET", "/v1/leaderboards/career/players/ann/rank", nil).Expect(t, 200).Map(t)
	if got["score"] != float64(40) {
		t.Fatalf("ann after the refused replays: %v, want 40", got)
	}
}

// The same match id sent ten times at once applies once; concurrent
// matches of one player end at the maximum under best and the sum under
// increment.
func TestConcurrentSubmissions(t *testing.T) {
	_, c := startStack(t, "")
	define(t, c, board{ID: "best", Title: "Best", Policy: "best", Order: "desc", Reset: "none", TieBreak: "earliest", MaxN: 10, Timezone: "UTC"})
	define(t, c, board{ID: "inc", Title: "Inc", Policy: "increment", Order: "desc", Reset: "none", TieBreak: "earliest", MaxN: 10, Timezone: "UTC"})
	run := func(n int, f func(i int)) {
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func(i int) { defer wg.Done(); f(i) }(i)
		}
		wg.Wait()
	}
	var mu sync.Mutex
	applied := 0
	run(10, func(int) {
		if submit(t, c, "inc", "dup", "same-match", 7)["applied"] == true {
			mu.Lock()
			applied++
			mu.Unlock()
		}
	})
	run(20, func(i int) { submit(t, c, "best", "solo", fmt.Sprintf("b%d", i), int64(i*3)) })
	run(20, func(i int) { submit(t, c, "inc", "solo", fmt.Sprintf("i%d", i), int64(i)) })
	score := func(b, p string) float64 {
		return c.Player("x", "GET", "/v1/leaderboards/"+b+"/players/"+p+"/rank", nil).Expect(t, 200).Map(t)["score"].(float64)
	}
	if applied != 1 || score("inc", "dup") != 7 {
		t.Fatalf("one match sent 10 times: applied %d times, score %v", applied, score("inc", "dup"))
	}
	if got := score("best", "solo"); got != 57 {
		t.Fatalf("best of 0..57: %v", got)
	}
	if got := score("inc", "solo"); got != 190 {
		t.Fatalf("sum of 0..19: %v", got)
	}
}

// Definitions: immutable fields answer 409; a FROZEN board refuses scores
// but still answers reads; an ARCHIVED one too.
func TestDefinitionsAndStatus(t *testing.T) {
	_, c := startStack(t, "")
	b := board{ID: "season", Title: "Season 1", Policy: "best", Order: "desc", Reset: "weekly", TieBreak: "shared", MaxN: 50, Timezone: "America/New_York"}
	if r := c.Service("PUT", "/v1/leaderboards/season", b); r.Status != 201 {
		t.Fatalf("create: %d %s", r.Status, r.Body)
	}
	b.Title = "Season One"
	if r := c.Service("PUT", "/v1/leaderboards/season", b); r.Status != 200 || !strings.Contains(string(r.Body), "Season One") {
		t.Fatalf("rename: %d %s", r.Status, r.Body)
	}
	for field, change := range map[string]func(*board){
		"policy": func(b *board) { b.Policy = "latest" }, "order": func(b *board) { b.Order = "asc" },
		"reset": func(b *board) { b.Reset = "daily" }, "tie_break": func(b *board) { b.TieBreak = "earliest" },
		"timezone": func(b *board) { b.Timezone = "UTC" },
	} {
		changed := b
		change(&changed)
		r := c.Service("PUT", "/v1/leaderboards/season", changed)
		if r.Status != 409 || !strings.Contains(string(r.Body), field) {
			t.Errorf("changing %s: %d %s", field, r.Status, r.Body)
		}
	}
	submit(t, c, "season", "p1", "m1", 10)
	for _, status := range []string{"FROZEN", "ARCHIVED"} {
		c.Service("PUT", "/v1/leaderboards/season", map[string]any{"title": "Season One", "policy": "best", "order": "desc", "reset": "weekly",
			"tie_break": "shared", "max_n": 50, "timezone": "America/New_York", "status": status}).Expect(t, 200)
		r := c.Service("POST", "/v1/leaderboards/season/scores", map[string]any{"player_id": "p2", "match_id": "m2", "score": 20})
		if r.Status != 409 {
			t.Fatalf("%s board took a score: %d %s", status, r.Status, r.Body)
		}
		c.Player("p1", "GET", "/v1/leaderboards/season/players/p1/rank", nil).Expect(t, 200)
	}
}

// Bad input gets its 4xx as problem+json and writes nothing.
func TestLeaderboardBadInputWritesNothing(t *testing.T) {
	s, c := startStack(t, "")
	define(t, c, board{ID: "ok", Title: "OK", Policy: "best", Order: "desc", Reset: "daily", TieBreak: "earliest", MaxN: 10, Timezone: "UTC"})
	before := itemCounts(t, s)
	tok, _, err := s.JWT().Mint(authorizer.TokenRequest{Subject: "mallory"})
	if err != nil {
		t.Fatal(err)
	}
	score := func(body string) apitest.Call {
		return apitest.Call{Method: "POST", Path: "/v1/leaderboards/ok/scores", Body: body, Service: true}
	}
	def := func(body string) apitest.Call {
		return apitest.Call{Method: "PUT", Path: "/v1/leaderboards/new-board", Body: body, Service: true}
	}
	read := func(path string) apitest.Call { return apitest.Call{Method: "GET", Path: path, As: "reader"} }
	for name, tc := range map[string]struct {
		call   apitest.Call
		status int
	}{
		"unknown board: top":              {read("/v1/leaderboards/nope/top"), 404},
		"unknown board: submit":           {score(`{"player_id":"p","match_id":"m","score":1}`), 0},
		"player submitting":               {apitest.Call{Method: "POST", Path: "/v1/leaderboards/ok/scores", Body: `{"player_id":"p","match_id":"m","score":1}`, Token: tok}, 403},
		"n = 0":                           {read("/v1/leaderboards/ok/top?n=0"), 400},
		"n = 1001":                        {read("/v1/leaderboards/ok/top?n=1001"), 400},
		"from_rank = 0":                   {read("/v1/leaderboards/ok/top?from_rank=0"), 400},
		"from_rank not a number":          {read("/v1/leaderboards/ok/top?from_rank=ten"), 400},
		"k = -1":                          {read("/v1/leaderboards/ok/players/p/rank?k=-1"), 400},
		"k = 51":                          {read("/v1/leaderboards/ok/players/p/rank?k=51"), 400},
		"k not a number":                  {read("/v1/leaderboards/ok/players/p/friends-rank?k=two"), 400},
		"score over 2^53":                 {score(`{"player_id":"p","match_id":"m","score":9007199254740993}`), 400},
		"score under -2^53":               {score(`{"player_id":"p","match_id":"m","score":-9007199254740993}`), 400},
		"fractional score":                {score(`{"player_id":"p","match_id":"m","score":1.5}`), 400},
		"score as a string":               {score(`{"player_id":"p","match_id":"m","score":"1"}`), 400},
		"no match id":                     {score(`{"player_id":"p","score":1}`), 400},
		"bad player id":                   {score(`{"player_id":"a b","match_id":"m","score":1}`), 400},
		"future occurred_at":              {score(`{"player_id":"p","match_id":"m","score":1,"occurred_at":"2999-01-01T00:00:00Z"}`), 400},
		"unknown field":                   {score(`{"player_id":"p","match_id":"m","score":1,"bonus":2}`), 400},
		"malformed period":                {read("/v1/leaderboards/ok/top?period=2026-W47"), 400},
		"impossible date":                 {read("/v1/leaderboards/ok/top?period=2026-02-30"), 400},
		"invalid time zone":               {def(`{"title":"T","timezone":"Mars/Olympus_Mons"}`), 400},
		"unknown policy":                  {def(`{"title":"T","policy":"sum"}`), 400},
		"max_n over 1000":                 {def(`{"title":"T","max_n":5000}`), 400},
		"partitions = 0":                  {def(`{"title":"T","partitions":0}`), 400},
		"partitions over 64":              {def(`{"title":"T","partitions":65}`), 400},
		"partitions as a string":          {def(`{"title":"T","partitions":"8"}`), 400},
		"partitions changed":              {apitest.Call{Method: "PUT", Path: "/v1/leaderboards/ok", Body: `{"title":"OK","reset":"daily","max_n":10,"partitions":4}`, Service: true}, 409},
		"no title":                        {def(`{"policy":"best"}`), 400},
		"friends not a list":              {apitest.Call{Method: "PUT", Path: "/v1/players/p/friends", Body: `{"friend_ids":"bob"}`, Service: true}, 400},
		"friend id malformed":             {apitest.Call{Method: "PUT", Path: "/v1/players/p/friends", Body: `{"friend_ids":["ok","not ok"]}`, Service: true}, 400},
		"profile without a name":          {apitest.Call{Method: "PUT", Path: "/v1/players/p/profile", Body: `{"region":"eu"}`, Service: true}, 400},
		"profile with a bad avatar":       {apitest.Call{Method: "PUT", Path: "/v1/players/p/profile", Body: `{"display_name":"P","avatar_url":"ftp://x"}`, Service: true}, 400},
		"player on a service route":       {apitest.Call{Method: "PUT", Path: "/v1/players/p/profile", Body: `{"display_name":"P"}`, As: "p"}, 403},
		"unranked player":                 {read("/v1/leaderboards/ok/players/nobody/rank"), 404},
		"unranked player among friends":   {apitest.Call{Method: "GET", Path: "/v1/leaderboards/ok/players/nobody/friends-rank", As: "nobody"}, 404},
		"another player's friends rank":   {read("/v1/leaderboards/ok/players/p/friends-rank"), 403},
		"region of a board not regional":  {read("/v1/leaderboards/ok/top?region=eu"), 400},
		"region on a rank, not regional":  {read("/v1/leaderboards/ok/players/p/rank?region=eu"), 400},
		"region on a total, not regional": {read("/v1/leaderboards/ok?region=eu"), 400},
		"malformed region":                {read("/v1/leaderboards/ok/top?region=e%20u"), 400},
		"empty region":                    {read("/v1/leaderboards/ok/top?region="), 400},
		"regional not a boolean":          {def(`{"title":"T","regional":"yes"}`), 400},
	} {
		t.Run(name, func(t *testing.T) {
			call := tc.call
			want := tc.status
			if name == "unknown board: submit" {
				call.Path = "/v1/leaderboards/nope/scores"
				want = 404
			}
			r, err := c.Try(call)
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != want || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/problem+json") {
				t.Fatalf("status %d (%s), want %d problem+json: %s", r.Status, r.Header.Get("Content-Type"), want, r.Body)
			}
		})
	}
	if after := itemCounts(t, s); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("bad requests wrote items: before %v, after %v", before, after)
	}
}

func itemCounts(t *testing.T, s *stack.Stack) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, table := range schema.Tables() {
		page, err := s.DB().Scan(context.Background(), &dynamodb.ScanInput{TableName: aws.String(s.Tables().Of(table))})
		if err != nil {
			t.Fatal(err)
		}
		out[table.Name] = len(page.Items)
	}
	return out
}

// A player's rank among friends is theirs: it lists who their friends are.
// Anyone else asking gets 403 and learns nothing of them, while the board
// entries themselves (rank, neighbours) stay public.
func TestFriendsRankIsThePlayersOwn(t *testing.T) {
	_, c := startStack(t, "")
	define(t, c, board{ID: "cup", Title: "Cup", Policy: "best", Order: "desc", Reset: "none", TieBreak: "earliest", MaxN: 10, Timezone: "UTC"})
	for i, p := range []string{"ann", "bob", "cat", "mallory"} {
		submit(t, c, "cup", p, "m1", int64(10*(i+1)))
	}
	c.Service("PUT", "/v1/players/ann/friends", map[string]any{"friend_ids": []string{"bob", "cat"}}).Expect(t, 200)

	var own struct {
		FriendsRank  int `json:"friends_rank"`
		FriendsTotal int `json:"friends_total"`
		Neighbors    []struct {
			PlayerID string `json:"player_id"`
		} `json:"neighbors"`
	}
	c.Player("ann", "GET", "/v1/leaderboards/cup/players/ann/friends-rank?k=4", nil).Expect(t, 200).JSON(t, &own)
	if own.FriendsRank != 3 || own.FriendsTotal != 3 || fmt.Sprint(own.Neighbors) != "[{cat} {bob} {ann}]" {
		t.Fatalf("ann's own friends rank: %+v", own)
	}
	for _, reader := range []string{"mallory", "bob"} {
		r := c.Player(reader, "GET", "/v1/leaderboards/cup/players/ann/friends-rank?k=4", nil).Expect(t, 403)
		if ct := r.Header.Get("Content-Type"); ct != "application/problem+json" || strings.Contains(string(r.Body), "cat") {
			t.Fatalf("%s asking for ann's friends rank: %s %s", reader, ct, r.Body)
		}
	}
	// Another player's place on the board itself is public.
	c.Player("mallory", "GET", "/v1/leaderboards/cup/players/ann/rank?k=1", nil).Expect(t, 200)
}

// Boards are listed by game and status, a page at a time: every page
// together is exactly the boards the filter selects, each once, and a
// cursor continues only the listing it came from, for a day.
func TestListingBoardsByGameAndStatus(t *testing.T) {
	s, c := startStack(t, "")
	s.Clock().Set(time.Date(2026, 11, 20, 9, 0, 0, 0, time.UTC))
	want := map[string][]string{} // "game/status" → ids
	for i := 0; i < 13; i++ {
		id := fmt.Sprintf("board-%02d", i)
		game := []string{"space-race", "tile-town"}[i%2]
		status := []string{"ACTIVE", "ACTIVE", "FROZEN"}[i%3]
		c.Service("PUT", "/v1/leaderboards/"+id, map[string]any{"title": id, "scope": map[string]any{"game": game}, "status": status}).Expect(t, 201)
		for _, key := range []string{"/", game + "/", "/" + status, game + "/" + status} {
			want[key] = append(want[key], id)
		}
	}
	c.Service("PUT", "/v1/leaderboards/unscoped", map[string]any{"title": "No game"}).Expect(t, 201)
	want["/"] = append(want["/"], "unscoped")
	want["/ACTIVE"] = append(want["/ACTIVE"], "unscoped")

	type page struct {
		Items []struct {
			ID     string `json:"leaderboard_id"`
			Status string `json:"status"`
			Scope  struct {
				Game string `json:"game"`
			} `json:"scope"`
		} `json:"items"`
		NextCursor *string `json:"next_cursor"`
	}
	list := func(query string) (ids []string, cursors []string) {
		t.Helper()
		next := ""
		for pages := 0; ; pages++ {
			if pages > 20 {
				t.Fatalf("%s: the listing does not end", query)
			}
			q := query + "&limit=3"
			if next != "" {
				q += "&cursor=" + url.QueryEscape(next)
			}
			var p page
			c.Player("reader", "GET", "/v1/leaderboards?"+q, nil).Expect(t, 200).JSON(t, &p)
			if len(p.Items) > 3 {
				t.Fatalf("%s: a page of %d with limit=3", query, len(p.Items))
			}
			for _, it := range p.Items {
				ids = append(ids, it.ID)
			}
			if p.NextCursor == nil {
				return ids, cursors
			}
			next = *p.NextCursor
			cursors = append(cursors, next)
		}
	}
	for key, ids := range want {
		game, status, _ := strings.Cut(key, "/")
		q := url.Values{}
		if game != "" {
			q.Set("game", game)
		}
		if status != "" {
			q.Set("status", status)
		}
		got, _ := list(q.Encode())
		slices.Sort(got)
		slices.Sort(ids)
		if !slices.Equal(got, ids) {
			t.Errorf("listing %q: got %v, want %v", key, got, ids)
		}
	}
	_, cursors := list("game=space-race")
	if len(cursors) == 0 {
		t.Fatal("seven boards in pages of three gave no cursor")
	}
	// A cursor belongs to its listing, and lasts a day.
	c.Player("reader", "GET", "/v1/leaderboards?game=tile-town&cursor="+url.QueryEscape(cursors[0]), nil).Expect(t, 400)
	c.Player("reader", "GET", "/v1/leaderboards?game=space-race&cursor=forged.cursor", nil).Expect(t, 400)
	s.Clock().Set(time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)) // the clock runs on from a set time: well past a day
	c.Player("reader", "GET", "/v1/leaderboards?game=space-race&cursor="+url.QueryEscape(cursors[0]), nil).Expect(t, 400)
	for _, bad := range []string{"status=OPEN", "limit=0", "limit=101", "game=a%20b", "game="} {
		r := c.Player("reader", "GET", "/v1/leaderboards?"+bad, nil).Expect(t, 400)
		if !strings.HasPrefix(r.Header.Get("Content-Type"), "application/problem+json") {
			t.Errorf("%s: %s", bad, r.Header.Get("Content-Type"))
		}
	}
	c.Service("GET", "/v1/leaderboards", nil).Expect(t, 401) // a player route takes a player token
}
