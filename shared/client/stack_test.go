package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/rallyhq/rally/infra/local/apitest"
	"github.com/rallyhq/rally/infra/local/stack"
	"github.com/rallyhq/rally/infra/local/stacktest"
	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/infra/local/testenv/await"
	"github.com/rallyhq/rally/shared/client"
	reactionsbind "github.com/rallyhq/rally/shared/reactions/bind"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/streams"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// sent is one request as it left the client.
type sent struct {
	route string // METHOD path
	key   string // its Idempotency-Key
}

// losing is a transport that loses the answers it is told to: the request
// reaches Rally and is served, and the client sees a broken connection, as
// when a network fails on the way back.
type losing struct {
	next http.RoundTripper

	mu   sync.Mutex
	log  []sent
	lose map[string]int // METHOD path → answers still to lose
}

func (l *losing) RoundTrip(r *http.Request) (*http.Response, error) {
	route := r.Method + " " + r.URL.Path
	l.mu.Lock()
	l.log = append(l.log, sent{route: route, key: r.Header.Get("Idempotency-Key")})
	lost := l.lose[route] > 0
	if lost {
		l.lose[route]--
	}
	l.mu.Unlock()
	resp, err := l.next.RoundTrip(r)
	if err != nil || !lost {
		return resp, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return nil, fmt.Errorf("connection reset after %s was served", route)
}

// loseNext loses the next answer to route.
func (l *losing) loseNext(route string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lose == nil {
		l.lose = map[string]int{}
	}
	l.lose[route]++
}

// since returns the requests sent from mark on, and the new mark.
func (l *losing) since(mark int) ([]sent, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]sent(nil), l.log[mark:]...), len(l.log)
}

func (l *losing) mark() int {
	_, m := l.since(0)
	return m
}

