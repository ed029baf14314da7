package retention_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/infra/local/apitest"
	"github.com/rallyhq/rally/infra/local/stack"
	"github.com/rallyhq/rally/infra/local/stacktest"
	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/infra/local/testenv/await"
	"github.com/rallyhq/rally/shared/config"
	"github.com/rallyhq/rally/shared/leaderboards"
	lbbind "github.com/rallyhq/rally/shared/leaderboards/bind"
	"github.com/rallyhq/rally/shared/reactions"
	"github.com/rallyhq/rally/shared/retention"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
	"github.com/rallyhq/rally/shared/streams"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// The players of the tour. zed is erased; dan's scores are parked (the
// leaderboard processor fails on them); cat is banned; eve spends her
// favorite budget; imp comes in through an import.
const (
	ann = "ann"
	bob = "bob"
	cat = "cat"
	dan = "dan"
	eve = "eve"
	imp = "imp"
	zed = "zed-erasable"
)

// favoriteBudget is the favorites a player may make a minute in the tour:
// few, so the budget's key outlives the requests by seconds, and one
// more is refused.
const favoriteBudget = 6

// A tour of every feature through the API, with a census of every
// DynamoDB item and Redis key after each of its days and at its end: each
// must belong to exactly one declared family, carry a TTL exactly when its
// family expires, and expire when the family says. Every family the tour
// can leave behind must be seen.
func TestEverythingATourOfEveryFeatureLeavesIsDeclared(t *testing.T) {
	c := &census{seen: map[string]bool{}, expires: map[string]string{}, found: findings{}}
	tour(t, func(s *stack.Stack) { c.take(t, s) })
	c.found.report(t)
	for _, f := range retention.Families() {
		if f.Untoured == "" && !c.seen[familyID(f)] {
			t.Errorf("the tour left no %s %q (%s): it should, or the family should say why it cannot (Untoured)", where(f), f.Name, keyText(f))
		}
	}
}

func familyID(f retention.Family) string { return string(f.Store) + "/" + f.Table + "/" + f.Name }

func where(f retention.Family) string {
	if f.Store == retention.Redis {
		return "Redis key of"
	}
	return f.Table + " item of"
}

func keyText(f retention.Family) string {
	if f.Sort != "" {
		return f.Key + " · " + f.Sort
	}
	return f.Key
}

// poisoned is the leaderboard processor failing on dan's scores, so their
// batch is parked in the dead-letter archive.
func poisoned(real *atomic.Pointer[streams.Handler]) streams.Handler {
	return func(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		for _, r := range ev.Records {
			if p, ok := r.Change.NewImage[schema.AttrPlayerID]; ok && p.String() == dan {
				return events.DynamoDBEventResponse{}, errors.New("a bug only dan's scores meet")
			}
		}
		h := real.Load()
		if h == nil {
			return events.DynamoDBEventResponse{}, errors.New("the stack is not up yet")
		}
		return (*h)(ctx, ev)
	}
}

