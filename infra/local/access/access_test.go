package access_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/infra/local/access"
	"github.com/rallyhq/rally/infra/local/apitest"
	"github.com/rallyhq/rally/infra/local/stack"
	"github.com/rallyhq/rally/infra/local/stacktest"
	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/infra/local/testenv/await"
	"github.com/rallyhq/rally/shared/config"
	"github.com/rallyhq/rally/shared/leaderboards"
	leaderboardsbind "github.com/rallyhq/rally/shared/leaderboards/bind"
	"github.com/rallyhq/rally/shared/reactions"
	reactionsbind "github.com/rallyhq/rally/shared/reactions/bind"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
	"github.com/rallyhq/rally/shared/streams"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// grantedForRarePaths are grants the scenario below never needs, each
// with the reason it stays: a path only a rare failure reaches, or a
// grant another change is about to reshape. Keys are what access.Unused
// reports.
var grantedForRarePaths = map[string]string{
	"dlq-archiver reads the Scores stream":      parkedOnly,
	"dlq-archiver reads the ScoreEvents stream": parkedOnly,
	"dlq-archiver reads the Streaks stream":     parkedOnly,
	"dlq-archiver reads the Activity stream":    parkedOnly,
	"dlq-archiver reads the Erasures stream":    parkedOnly,
	"dlq-archiver reads the Jobs stream":        parkedOnly,
	"dlq-archiver reads the Exports stream":     parkedOnly,

	"favorite-game DeleteItem on Idempotency": releasedOnFailure,
	"redrive-dead-letters PutItem on DeadLetters": "a redrive that fails again keeps the rest of its batch archived " +
		"(deadletters.Archive.Retry)",
	"erase-user GetItem on Erasures": "a request while the user's erasure is pending is answered with it " +
		"(the privacy tests make one)",
	"analytics-shipper UpdateItem on Players": "it moves a secret a deployment kept in Players before " +
		"AnalyticsSecrets; the scenario's deployment is new",
	"erasure-processor PutItem on DeadLetters": "an erasure puts back a parked batch that also holds other " +
		"users' records (the scenario's parked batches each hold one user's; the fault matrices in shared/faults scrub users from batches they share)",
	"job-runner UpdateItem on Leaderboards": "its schedule keys boards defined before the listing index in it " +
		"(leaderboards/dynamo Definitions.Relist); the scenario's deployment is new, with the schedule off",
	"put-friends ConditionCheckItem on Players": "a list written before the reverse entries, longer than one " +
		"transaction, gets its entries in steps (players/dynamo indexFriends); the scenario's deployment is new",
	"put-friends DeleteItem on Players": "a PUT that drops a friend deletes its reverse entry; the scenario only adds",
	"erasure-processor ConditionCheckItem on Players": "a reverse entry whose list no longer names the user is " +
		"deleted on condition that it still does not (players/dynamo moveFriends)",
	"job-runner PutItem on Players":            olderLists,
	"job-runner UpdateItem on Players":         olderLists,
	"job-runner ConditionCheckItem on Players": olderLists,
	"job-runner Query on Jobs/index/by_kind":   scheduleOff,
	"job-runner GetItem on Jobs":               scheduleOff,
}

// usedWhenRacing are grants the scenario needs only when two of its own
// calls race: used or not, the test passes.
var usedWhenRacing = map[string]string{
	"erasure-processor PutItem on Counters": "an erasure finds a count intent the counter processor has not " +
		"finished yet, and finishes it, writing its markers (reactions Counts.FinishPending)",
	"erasure-processor UpdateItem on Counters": "finishing such an intent, it marks the counts it moved dirty " +
		"in Redis's generation (reactions Eraser.markMoved)",
	"analytics-shipper GetItem on AnalyticsSecrets": "two shipper invocations store one new user's secret at " +
		"once, and the later one reads the first one's back (analytics.Pseudonyms)",
	"analytics-shipper GetItem on Players": "a user whose own item fails the transaction storing a batch's new " +
		"secrets (erased, or stored first by another invocation) is settled alone, reading any legacy copy again " +
		"(analytics.Pseudonyms); the batch reads them 100 a call",
}