// Each service route, called through the client against the real
// handlers, gateway and authorizer of the local stack: what it stores is
// what players then read, a retry after a lost answer acts once, and bad
// input and a wrong signature come back as *Error without a retry.
func TestTheClientDrivesEveryServiceRoute(t *testing.T) {
	var poisoned atomic.Bool
	poisoned.Store(true)
	var mu sync.Mutex
	var counter streams.Handler // the real counter processor, once the stack is up
	s := stacktest.Start(t, stack.Options{
		AccessKeyID: stack.DefaultAccessKey, SecretAccessKey: stack.DefaultSecretKey,
		Processors: map[string]streams.Handler{
			// The counter processor, broken for one game until "fixed", so
			// there is a batch to park and redrive.
			routes.CounterProcessor.Function: func(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
				for _, r := range ev.Records {
					if poisoned.Load() && strings.Contains(r.Change.Keys["edge"].String(), "cursed") {
						return events.DynamoDBEventResponse{}, errors.New("a bug in the counter processor")
					}
				}
				mu.Lock()
				h := counter
				mu.Unlock()
				return h(ctx, ev)
			},
		},
	})
	mu.Lock()
	counter = s.Deps().Stream(reactionsbind.Reactions, routes.CounterProcessor)
	mu.Unlock()
	players := apitest.New(t, s)
	ctx := context.Background()
	tr := &losing{next: http.DefaultTransport}
	var z sleeps
	// c calls as the game server (rallyserver), ops as the operator
	// (rallylocal): each route is called in the role a deployment's
	// callers have.
	as := func(key, secret string) *client.Client {
		c, err := client.New(ctx, client.Options{
			Endpoint: s.URL(), Region: stack.Region,
			Credentials: credentials.NewStaticCredentialsProvider(key, secret, ""),
			HTTPClient:  &http.Client{Transport: tr, Timeout: 30 * time.Second},
			Sleep:       z.sleep,
		})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := as(stack.DefaultServerAccessKey, stack.DefaultServerSecretKey)
	ops := as(stack.DefaultAccessKey, stack.DefaultSecretKey)
	const board, game = "wins:ranked", "g:1"

	t.Run("leaderboard", func(t *testing.T) {
		def := client.LeaderboardDefinition{Title: "Ranked wins", Policy: client.PolicyIncrement, Scope: &client.Scope{Game: game}}
		lb, err := c.PutLeaderboard(ctx, board, def)
		if err != nil {
			t.Fatal(err)
		}
		if !lb.Created || lb.LeaderboardID != board || lb.Policy != client.PolicyIncrement || lb.Order != client.OrderDesc ||
			lb.Reset != client.ResetNone || lb.TieBreak != client.TieBreakEarliest || lb.Status != client.BoardActive ||
			lb.MaxN != 100 || lb.Timezone != "UTC" || lb.Scope.Game != game || lb.CurrentPeriod == "" {
			t.Fatalf("created %+v", lb)
		}
		def.Title = "Ranked wins, season 1"
		if lb, err = c.PutLeaderboard(ctx, board, def); err != nil || lb.Created || lb.Title != def.Title {
			t.Fatalf("updated %+v %v", lb, err)
		}
		def.Policy = client.PolicyBest
		_, err = c.PutLeaderboard(ctx, board, def)
		var e *client.Error
		if !errors.As(err, &e) || e.Status != http.StatusConflict {
			t.Fatalf("changing the policy: %v, want a 409", err)
		}
	})

	t.Run("game", func(t *testing.T) {
		g, err := c.PutGame(ctx, game, client.GameUpdate{Title: "Rally Racers", ThumbnailURL: "https://cdn.example.com/g1.png"})
		if err != nil || g.GameID != game || g.Title != "Rally Racers" || g.ThumbnailURL == nil || *g.ThumbnailURL != "https://cdn.example.com/g1.png" {
			t.Fatalf("%+v %v", g, err)
		}
	})

	t.Run("profiles and friends", func(t *testing.T) {
		for id, name := range map[string]string{"ann": "Ann", "bob": "Bob"} {
			p, err := c.PutProfile(ctx, id, client.ProfileUpdate{DisplayName: name, Region: "eu"})
			if err != nil || p.PlayerID != id || p.DisplayName != name || p.Region == nil || *p.Region != "eu" {
				t.Fatalf("%+v %v", p, err)
			}
		}
		f, err := c.PutFriends(ctx, "ann", []string{"bob", "bob", "ann"})
		if err != nil || !slices.Equal(f.FriendIDs, []string{"bob"}) {
			t.Fatalf("friends %+v %v, want bob once and not ann", f, err)
		}
		if f, err = c.PutFriends(ctx, "cyd", nil); err != nil || len(f.FriendIDs) != 0 {
			t.Fatalf("no friends: %+v %v", f, err)
		}
	})

	scores := "POST /v1/leaderboards/" + board + "/scores"
	t.Run("scores", func(t *testing.T) {
		// The first answer is lost after Rally applied the score; the
		// retry finds the match submitted and the score counted once.
		tr.loseNext(scores)
		mark := tr.mark()
		res, err := c.SubmitScore(ctx, board, client.ScoreSubmission{PlayerID: "ann", MatchID: "m1", Score: 5})
		if err != nil {
			t.Fatal(err)
		}
		if reqs, _ := tr.since(mark); len(reqs) != 2 {
			t.Fatalf("%d requests, want the lost one and its retry", len(reqs))
		}
		if res.Applied || res.Score != 5 {
			t.Fatalf("the retry answered %+v, want the match already applied, score 5", res)
		}
		res, err = c.SubmitScore(ctx, board, client.ScoreSubmission{PlayerID: "ann", MatchID: "m2", Score: 3})
		if err != nil || !res.Applied || res.Score != 8 || res.PreviousScore == nil || *res.PreviousScore != 5 {
			t.Fatalf("the next match: %+v %v", res, err)
		}
		if _, err := c.SubmitScore(ctx, board, client.ScoreSubmission{PlayerID: "bob", MatchID: "m1", Score: 4, OccurredAt: time.Now().Add(-time.Minute)}); err != nil {
			t.Fatal(err)
		}
		await.Success(t, 10*time.Second, "the board shows each match once", func() error {
			var top struct {
				Entries []struct {
					Rank        int     `json:"rank"`
					PlayerID    string  `json:"player_id"`
					Score       int64   `json:"score"`
					DisplayName *string `json:"display_name"`
				} `json:"entries"`
			}
			players.Player("reader", "GET", "/v1/leaderboards/"+board+"/top", nil).Expect(t, 200).JSON(t, &top)
			got := fmt.Sprintf("%+v", top.Entries)
			if len(top.Entries) != 2 || top.Entries[0].PlayerID != "ann" || top.Entries[0].Score != 8 || top.Entries[1].PlayerID != "bob" ||
				top.Entries[1].Score != 4 || top.Entries[0].DisplayName == nil || *top.Entries[0].DisplayName != "Ann" {
				return fmt.Errorf("top %s, want ann 8 (Ann), bob 4", got)
			}
			return nil
		})
		var friends struct {
			FriendsRank  int   `json:"friends_rank"`
			FriendsTotal int64 `json:"friends_total"`
		}
		players.Player("ann", "GET", "/v1/leaderboards/"+board+"/players/ann/friends-rank", nil).Expect(t, 200).JSON(t, &friends)
		if friends.FriendsRank != 1 || friends.FriendsTotal != 2 {
			t.Fatalf("ann among her friends: %+v, want first of 2 (bob is her friend)", friends)
		}
	})

	t.Run("cheaters", func(t *testing.T) {
		// A third player cheats, is banned, unbanned and taken off.
		if _, err := c.SubmitScore(ctx, board, client.ScoreSubmission{PlayerID: "cyd", MatchID: "m1", Score: 70}); err != nil {
			t.Fatal(err)
		}
		ban, err := ops.BanPlayer(ctx, "cyd")
		if err != nil || !ban.Banned || ban.BannedAt == nil || ban.PlayerID != "cyd" {
			t.Fatalf("ban %+v %v", ban, err)
		}
		_, err = c.SubmitScore(ctx, board, client.ScoreSubmission{PlayerID: "cyd", MatchID: "m9", Score: 40})
		var e *client.Error
		if !errors.As(err, &e) || e.Status != http.StatusForbidden {
			t.Fatalf("a banned player's score: %v, want a 403", err)
		}
		if ban, err = ops.UnbanPlayer(ctx, "cyd"); err != nil || ban.Banned || ban.BannedAt != nil {
			t.Fatalf("unban %+v %v", ban, err)
		}
		if err := ops.RemovePlayerScore(ctx, board, "cyd", ""); err != nil {
			t.Fatal(err)
		}
		players.Player("reader", "GET", "/v1/leaderboards/"+board+"/players/cyd/rank", nil).Expect(t, 404)
		err = ops.RemovePlayerScore(ctx, board, "cyd", "2026-W47")
		if !errors.As(err, &e) || e.Status != http.StatusBadRequest {
			t.Fatalf("a period the board does not have: %v, want a 400", err)
		}
	})

	t.Run("bad input", func(t *testing.T) {
		mark := tr.mark()
		_, err := c.SubmitScore(ctx, board, client.ScoreSubmission{PlayerID: "ann", Score: 1})
		var e *client.Error
		if !errors.As(err, &e) || e.Status != http.StatusBadRequest {
			t.Fatalf("no match id: %v, want a 400", err)
		}
		if _, ok := e.Field("match_id"); !ok {
			t.Fatalf("field errors %+v name no match_id", e.Errors)
		}
		if reqs, _ := tr.since(mark); len(reqs) != 1 {
			t.Fatalf("%d requests for a 400, want 1", len(reqs))
		}
	})

	t.Run("activity", func(t *testing.T) {
		totalPoints := func() int64 {
			var streak struct {
				TotalPoints int64 `json:"total_points"`
			}
			players.Player("ann", "GET", "/v1/users/ann/streak", nil).Expect(t, 200).JSON(t, &streak)
			return streak.TotalPoints
		}
		report := client.ActivityReport{UserID: "ann", EventType: client.MatchWon, Source: client.SourceConsole, Timezone: "Europe/Berlin"}
		tr.loseNext("POST /v1/ops/activity")
		mark := tr.mark()
		first, err := c.ReportActivity(ctx, report)
		if err != nil {
			t.Fatal(err)
		}
		reqs, _ := tr.since(mark)
		if len(reqs) != 2 || reqs[0].key == "" || reqs[1].key != reqs[0].key {
			t.Fatalf("requests %+v, want two with one Idempotency-Key", reqs)
		}
		if !first.Replayed || first.PointsAwarded <= 0 || first.TotalPoints != first.PointsAwarded || first.CurrentStreak != 1 {
			t.Fatalf("the retry answered %+v, want the first answer replayed", first)
		}
		if got := totalPoints(); got != first.TotalPoints {
			t.Fatalf("ann has %d points, want %d: the match counted once", got, first.TotalPoints)
		}

		// A key of the caller's: the same call again is the first's answer.
		report.EventType = client.MatchPlayed
		once, err := c.ReportActivity(ctx, report, client.WithIdempotencyKey("match-9"))
		if err != nil || once.Replayed {
			t.Fatalf("%+v %v", once, err)
		}
		again, err := c.ReportActivity(ctx, report, client.WithIdempotencyKey("match-9"))
		if err != nil || !again.Replayed || again.EventID != once.EventID || again.TotalPoints != once.TotalPoints {
			t.Fatalf("again %+v %v, want %+v replayed", again, err, once)
		}
		if got, want := totalPoints(), first.TotalPoints+once.PointsAwarded; got != want {
			t.Fatalf("ann has %d points, want %d", got, want)
		}
	})

	t.Run("jobs", func(t *testing.T) {
		started, err := ops.StartJob(ctx, client.JobRequest{Kind: client.JobRebuild, Target: client.TargetLeaderboard, LeaderboardID: board})
		if err != nil || started.JobID == "" || started.State != client.JobRunning {
			t.Fatalf("%+v %v", started, err)
		}
		var job *client.Job
		await.Success(t, 30*time.Second, "the rebuild done", func() error {
			var err error
			if job, err = ops.GetJob(ctx, started.JobID); err != nil {
				return err
			}
			if job.State != client.JobDone {
				return fmt.Errorf("job %+v", job)
			}
			return nil
		})
		if job.Kind != client.JobRebuild || job.Target != client.TargetLeaderboard || job.LeaderboardID != board || job.FinishedAt == nil || job.Checked < 2 {
			t.Fatalf("job %+v, want the rebuild of %s's two players", job, board)
		}
		_, err = ops.StartJob(ctx, client.JobRequest{Kind: client.JobRebuild, Target: client.TargetLeaderboard, LeaderboardID: "no-such-board"})
		var e *client.Error
		if !errors.As(err, &e) || e.Status != http.StatusNotFound {
			t.Fatalf("an unknown board: %v, want a 404", err)
		}
		if _, err = ops.GetJob(ctx, "no-such-job"); !errors.As(err, &e) || e.Status != http.StatusNotFound {
			t.Fatalf("an unknown job: %v, want a 404", err)
		}
	})

	t.Run("health", func(t *testing.T) {
		h, err := ops.Health(ctx)
		if err != nil {
			t.Fatal(err)
		}
		names := make([]string, len(h.Processors))
		for i, p := range h.Processors {
			names[i] = p.Name
		}
		if !h.Redis.Reachable || !h.DynamoDB.Reachable || !slices.Contains(names, routes.LeaderboardProcessor.Function) {
			t.Fatalf("health %+v", h)
		}
	})

	t.Run("dead letters", func(t *testing.T) {
		players.Player("dee", "POST", "/v1/favorites/cursed", nil).Expect(t, 200)
		if err := s.WaitIdle(ctx); err != nil {
			t.Fatal(err)
		}
		parked, err := ops.ListDeadLetters(ctx, routes.CounterProcessor.Function)
		if err != nil || len(parked) != 1 || parked[0].Records != 1 || parked[0].Source != "Reactions" || parked[0].Reason != client.RetryAttemptsExhausted {
			t.Fatalf("parked %+v %v, want the poison record", parked, err)
		}
		if all, err := ops.ListDeadLetters(ctx, ""); err != nil || len(all) != 1 || all[0].BatchID != parked[0].BatchID {
			t.Fatalf("every processor's: %+v %v", all, err)
		}
		poisoned.Store(false)
		results, err := ops.RedriveDeadLetters(ctx, client.RedriveRequest{Processor: routes.CounterProcessor.Function, BatchID: parked[0].BatchID})
		if err != nil || len(results) != 1 || results[0].Applied != 1 || results[0].Error != "" {
			t.Fatalf("redrive %+v %v", results, err)
		}
		await.Success(t, 10*time.Second, "the redriven favorite counted", func() error {
			var body struct {
				Count int64 `json:"count"`
			}
			players.Player("reader", "GET", "/v1/games/cursed/favorites/count", nil).Expect(t, 200).JSON(t, &body)
			if body.Count != 1 {
				return fmt.Errorf("count %d", body.Count)
			}
			return nil
		})
		if left, err := ops.ListDeadLetters(ctx, ""); err != nil || len(left) != 0 {
			t.Fatalf("after the redrive: %+v %v", left, err)
		}
		_, err = ops.ListDeadLetters(ctx, "no-such-processor")
		var e *client.Error
		if !errors.As(err, &e) || e.Status != http.StatusBadRequest {
			t.Fatalf("an unknown processor: %v, want a 400", err)
		}
	})

	t.Run("erasure", func(t *testing.T) {
		er, err := ops.EraseUser(ctx, "bob")
		if err != nil || er.ErasureID == "" || er.Status != client.ErasurePending || er.CompletedAt != nil {
			t.Fatalf("%+v %v", er, err)
		}
		await.Success(t, 60*time.Second, "bob erased", func() error {
			got, err := ops.GetErasure(ctx, "bob")
			if err != nil {
				return err
			}
			if got.ErasureID != er.ErasureID || got.Status != client.ErasureCompleted || got.CompletedAt == nil {
				return fmt.Errorf("erasure %+v", got)
			}
			return nil
		})
		var rank struct{}
		players.Player("reader", "GET", "/v1/leaderboards/"+board+"/players/bob/rank", nil).Expect(t, http.StatusNotFound).JSON(t, &rank)
		_, err = ops.GetErasure(ctx, "never-erased")
		var e *client.Error
		if !errors.As(err, &e) || e.Status != http.StatusNotFound {
			t.Fatalf("no erasure: %v, want a 404", err)
		}
	})

	// The game server's signature on an operator's route is refused at
	// once, and the refusal acts on nothing.
	t.Run("the game server on operator routes", func(t *testing.T) {
		mark := tr.mark()
		var e *client.Error
		if _, err := c.BanPlayer(ctx, "ann"); !errors.As(err, &e) || e.Status != http.StatusForbidden {
			t.Fatalf("a ban by the game server: %v, want a 403", err)
		}
		if err := c.RemovePlayerScore(ctx, board, "ann", ""); !errors.As(err, &e) || e.Status != http.StatusForbidden {
			t.Fatalf("a score removal by the game server: %v, want a 403", err)
		}
		if _, err := c.EraseUser(ctx, "ann"); !errors.As(err, &e) || e.Status != http.StatusForbidden {
			t.Fatalf("an erasure by the game server: %v, want a 403", err)
		}
		if _, err := c.StartJob(ctx, client.JobRequest{Kind: client.JobReconcile, Target: client.TargetAll}); !errors.As(err, &e) || e.Status != http.StatusForbidden {
			t.Fatalf("a job started by the game server: %v, want a 403", err)
		}
		if reqs, _ := tr.since(mark); len(reqs) != 4 {
			t.Fatalf("%d requests for four 403s, want 4: a refusal is not retried", len(reqs))
		}
		players.Player("ann", "GET", "/v1/leaderboards/"+board+"/players/ann/rank", nil).Expect(t, http.StatusOK)
		if _, err := ops.GetErasure(ctx, "ann"); !errors.As(err, &e) || e.Status != http.StatusNotFound {
			t.Fatalf("ann's erasure after the game server's attempt: %v, want none (404)", err)
		}
	})

	t.Run("wrong signature", func(t *testing.T) {
		wrong, err := client.New(ctx, client.Options{
			Endpoint: s.URL(), Region: stack.Region, HTTPClient: &http.Client{Transport: tr},
			Credentials: credentials.NewStaticCredentialsProvider(stack.DefaultAccessKey, "not-the-secret", ""),
		})
		if err != nil {
			t.Fatal(err)
		}
		mark := tr.mark()
		_, err = wrong.Health(ctx)
		var e *client.Error
		if !errors.As(err, &e) || e.Status != http.StatusForbidden {
			t.Fatalf("a wrong secret: %v, want a 403", err)
		}
		if reqs, _ := tr.since(mark); len(reqs) != 1 {
			t.Fatalf("%d requests for a 403, want 1", len(reqs))
		}
	})
}