// tour runs every feature on a local stack and checks what players and
// operators see of it. It calls census when nothing has been written yet,
// after each day, and at the end, each time with every processor idle.
func tour(t *testing.T, census func(*stack.Stack)) {
	t.Helper()
	var boards atomic.Pointer[streams.Handler]
	s := stacktest.Start(t, stack.Options{
		TickEvery: 200 * time.Millisecond,
		Processors: map[string]streams.Handler{
			routes.LeaderboardProcessor.Function: poisoned(&boards),
		},
		Configure: func(c *config.Config) {
			// Young accounts are recorded (Accounts, and the first-seen
			// times cached in Redis) and grow up within the tour.
			c.YoungAccountAge = time.Hour
			c.Budgets[routes.FavoriteBudget.Name] = favoriteBudget
			c.SnapshotEvery = time.Second
		},
	})
	lb := s.Deps().Stream(lbbind.Leaderboards, routes.LeaderboardProcessor)
	boards.Store(&lb)
	c := apitest.New(t, s)
	// Items with a TTL are dated in the coming year: DynamoDB Local
	// expires them against the wall clock.
	day1 := time.Date(time.Now().Year()+1, 3, 3, 9, 0, 0, 0, time.UTC)
	s.Clock().Set(day1)
	idle := func() {
		t.Helper()
		if err := s.WaitIdle(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	census(s)
	withKey := func(call apitest.Call, key string) apitest.Call {
		call.Header = map[string]string{"Idempotency-Key": key}
		return call
	}

	// The game server's catalogue, boards and players.
	for _, g := range []string{"g1", "g2"} {
		c.Service("PUT", "/v1/games/"+g, map[string]any{"title": "Game " + g}).Expect(t, 200)
	}
	for id, def := range map[string]map[string]any{
		"cup":    {"policy": "increment"},
		"sprint": {"policy": "best", "reset": "daily"},
		"ladder": {"policy": "latest", "reset": "weekly"},
		"league": {"policy": "best", "reset": "monthly", "regional": true},
		"arena":  {"policy": "best", "partitions": 2},
	} {
		def["title"] = id
		c.Service("PUT", "/v1/leaderboards/"+id, def).Expect(t, 201)
	}
	regions := map[string]string{ann: "eu", bob: "eu", cat: "us", dan: "us", eve: "eu", zed: "eu"}
	for p, region := range regions {
		c.Service("PUT", "/v1/players/"+p+"/profile", map[string]any{"display_name": "Player " + p, "region": region}).Expect(t, 200)
	}
	c.Service("PUT", "/v1/players/"+ann+"/friends", map[string]any{"friend_ids": []string{bob, zed}}).Expect(t, 200)
	c.Service("PUT", "/v1/players/"+bob+"/friends", map[string]any{"friend_ids": []string{ann}}).Expect(t, 200)
	// Rally first sees each player; two hours on, none is young.
	for p := range regions {
		c.Player(p, "GET", "/v1/users/"+p+"/streak", nil).Expect(t, 200)
	}
	s.Clock().Advance(2 * time.Hour)

	// Favorites and likes, one with an Idempotency-Key, one taken back.
	c.Do(withKey(apitest.Call{Method: "POST", Path: "/v1/favorites/g1", As: ann}, "fav-g1")).Expect(t, 200)
	c.Do(withKey(apitest.Call{Method: "POST", Path: "/v1/favorites/g1", As: ann}, "fav-g1")).Expect(t, 200)
	c.Player(ann, "POST", "/v1/favorites/g2", nil).Expect(t, 200)
	c.Player(ann, "DELETE", "/v1/favorites/g2", nil).Expect(t, 200)
	c.Player(bob, "POST", "/v1/favorites/g1", nil).Expect(t, 200)
	c.Player(cat, "POST", "/v1/favorites/g2", nil).Expect(t, 200)
	c.Player(zed, "POST", "/v1/favorites/g1", nil).Expect(t, 200)
	c.Player(ann, "PUT", "/v1/posts/p1/like", nil).Expect(t, 200)
	c.Do(withKey(apitest.Call{Method: "POST", Path: "/v1/posts/p1/like/toggle", As: zed}, "toggle-1")).Expect(t, 200)

	// Matches, from the game server: on every kind of board, one resent
	// with an Idempotency-Key.
	submit := func(board, player, match string, score int) {
		t.Helper()
		c.Do(withKey(apitest.Call{Method: "POST", Path: "/v1/leaderboards/" + board + "/scores", Service: true,
			Body: map[string]any{"player_id": player, "match_id": match, "score": score}}, board+"-"+player+"-"+match)).Expect(t, 200)
	}
	for i, p := range []string{ann, bob, cat, zed} {
		submit("cup", p, "m1", 10-i)
		submit("sprint", p, "m1", 100+i)
		submit("ladder", p, "m1", 50+i)
		submit("league", p, "m1", 20+i)
		submit("arena", p, "m1", 1000*(i+1))
	}
	submit("cup", ann, "m2", 5)
	submit("cup", ann, "m2", 5)
	submit("cup", dan, "m1", 99)

	// Activity: the player's own and a game server's report.
	act := func(player, key, typ string) {
		t.Helper()
		c.Do(withKey(apitest.Call{Method: "POST", Path: "/v1/activity", As: player,
			Body: map[string]any{"event_type": typ, "source": "mobile_app", "timezone": "UTC"}}, key)).Expect(t, 200)
	}
	report := func(player, key string) {
		t.Helper()
		c.Do(withKey(apitest.Call{Method: "POST", Path: "/v1/ops/activity", Service: true,
			Body: map[string]any{"user_id": player, "event_type": "MATCH_WON", "source": "console"}}, key)).Expect(t, 200)
	}
	for _, p := range []string{ann, bob, zed} {
		act(p, "open-1", "DAILY_OPEN")
		report(p, "won-1")
	}
	idle()

	// Operators ban a cheater and take a score off a board.
	c.Service("PUT", "/v1/ops/players/"+cat+"/ban", nil).Expect(t, 200)
	c.Service("DELETE", "/v1/leaderboards/ladder/players/"+bob, nil).Expect(t, 204)

	idle()
	census(s)

	// The next day: streaks grow, the daily board has a new period.
	s.Clock().Advance(24 * time.Hour)
	for _, p := range []string{ann, bob, zed} {
		act(p, "open-2", "DAILY_OPEN")
	}
	submit("sprint", ann, "m2", 300)
	submit("sprint", zed, "m2", 200)
	idle()
	// The schedule closes the daily board's first day: its archive is
	// what reads of that day are served from.
	yesterday := s.Clock().Now().AddDate(0, 0, -1).UTC().Format("2006-01-02")
	awaitJob(t, c, leaderboards.CloseJobID("sprint", yesterday), func() { s.Clock().Advance(leaderboards.CloseAfter) })
	c.Player(ann, "GET", "/v1/leaderboards/sprint/top?n=10&period="+yesterday, nil).Expect(t, 200)

	// Reads of every kind, through Redis and its caches.
	for _, path := range []string{
		"/v1/games/g1/favorites/count", "/v1/posts/p1/likes/count", "/v1/favorites/status?game_ids=g1,g2",
		"/v1/users/" + ann + "/favorites", "/v1/games/top?window=24h", "/v1/games/top?window=7d", "/v1/games/top?window=all",
		"/v1/leaderboards", "/v1/leaderboards/cup", "/v1/leaderboards/cup/top?n=10", "/v1/leaderboards/league/top?n=10&region=eu",
		"/v1/leaderboards/arena/top?n=10", "/v1/leaderboards/cup/players/" + ann + "/rank",
		"/v1/leaderboards/cup/players/" + ann + "/friends-rank?k=5", "/v1/streaks/top?n=10", "/v1/streaks/top?n=10&region=eu",
		"/v1/users/" + ann + "/streak", "/v1/users/" + ann + "/points/history?days=7",
	} {
		c.Player(ann, "GET", path, nil).Expect(t, 200)
	}

	// ann asks for everything Rally holds about her.
	var export struct {
		ID     string `json:"export_id"`
		Status string `json:"status"`
	}
	c.Player(ann, "POST", "/v1/users/"+ann+"/export", nil).Expect(t, 202).JSON(t, &export)
	await.Success(t, time.Minute, "ann's export ready", func() error {
		idle()
		c.Player(ann, "GET", "/v1/users/"+ann+"/exports/"+export.ID, nil).Expect(t, 200).JSON(t, &export)
		if export.Status != "READY" {
			return fmt.Errorf("still %s", export.Status)
		}
		return nil
	})

	// A studio's data comes in by import; the operator checks and
	// rebuilds everything derived.
	today := s.Clock().Now().Format("2006-01-02")
	file := filepath.Join(t.TempDir(), "studio.jsonl")
	lines := strings.Join([]string{
		`{"type":"score","leaderboard_id":"cup","player_id":"` + imp + `","score":4}`,
		`{"type":"favorite","user_id":"` + imp + `","game_id":"g2"}`,
		`{"type":"like","user_id":"` + imp + `","post_id":"p1"}`,
		`{"type":"streak","user_id":"` + imp + `","current_streak":4,"longest_streak":9,"last_activity_date":"` + today + `","timezone":"UTC","total_points":120}`,
	}, "\n") + "\n"
	if err := os.WriteFile(file, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	runJob(t, c, map[string]any{"kind": "import", "source": "file://" + file})
	for _, kind := range []string{"recompute", "reconcile", "rebuild"} {
		runJob(t, c, map[string]any{"kind": kind, "target": "all"})
	}
	idle()

	// zed erases themselves.
	var erasure struct {
		ID     string `json:"erasure_id"`
		Status string `json:"status"`
	}
	c.Player(zed, "DELETE", "/v1/users/"+zed, nil).Expect(t, 202).JSON(t, &erasure)
	await.Success(t, time.Minute, "zed's erasure completed", func() error {
		idle()
		c.Service("GET", "/v1/ops/users/"+zed+"/erasure", nil).Expect(t, 200).JSON(t, &erasure)
		if erasure.Status != "COMPLETED" {
			return fmt.Errorf("still %s", erasure.Status)
		}
		return nil
	})
	idle()

	census(s)

	// What players and operators see of it all.
	var count struct {
		Count int64 `json:"count"`
	}
	c.Player(bob, "GET", "/v1/games/g1/favorites/count", nil).Expect(t, 200).JSON(t, &count)
	if count.Count != 2 {
		t.Errorf("g1 has %d favorites, want ann's and bob's", count.Count)
	}
	var top struct {
		Entries []struct {
			PlayerID string `json:"player_id"`
			Score    int64  `json:"score"`
		} `json:"entries"`
	}
	c.Player(bob, "GET", "/v1/leaderboards/cup/top?n=10", nil).Expect(t, 200).JSON(t, &top)
	// dan's score reached the board through the handler's write-through;
	// only its processing is parked.
	if got := fmt.Sprint(top.Entries); got != "[{dan 99} {ann 15} {bob 9} {imp 4}]" {
		t.Errorf("cup ranks %s, want dan, ann (10 and 5, the resent match once), bob and imp: cat is banned, zed erased", got)
	}
	c.Player(bob, "GET", "/v1/leaderboards/league/top?n=10&region=eu", nil).Expect(t, 200).JSON(t, &top)
	if got := fmt.Sprint(top.Entries); got != "[{bob 21} {ann 20}]" {
		t.Errorf("league's eu view ranks %s, want bob and ann", got)
	}
	var streak struct {
		Current int64 `json:"current_streak"`
	}
	for p, want := range map[string]int64{ann: 2, imp: 4} {
		c.Player(p, "GET", "/v1/users/"+p+"/streak", nil).Expect(t, 200).JSON(t, &streak)
		if streak.Current != want {
			t.Errorf("%s's streak is %d, want %d", p, streak.Current, want)
		}
	}
	var parked struct {
		Batches []struct {
			Processor string `json:"processor"`
		} `json:"batches"`
	}
	c.Service("GET", "/v1/ops/dlq", nil).Expect(t, 200).JSON(t, &parked)
	if len(parked.Batches) != 1 || parked.Batches[0].Processor != routes.LeaderboardProcessor.Function {
		t.Errorf("parked %+v, want the batch of dan's score", parked)
	}
	// The favorites' trending list is stored for reads without Redis.
	await.Until(t, time.Minute, "the trending snapshot stored", func() bool {
		out, err := s.DB().GetItem(context.Background(), &dynamodb.GetItemInput{
			TableName: aws.String(s.Tables().Of(schema.Counters)),
			Key: map[string]types.AttributeValue{
				schema.AttrPK: &types.AttributeValueMemberS{Value: schema.CountersSnapshotPrefix + string(reactions.Favorite)},
				schema.AttrSK: &types.AttributeValueMemberS{Value: string(reactions.Last24h)},
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		return len(out.Item) > 0
	})

	// Last, eve spends her favorite budget and is refused one more; a
	// trending window is summed.
	for i := range favoriteBudget {
		method := map[bool]string{true: "POST", false: "DELETE"}[i%2 == 0]
		c.Player(eve, method, "/v1/favorites/g"+strconv.Itoa(1+i/2%2), nil).Expect(t, 200)
	}
	r := c.Player(eve, "POST", "/v1/favorites/g1", nil).Expect(t, 429)
	if r.Header.Get("Retry-After") == "" {
		t.Errorf("a refused favorite says not when to retry: %v", r.Header)
	}
	idle()
	c.Player(eve, "GET", "/v1/games/top?window=24h", nil).Expect(t, 200)
	census(s)
}

// runJob starts an operations job and awaits its success.
func runJob(t *testing.T, c *apitest.Client, spec map[string]any) {
	t.Helper()
	var j struct {
		ID    string `json:"job_id"`
		State string `json:"state"`
		Error string `json:"error"`
	}
	c.Service("POST", "/v1/ops/jobs", spec).Expect(t, 202).JSON(t, &j)
	await.Until(t, 2*time.Minute, fmt.Sprintf("job %v to finish", spec), func() bool {
		c.Service("GET", "/v1/ops/jobs/"+j.ID, nil).Expect(t, 200).JSON(t, &j)
		return j.State != "RUNNING"
	})
	if j.State != "DONE" {
		t.Fatalf("job %v ended %s: %s", spec, j.State, j.Error)
	}
}

// awaitJob awaits a job the schedule starts, nudging the clock (poke)
// until it appears, and its success.
func awaitJob(t *testing.T, c *apitest.Client, id string, poke func()) {
	t.Helper()
	var j struct {
		State string `json:"state"`
		Error string `json:"error"`
	}
	await.Until(t, 2*time.Minute, "job "+id+" to finish", func() bool {
		r := c.Service("GET", "/v1/ops/jobs/"+id, nil)
		if r.Status == 404 {
			poke()
			return false
		}
		r.Expect(t, 200).JSON(t, &j)
		return j.State != "RUNNING"
	})
	if j.State != "DONE" {
		t.Fatalf("job %s ended %s: %s", id, j.State, j.Error)
	}
}

// maxShown bounds the examples of one finding.
const maxShown = 5

// findings collects what the census found: for each kind of finding, its
// examples, each once.
type findings map[string]map[string]bool

func (fs findings) add(kind, example string) {
	if fs[kind] == nil {
		fs[kind] = map[string]bool{}
	}
	fs[kind][example] = true
}

func (fs findings) report(t *testing.T) {
	t.Helper()
	kinds := slices.Sorted(maps.Keys(fs))
	for _, k := range kinds {
		ex := slices.Sorted(maps.Keys(fs[k]))
		more := ""
		if len(ex) > maxShown {
			more = fmt.Sprintf("\n\t… and %d more", len(ex)-maxShown)
			ex = ex[:maxShown]
		}
		t.Errorf("%s (%d):\n\t%s%s", k, len(fs[k]), strings.Join(ex, "\n\t"), more)
	}
}

// ttlSlack is how far an expiry may be off the times it is counted from:
// epoch seconds, and a time taken a moment before or after the write.
const ttlSlack = time.Minute

// census reads every item and key back, classifies it and checks its
// expiry, each time the tour calls it.
type census struct {
	// since is the stack's time at the previous census: whatever was
	// written since was written between it and now.
	since time.Time
	// expires is each TTL item's expiry at the previous census, by table
	// and key: an item whose expiry changed was written since.
	expires map[string]string
	seen    map[string]bool
	found   findings
}

func (c *census) take(t *testing.T, s *stack.Stack) {
	t.Helper()
	now := s.Clock().Now()
	if c.since.IsZero() {
		c.since = now
	}
	// Redis first: a rate-limit budget's key lives seconds after the last
	// request, and a summed trending window ten.
	c.redis(t, s)
	c.dynamoDB(t, s, now)
	c.since = now
}

// one returns the single family of fs, or records why there is none.
func (c *census) one(fs []retention.Family, what, example string) (retention.Family, bool) {
	switch len(fs) {
	case 1:
		c.seen[familyID(fs[0])] = true
		return fs[0], true
	case 0:
		c.found.add(what+" belongs to no declared family (shared/retention)", example)
	default:
		names := make([]string, len(fs))
		for i, f := range fs {
			names[i] = f.Name
		}
		c.found.add(what+" belongs to several families: "+strings.Join(names, ", "), example)
	}
	return retention.Family{}, false
}

// dynamoDB classifies every item of every table and checks the TTL of
// those written since the last census: counted from a time between then
// (a day earlier for a dated family: its hour's or its day's start) and
// now. The tour's activity is dated in UTC, so nothing is counted from
// later than the clock.
func (c *census) dynamoDB(t *testing.T, s *stack.Stack, now time.Time) {
	t.Helper()
	for _, tb := range schema.Tables() {
		for _, it := range testenv.TableItems(t, s.DB(), s.Tables().Of(tb)) {
			attrs := map[string]string{}
			for k, v := range it {
				switch v := v.(type) {
				case *types.AttributeValueMemberS:
					attrs[k] = v.Value
				case *types.AttributeValueMemberN:
					attrs[k] = v.Value
				}
			}
			example := tb.Name + " " + itemKey(tb, attrs)
			f, ok := c.one(retention.ItemFamilies(tb.Name, attrs), "a "+tb.Name+" item", example)
			if !ok {
				continue
			}
			raw, expires := attrs[schema.TTL]
			switch {
			case f.TTL == 0 && expires:
				c.found.add(fmt.Sprintf("%q is declared without a TTL, yet an item has %s", f.Name, schema.TTL), example)
			case f.TTL > 0 && !expires:
				c.found.add(fmt.Sprintf("%q is declared to expire after %s, yet an item has no %s", f.Name, retention.Duration(f.TTL), schema.TTL), example)
			case f.TTL > 0 && c.expires[example] != raw:
				c.expires[example] = raw
				sec, err := strconv.ParseInt(raw, 10, 64)
				at := time.Unix(sec, 0).UTC()
				earliest := c.since
				if f.Dated {
					earliest = earliest.Add(-24 * time.Hour)
				}
				latest, soonest := now.Add(f.TTL+ttlSlack), earliest.Add(f.TTL-ttlSlack)
				switch {
				case err != nil:
					c.found.add(fmt.Sprintf("%q has a %s that is not epoch seconds", f.Name, schema.TTL), example+" "+raw)
				case at.After(latest):
					c.found.add(fmt.Sprintf("%q outlives its declared %s", f.Name, retention.Duration(f.TTL)),
						fmt.Sprintf("%s expires at %s, after %s", example, at.Format(time.RFC3339), latest.Format(time.RFC3339)))
				case at.Before(soonest):
					c.found.add(fmt.Sprintf("%q expires sooner than its declared %s", f.Name, retention.Duration(f.TTL)),
						fmt.Sprintf("%s expires at %s, before %s", example, at.Format(time.RFC3339), soonest.Format(time.RFC3339)))
				}
			}
		}
	}
}

// itemKey is an item's key attributes, and the attributes families are
// told apart by.
func itemKey(tb schema.Table, attrs map[string]string) string {
	parts := []string{attrs[tb.PartitionKey.Name]}
	if tb.SortKey != nil {
		parts = append(parts, attrs[tb.SortKey.Name])
	}
	for _, a := range []string{schema.AttrState, schema.AttrRunning} {
		if v, ok := attrs[a]; ok {
			parts = append(parts, a+"="+v)
		}
	}
	return strings.Join(parts, " · ")
}

// redis classifies every key in Redis and checks its expiry: no later
// than its TTL from now, as Redis counts from the write.
func (c *census) redis(t *testing.T, s *stack.Stack) {
	t.Helper()
	ctx := context.Background()
	rdb := s.Deps().Redis
	// A dated family's expiry is counted from a time by the stack's clock
	// (an hour's start), and runs on Redis's wall clock: the stack's lead
	// over the wall clock is added.
	lead := max(s.Clock().Now().Sub(time.Now()), 0)
	iter := rdb.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		ttl, err := rdb.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl == -2 {
			continue // expired since the scan
		}
		f, ok := c.one(retention.KeyFamilies(k), "a Redis key", k)
		if !ok {
			continue
		}
		switch {
		case f.TTL == 0 && f.Linger == 0 && ttl > 0:
			c.found.add(fmt.Sprintf("%q is declared without expiry, yet a key expires", f.Name), k)
		case f.TTL == 0 && ttl > f.Linger:
			c.found.add(fmt.Sprintf("%q declares that its keys linger %s at most", f.Name, retention.Duration(f.Linger)), fmt.Sprintf("%s expires in %s", k, ttl.Round(time.Second)))
		case f.TTL > 0 && ttl < 0:
			c.found.add(fmt.Sprintf("%q is declared to expire after %s, yet a key has no expiry", f.Name, retention.Duration(f.TTL)), k)
		case f.TTL > 0 && f.Dated && ttl > f.TTL+lead+ttlSlack, f.TTL > 0 && !f.Dated && ttl > f.TTL:
			c.found.add(fmt.Sprintf("%q outlives its declared %s", f.Name, retention.Duration(f.TTL)), fmt.Sprintf("%s expires in %s", k, ttl.Round(time.Second)))
		}
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
}