// scheduleOff: the job runner's schedule looks up the last reconcile (by
// kind, then the job); the scenario runs every job by hand, with the
// schedule off.
// olderLists: the friends recompute writes only for friend lists written
// before the reverse entries existed.
const olderLists = "the friends recompute indexes lists older than the reverse entries; the scenario's deployment is new"

const scheduleOff = "the schedule looks up the last reconcile; the scenario runs every job by hand, with the schedule off"

// releasedOnFailure: a write with an Idempotency-Key releases its claim
// when the write fails, so that a retry runs again.
const releasedOnFailure = "releases its Idempotency-Key claim when the write fails (idempotency.Store.Release)"

// parkedOnly: the archiver reads a stream only when a batch from it is
// parked. The scenario parks a Reactions batch; the same code reads any
// stream by the ARN in the parked record, and every stream a processor
// reads may have a batch parked.
const parkedOnly = "read only when a batch from this stream is parked (the scenario parks one from Reactions)"

// Every function is granted exactly what it uses: the scenario drives
// every route and processor through the local stack — favorites, likes,
// scores, friends, profiles, activity; every read with Redis up and with
// Redis down (the fallback reads), writes and processors while it is down
// and the repair after; a parked batch archived and redriven; every job;
// erasures by a player and by a service; the analytics export — and the
// recorder sees what each function's calls touched. A use its
// declarations do not grant would be refused in AWS; a grant it never
// used is wider than it needs, unless listed above with its reason.
func TestEveryFunctionIsGrantedExactlyWhatItUses(t *testing.T) {
	redis := testenv.Redis(t)
	var poisoned atomic.Bool
	var counter atomic.Pointer[streams.Handler]
	s := stacktest.Start(t, stack.Options{
		RedisURL: redis.URL(),
		// Each function bound on its own, as each Lambda runs in its own
		// process: no function's calls are spared by another's cache.
		Isolate: true,
		// First-seen times are looked up and recorded (the young-account
		// controls), as in AWS; an account is young only for its first
		// request, so the scenario's reactions trend (top games read
		// game metadata only for games that trend).
		Configure: func(c *config.Config) { c.YoungAccountAge = time.Nanosecond },
		Processors: map[string]streams.Handler{
			// The counter processor fails on one game's records until
			// "fixed", so a batch is parked, archived and redriven.
			routes.CounterProcessor.Function: func(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
				for _, r := range ev.Records {
					if poisoned.Load() && strings.Contains(r.Change.Keys["edge"].String(), "cursed") {
						return events.DynamoDBEventResponse{}, errors.New("a bug in the counter processor")
					}
				}
				return (*counter.Load())(ctx, ev)
			},
		},
	})
	real := s.Deps().Stream(reactionsbind.Reactions, routes.CounterProcessor)
	counter.Store(&real)
	c := apitest.New(t, s)
	ctx := context.Background()
	idle := func() {
		t.Helper()
		if err := s.WaitIdle(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Items with a TTL are dated in the coming year: DynamoDB Local
	// expires them against the wall clock.
	s.Clock().Set(time.Date(time.Now().Year()+1, 5, 4, 9, 0, 0, 0, time.UTC))

	// What game servers and operators set up.
	for _, g := range []string{"space-race", "tile-town", "cursed"} {
		c.Service("PUT", "/v1/games/"+g, map[string]any{"title": g, "thumbnail_url": "https://cdn.example.com/" + g + ".png"}).Expect(t, 200)
	}
	c.Service("PUT", "/v1/leaderboards/arena", map[string]any{
		"title": "Arena", "policy": "best", "order": "desc", "reset": "none", "tie_break": "earliest",
		"scope": map[string]any{"game": "space-race"}, "max_n": 100, "timezone": "UTC", "regional": true,
	}).Expect(t, 201)
	c.Service("PUT", "/v1/leaderboards/daily", map[string]any{
		"title": "Daily", "policy": "increment", "order": "desc", "reset": "daily", "tie_break": "shared", "max_n": 100, "timezone": "Europe/Berlin",
	}).Expect(t, 201)
	players := []string{"ann", "bob", "cyd", "dee"}
	for i, p := range players {
		c.Service("PUT", "/v1/players/"+p+"/profile", map[string]any{"display_name": strings.ToUpper(p), "region": []string{"eu", "us"}[i%2]}).Expect(t, 200)
		c.Service("PUT", "/v1/players/"+p+"/friends", map[string]any{"friend_ids": without(players, p)}).Expect(t, 200)
	}

	// What players do.
	for i, p := range players {
		c.Player(p, "POST", "/v1/favorites/space-race", nil).Expect(t, 200)
		c.Do(apitest.Call{Method: "POST", Path: "/v1/favorites/tile-town", As: p, Header: map[string]string{"Idempotency-Key": "fav-" + p}}).Expect(t, 200)
		c.Do(apitest.Call{Method: "POST", Path: "/v1/favorites/tile-town", As: p, Header: map[string]string{"Idempotency-Key": "fav-" + p}}).Expect(t, 200)
		c.Player(p, "PUT", "/v1/posts/p1/like", nil).Expect(t, 200)
		c.Do(apitest.Call{Method: "POST", Path: "/v1/posts/p2/like/toggle", As: p, Header: map[string]string{"Idempotency-Key": "toggle-" + p}}).Expect(t, 200)
		c.Service("POST", "/v1/leaderboards/arena/scores", map[string]any{"player_id": p, "match_id": "m-" + p, "score": 100 * (i + 1)}).Expect(t, 200)
		c.Service("POST", "/v1/leaderboards/daily/scores", map[string]any{"player_id": p, "match_id": "d-" + p, "score": 3}).Expect(t, 200)
		c.Do(apitest.Call{Method: "POST", Path: "/v1/activity", As: p, Header: map[string]string{"Idempotency-Key": "open-" + p},
			Body: map[string]any{"event_type": "DAILY_OPEN", "source": "mobile_app", "timezone": "Europe/Berlin"}}).Expect(t, 200)
	}
	c.Do(apitest.Call{Method: "POST", Path: "/v1/ops/activity", Service: true, Header: map[string]string{"Idempotency-Key": "won-ann"},
		Body: map[string]any{"user_id": "ann", "event_type": "MATCH_WON", "source": "console"}}).Expect(t, 200)
	c.Player("dee", "DELETE", "/v1/favorites/space-race", nil).Expect(t, 200)
	c.Player("dee", "DELETE", "/v1/posts/p1/like", nil).Expect(t, 200)
	// cyd tops the day (her erasure, after the day's close, strikes the
	// entry that opens its archive's first page).
	c.Service("POST", "/v1/leaderboards/daily/scores", map[string]any{"player_id": "cyd", "match_id": "d-cyd-2", "score": 2}).Expect(t, 200)
	// A lower score leaves ann's best as it is (checked, not written); bob
	// moves to eu, and his next better score moves him between the
	// region's views.
	c.Service("POST", "/v1/leaderboards/arena/scores", map[string]any{"player_id": "ann", "match_id": "m-ann-low", "score": 1}).Expect(t, 200)
	c.Service("PUT", "/v1/players/bob/profile", map[string]any{"display_name": "BOB", "region": "eu"}).Expect(t, 200)
	c.Service("POST", "/v1/leaderboards/arena/scores", map[string]any{"player_id": "bob", "match_id": "m-bob-2", "score": 10_000}).Expect(t, 200)
	idle()
	reads := func(degraded bool) {
		t.Helper()
		for _, path := range []string{
			"/v1/users/ann/favorites?limit=1", "/v1/favorites/status?game_ids=space-race,tile-town",
			"/v1/games/space-race/favorites/count", "/v1/games/top?window=24h", "/v1/games/top?window=all",
			"/v1/posts/p1/likes/count", "/v1/leaderboards/arena", "/v1/leaderboards/arena/top?n=3",
			"/v1/leaderboards/arena/players/ann/rank?k=2", "/v1/leaderboards/arena/players/ann/friends-rank?k=2",
			"/v1/leaderboards/arena/top?region=eu", "/v1/leaderboards/arena/players/ann/rank?region=eu",
			"/v1/leaderboards?game=space-race", "/v1/leaderboards?status=ACTIVE",
			"/v1/leaderboards/daily/top", "/v1/users/ann/streak", "/v1/users/ann/points/history?days=7",
			"/v1/streaks/top?n=10", "/v1/streaks/top?region=eu",
		} {
			body := c.Player("ann", "GET", path, nil).Expect(t, 200).Map(t)
			if d, _ := body["degraded"].(bool); d != degraded && body["as_of"] != nil {
				t.Errorf("GET %s: degraded=%v, want %v", path, d, degraded)
			}
		}
		// A player with no score: unranked, not a board Redis lost.
		c.Player("ann", "GET", "/v1/leaderboards/arena/players/zed/rank", nil).Expect(t, 404)
		var page struct {
			Next *string `json:"next_cursor"`
		}
		c.Player("ann", "GET", "/v1/users/ann/favorites?limit=1", nil).Expect(t, 200).JSON(t, &page)
		if page.Next == nil {
			t.Fatal("no second page of ann's favorites")
		}
		c.Player("ann", "GET", "/v1/users/ann/favorites?limit=1&cursor="+*page.Next, nil).Expect(t, 200)
	}
	reads(false)

	// Redis down: writes still succeed, processors carry on without it,
	// reads fall back to DynamoDB; back up, the ticks repair it.
	redis.Stop()
	c.Player("cyd", "POST", "/v1/favorites/space-race", nil).Expect(t, 200)
	c.Player("cyd", "DELETE", "/v1/favorites/tile-town", nil).Expect(t, 200)
	c.Service("POST", "/v1/leaderboards/arena/scores", map[string]any{"player_id": "cyd", "match_id": "m-cyd-2", "score": 999}).Expect(t, 200)
	c.Do(apitest.Call{Method: "POST", Path: "/v1/activity", As: "cyd", Header: map[string]string{"Idempotency-Key": "share-cyd"},
		Body: map[string]any{"event_type": "SOCIAL_SHARE", "source": "web"}}).Expect(t, 200)
	c.Do(apitest.Call{Method: "POST", Path: "/v1/ops/activity", Service: true, Header: map[string]string{"Idempotency-Key": "played-cyd"},
		Body: map[string]any{"user_id": "cyd", "event_type": "MATCH_PLAYED", "source": "console"}}).Expect(t, 200)
	idle()
	reads(true)
	c.Service("GET", "/v1/ops/health", nil).Expect(t, 200)
	if err := redis.Start(ctx); err != nil {
		t.Fatal(err)
	}
	await.Until(t, time.Minute, "reads served from Redis again", func() bool {
		for _, path := range []string{"/v1/games/top?window=24h", "/v1/leaderboards/arena/top", "/v1/streaks/top"} {
			if d, _ := c.Player("ann", "GET", path, nil).Expect(t, 200).Map(t)["degraded"].(bool); d {
				return false
			}
		}
		return true
	})

	// A poison record is parked, archived with its records, listed and
	// redriven once fixed.
	poisoned.Store(true)
	c.Player("ann", "POST", "/v1/favorites/cursed", nil).Expect(t, 200)
	idle()
	var parked struct {
		Batches []struct {
			ID string `json:"batch_id"`
		} `json:"batches"`
	}
	await.Until(t, time.Minute, "the poison batch parked", func() bool {
		c.Service("GET", "/v1/ops/dlq", nil).Expect(t, 200).JSON(t, &parked)
		return len(parked.Batches) == 1
	})
	poisoned.Store(false)
	c.Service("POST", "/v1/ops/dlq/redrive", map[string]any{"processor": routes.CounterProcessor.Function}).Expect(t, 200)
	idle()

	// A day passes without ann: her streak breaks and leaves the boards.
	day1 := s.Clock().Now().Format(time.DateOnly) // 11:00 in Berlin
	s.Clock().Advance(48 * time.Hour)
	// The schedule closes the daily board's first day; reads of it come
	// from its archive.
	await.Until(t, time.Minute, "the close of the first day", func() bool {
		var j struct {
			State string `json:"state"`
		}
		r := c.Service("GET", "/v1/ops/jobs/"+leaderboards.CloseJobID("daily", day1), nil)
		if r.Status == 200 {
			r.JSON(t, &j)
		}
		return j.State == "DONE"
	})
	for _, path := range []string{"top?n=3", "players/ann/rank?k=1", "players/ann/friends-rank?k=1"} {
		c.Player("ann", "GET", "/v1/leaderboards/daily/"+path+"&period="+day1, nil).Expect(t, 200)
	}
	c.Do(apitest.Call{Method: "POST", Path: "/v1/activity", As: "bob", Header: map[string]string{"Idempotency-Key": "open-bob-2"},
		Body: map[string]any{"event_type": "LEVEL_COMPLETED", "source": "console"}}).Expect(t, 200)
	await.Until(t, time.Minute, "ann's broken streak off the board", func() bool {
		return !strings.Contains(string(c.Player("bob", "GET", "/v1/streaks/top", nil).Expect(t, 200).Body), `"ann"`)
	})
	reads(false)

	// Every job kind on every target, each with drift to repair: a
	// durable count off its edges (reconcile), a board's member count and
	// a streak's board index entry lost (recompute).
	d := s.Deps()
	drift := map[string]func(){
		"reconcile": func() {
			game := reactions.Target{Kind: reactions.Favorite, ID: "space-race"}
			counts := reactionsbind.Counts(d)
			tally, err := counts.TargetTally(ctx, game, s.Clock().Now())
			if err != nil {
				t.Fatal(err)
			}
			if ok, err := counts.SetTotals(ctx, game, reactions.Totals{Count: 42, Trending: tally.Trending}, tally.Version, s.Clock().Now()); err != nil || !ok {
				t.Fatalf("corrupt the count: %v %v", ok, err)
			}
		},
		"recompute": func() {
			// A favorite counted active whose edge is gone: its marker goes.
			ghost := reactions.Edge{Ref: reactions.Ref{UserID: "bob", Kind: reactions.Favorite, TargetID: "ghost-town"},
				State: reactions.Active, Version: 1, CreatedAt: s.Clock().Now()}
			if err := reactionsbind.Counts(d).MarkCounted(ctx, []reactions.Edge{ghost}, s.Clock().Now()); err != nil {
				t.Fatal(err)
			}
			if err := leaderboardsbind.Scores(d).SetMembers(ctx, "arena", leaderboards.AllTime, 0); err != nil {
				t.Fatal(err)
			}
			// The boards' score histograms lost too.
			counters := s.Tables().Of(schema.Counters)
			for _, it := range testenv.TableItems(t, s.DB(), counters) {
				if pk, ok := it[schema.AttrPK].(*types.AttributeValueMemberS); ok && strings.HasPrefix(pk.Value, schema.CountersHistogramPrefix) {
					if _, err := s.DB().DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(counters),
						Key: map[string]types.AttributeValue{schema.AttrPK: it[schema.AttrPK], schema.AttrSK: it[schema.AttrSK]}}); err != nil {
						t.Fatal(err)
					}
				}
			}
			if _, err := s.DB().UpdateItem(ctx, &dynamodb.UpdateItemInput{
				TableName:        aws.String(s.Tables().Of(schema.Streaks)),
				Key:              map[string]types.AttributeValue{schema.AttrUserID: &types.AttributeValueMemberS{Value: "bob"}},
				UpdateExpression: aws.String("REMOVE " + schema.AttrLiveSK),
			}); err != nil {
				t.Fatal(err)
			}
		},
	}
	// A studio moving in imports a score, a favorite, a like and a streak.
	imported := filepath.Join(t.TempDir(), "import.jsonl")
	if err := os.WriteFile(imported, []byte(strings.Join([]string{
		`{"type":"score","leaderboard_id":"daily","player_id":"newcomer","score":321}`,
		`{"type":"favorite","user_id":"newcomer","game_id":"g1"}`,
		`{"type":"like","user_id":"newcomer","post_id":"p1"}`,
		`{"type":"streak","user_id":"newcomer","current_streak":3,"longest_streak":5,"last_activity_date":"` + s.Clock().Now().UTC().Format(time.DateOnly) + `","timezone":"UTC","total_points":30}`,
	}, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, job := range []map[string]any{
		{"kind": "rebuild", "target": "all"}, {"kind": "reconcile", "target": "all"}, {"kind": "recompute", "target": "all"},
		{"kind": "rebuild", "target": "leaderboard", "id": "arena"},
		{"kind": "import", "source": "file://" + imported},
	} {
		if corrupt, ok := drift[job["kind"].(string)]; ok {
			corrupt()
		}
		var started struct {
			ID string `json:"job_id"`
		}
		c.Service("POST", "/v1/ops/jobs", job).Expect(t, 202).JSON(t, &started)
		var j struct {
			State    string   `json:"state"`
			Repaired int64    `json:"repaired"`
			Rejected int64    `json:"rejected"`
			Examples []string `json:"examples"`
		}
		await.Until(t, 2*time.Minute, "job to finish", func() bool {
			c.Service("GET", "/v1/ops/jobs/"+started.ID, nil).Expect(t, 200).JSON(t, &j)
			if j.State == "FAILED" {
				t.Fatalf("job %v failed", job)
			}
			return j.State == "DONE"
		})
		if j.Rejected > 0 {
			t.Errorf("job %v rejected %d lines: %v", job, j.Rejected, j.Examples)
		}
		if _, drifted := drift[job["kind"].(string)]; drifted && j.Repaired == 0 {
			t.Errorf("job %v repaired nothing", job)
		}
	}
	c.Service("GET", "/v1/ops/health", nil).Expect(t, 200)

	// A cheater's score removed, everywhere on a board and in one period.
	c.Service("DELETE", "/v1/leaderboards/arena/players/bob", nil).Expect(t, 204)
	c.Service("DELETE", "/v1/leaderboards/arena/players/ann?period=all", nil).Expect(t, 204)
	c.Service("PUT", "/v1/ops/players/cyd/ban", nil).Expect(t, 200)
	c.Service("POST", "/v1/leaderboards/daily/scores", map[string]any{"player_id": "cyd", "match_id": "d-cyd-banned", "score": 3}).Expect(t, 403)
	c.Service("DELETE", "/v1/ops/players/cyd/ban", nil).Expect(t, 200)

	// Exports: a player's own, and one an operator asks for; dee's is
	// erased with her below.
	export := func(user string, self bool) {
		t.Helper()
		var e struct {
			ID     string `json:"export_id"`
			Status string `json:"status"`
		}
		if self {
			c.Player(user, "POST", "/v1/users/"+user+"/export", nil).Expect(t, 202).JSON(t, &e)
		} else {
			c.Service("POST", "/v1/ops/users/"+user+"/export", nil).Expect(t, 202).JSON(t, &e)
		}
		await.Until(t, 2*time.Minute, user+"'s export ready", func() bool {
			if self {
				c.Player(user, "GET", "/v1/users/"+user+"/exports/"+e.ID, nil).Expect(t, 200).JSON(t, &e)
			} else {
				c.Service("GET", "/v1/ops/users/"+user+"/exports/"+e.ID, nil).Expect(t, 200).JSON(t, &e)
			}
			return e.Status == "READY"
		})
	}
	export("ann", true)
	export("bob", false)
	export("dee", true)

	// Erasures: a player's own, and one a service asks for. dee's
	// favorite of the cursed game is parked before her erasure, and the
	// erasure's deletion of it after: the erasure scrubs her from the
	// first batch and, once the processor is fixed, has the deletion in
	// the second applied.
	poisoned.Store(true)
	c.Player("dee", "POST", "/v1/favorites/cursed", nil).Expect(t, 200)
	var first string
	await.Until(t, time.Minute, "dee's favorite parked", func() bool {
		c.Service("GET", "/v1/ops/dlq", nil).Expect(t, 200).JSON(t, &parked)
		if len(parked.Batches) == 1 {
			first = parked.Batches[0].ID
		}
		return first != ""
	})
	c.Player("dee", "DELETE", "/v1/users/dee", nil).Expect(t, 202)
	c.Service("DELETE", "/v1/ops/users/cyd", nil).Expect(t, 202)
	await.Until(t, 2*time.Minute, "the erasure's deletion parked", func() bool {
		c.Service("GET", "/v1/ops/dlq", nil).Expect(t, 200).JSON(t, &parked)
		for _, b := range parked.Batches {
			if b.ID != first {
				return true
			}
		}
		return false
	})
	poisoned.Store(false)
	await.Until(t, 3*time.Minute, "both erasures completed", func() bool {
		var mine, theirs struct {
			Status string `json:"status"`
		}
		c.Player("dee", "GET", "/v1/users/dee/erasure", nil).Expect(t, 200).JSON(t, &mine)
		c.Service("GET", "/v1/ops/users/cyd/erasure", nil).Expect(t, 200).JSON(t, &theirs)
		return mine.Status == "COMPLETED" && theirs.Status == "COMPLETED"
	})
	idle()
	// Nothing of theirs is left parked, and the cursed game counts ann's
	// favorite alone.
	if c.Service("GET", "/v1/ops/dlq", nil).Expect(t, 200).JSON(t, &parked); len(parked.Batches) != 0 {
		t.Errorf("parked after the erasures: %v", parked.Batches)
	}
	var cursed struct {
		Count int `json:"count"`
	}
	if c.Player("ann", "GET", "/v1/games/cursed/favorites/count", nil).Expect(t, 200).JSON(t, &cursed); cursed.Count != 1 {
		t.Errorf("the cursed game counts %d favorites, want 1 (ann's)", cursed.Count)
	}

	// The analytics export has every kind of event.
	exported := map[string]bool{}
	_ = filepath.WalkDir(filepath.Join(s.Info().StateDir, "analytics"), func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && strings.HasPrefix(d.Name(), "event_type=") {
			exported[strings.TrimPrefix(d.Name(), "event_type=")] = true
		}
		return nil
	})
	for _, kind := range []string{"favorite.added", "favorite.removed", "like.added", "like.removed", "score.submitted", "activity.recorded"} {
		if !exported[kind] {
			t.Errorf("no %s events exported (have %v)", kind, exported)
		}
	}

	uses := s.Access().Uses()
	for _, u := range uses {
		t.Log(u)
	}
	grants := access.Grants()
	for _, d := range access.Denied(grants, uses) {
		t.Errorf("used, not granted: %s", d)
	}
	unused := access.Unused(grants, uses, routes.Functions())
	// Every player route's edge reads and records first-seen times in
	// Accounts (routes.EdgeCalls), but Redis caches them: only the
	// function that first sees a player reaches the table. The scenario
	// must reach it at all.
	edge := map[string]bool{}
	for _, c := range routes.EdgeCalls {
		for _, a := range c.Actions.IAM() {
			edge[routes.ActionOf(a).String()+" on "+c.Resource()] = true
		}
	}
	accounts := 0
	for _, u := range uses {
		if u.Table == schema.Accounts.Name {
			accounts++
		}
	}
	if accounts == 0 {
		t.Error("no function read or recorded a first-seen time in Accounts")
	}
	for _, u := range unused {
		if _, call, _ := strings.Cut(u, " "); edge[call] {
			continue
		}
		_, rare := grantedForRarePaths[u]
		if _, racing := usedWhenRacing[u]; !rare && !racing {
			t.Errorf("granted, never used: %s", u)
		}
	}
	for key := range grantedForRarePaths {
		if !slices.Contains(unused, key) {
			t.Errorf("listed as granted for a rare path, but the scenario used it: %s (remove it from the list)", key)
		}
	}
}

func without(list []string, drop string) []string {
	var out []string
	for _, x := range list {
		if x != drop {
			out = append(out, x)
		}
	}
	return out
}
