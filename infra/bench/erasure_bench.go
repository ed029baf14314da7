package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"golang.org/x/sync/errgroup"

	"github.com/rallyhq/rally/infra/local/dynamodblocal"
	"github.com/rallyhq/rally/infra/local/stack"
	"github.com/rallyhq/rally/infra/local/tables"
	"github.com/rallyhq/rally/shared/config"
	"github.com/rallyhq/rally/shared/leaderboards"
	leaderboardsdynamo "github.com/rallyhq/rally/shared/leaderboards/dynamo"
	"github.com/rallyhq/rally/shared/players"
	playersdynamo "github.com/rallyhq/rally/shared/players/dynamo"
	"github.com/rallyhq/rally/shared/reactions"
	reactionsdynamo "github.com/rallyhq/rally/shared/reactions/dynamo"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
	"github.com/rallyhq/rally/shared/streaks"
	streaksdynamo "github.com/rallyhq/rally/shared/streaks/dynamo"
)

// The erasure section erases players with the same footprint among few
// and among many other players, and compares the capacity the erasure
// processor consumed: an erasure reaches other players' data through
// reverse indexes, never a scan, so it costs the same whatever the
// tables hold (DESIGN.md, "Bounded as it ages").
const (
	erasureFew  = 10_000
	erasureMany = 200_000
	// erasureErased are the players erased in each run; the figure is the
	// median erasure.
	erasureErased = 3
	// erasureListers list each erased player as a friend.
	erasureListers = 5
	// erasureGames and erasurePosts are the targets the other players
	// favorite and like, the erased ones among them.
	erasureGames = 500
	erasurePosts = 5_000
	// erasureBoard is the board every player has a score on; the erased
	// players also play erasureBoards − 1 boards of their own.
	erasureBoard  = "erasure-b0"
	erasureBoards = 3
	// erasureGoal is how much more an erasure among many players may
	// cost than among few: equal within noise.
	erasureGoal = 1.05
)

// erasureFootprint is what each erased player holds, made through the API.
var erasureFootprint = struct{ favorites, likes, activities, friends int }{favorites: 6, likes: 4, activities: 3, friends: 3}

// erasureRun is what one run measured: the erasures' capacity among
// others other players.
type erasureRun struct {
	others   int
	erasures []routesUsage
	// resumes are how many times each erasure was taken up again after
	// its first run (see erasureCompleted).
	resumes []int
	// counters is the Counters table's physical name: the erasure's
	// wait for the counter processor (see erasureCost).
	counters string
	seeded   int // items written for the other players
	seedTook time.Duration
}

// erasureCost is one erasure's capacity in two parts: on the Counters
// table, where the erasure holds its deleted edges' markers and polls
// them until the counter processor has counted every deletion (what it
// reads and deletes there depends on how far the counter processor got
// meanwhile, not on the tables' size), and on every other table.
type erasureCost struct {
	rest, counters routesCapacity
}

func (r erasureRun) cost(u routesUsage) erasureCost {
	c := erasureCost{counters: u.Tables[r.counters]}
	for t, tc := range u.Tables {
		if t != r.counters {
			c.rest = c.rest.plus(tc)
		}
	}
	return c
}

// median is the median of f over the run's erasures.
func (r erasureRun) median(f func(erasureCost) float64) float64 {
	var v []float64
	for _, u := range r.erasures {
		v = append(v, f(r.cost(u)))
	}
	return routesMedian(v)
}

// spread is the lowest and highest of f over the run's erasures.
func (r erasureRun) spread(f func(erasureCost) float64) string {
	var v []float64
	for _, u := range r.erasures {
		v = append(v, f(r.cost(u)))
	}
	return trimFloat(slices.Min(v)) + "–" + trimFloat(slices.Max(v))
}

// calls is the calls per erasure of the run's erasures, each.
func (r erasureRun) calls() string {
	var parts []string
	for _, u := range r.erasures {
		parts = append(parts, u.String())
	}
	return strings.Join(parts, " / ")
}

func benchErasure(ctx context.Context, env *Env) (Section, error) {
	sec := Section{
		Title: "Erasure capacity and table size",
		Intro: fmt.Sprintf("The capacity one erasure consumes among %s and among %s other players: the erasure processor's DynamoDB consumed capacity (ReturnConsumedCapacity through the capacity section's meter), from `DELETE /v1/users/{user_id}` to COMPLETED. ", erasureCount(erasureFew), erasureCount(erasureMany)) +
			fmt.Sprintf("Each run has a DynamoDB Local of its own, seeded before the stack starts with BatchWriteItem of the items the stores write (their import paths: `players/dynamo`, `reactions/dynamo`, `leaderboards/dynamo`, `streaks/dynamo` Import), its tables' streams enabled once seeded so the processors start from an empty stream: each other player has a profile and a list of 3 friends with their reverse entries, a favorite (and a like, for one in ten), a score on `%s` with its match, and a streak; they have no Activity items or idempotency records (the erasure reaches those by the user's own key: Activity's partition, Idempotency's by-owner index), and no period is closed and archived. ", erasureBoard) +
			fmt.Sprintf("Then, through the API, %d players each favorite %d games and like %d posts (targets the others reacted to), score on %d boards (`%s` among everyone), record %d activities (with Idempotency-Keys), list %d friends and are listed by %d others, and are erased one after the other; each figure is the median of the erasures, the note gives their spread. ",
				erasureErased, erasureFootprint.favorites, erasureFootprint.likes, erasureBoards, erasureBoard, erasureFootprint.activities, erasureFootprint.friends, erasureListers) +
			fmt.Sprintf("The processors' scheduled ticks are set to once an hour, so each erasure is the run its stream record starts (it waits in that run, up to 10 s, for the counter and leaderboard processors to count its deletions); one still pending %s later is taken up again by an empty batch invoked on the erasure processor, as a tick would, and its capacity counted with it (the note gives these runs). ", erasureResumeAfter) +
			"The capacity is split by table as the outputs name it: on Counters the erasure holds its deleted edges' markers and polls them until the counter processor has counted every deletion, as many polls as the processor's lag needs (timing, not table size), so the goal is set on every other table and Counters is given apart, with the whole. " +
			"Floor: the same erasure among the fewer players; the goal is the same figure among twenty times as many, within noise.",
	}
	few, err := erasureMeasure(ctx, env, erasureFew, erasureErased, "few")
	if err != nil {
		return sec, err
	}
	many, err := erasureMeasure(ctx, env, erasureMany, erasureErased, "many")
	if err != nil {
		return sec, err
	}
	sec.Rows = erasureRows(few, many)
	return sec, nil
}

// erasureRows compare the median erasure among many players with the one
// among few: every table but Counters against the goal, Counters (the
// wait for the counter processor) and the whole beside them.
func erasureRows(few, many erasureRun) []Row {
	restR := func(c erasureCost) float64 { return c.rest.RCU }
	restW := func(c erasureCost) float64 { return c.rest.WCU }
	ctrR := func(c erasureCost) float64 { return c.counters.RCU }
	ctrW := func(c erasureCost) float64 { return c.counters.WCU }
	allR := func(c erasureCost) float64 { return c.rest.RCU + c.counters.RCU }
	allW := func(c erasureCost) float64 { return c.rest.WCU + c.counters.WCU }
	name := func(r erasureRun, what string) string {
		return fmt.Sprintf("one erasure among %s players, %s", erasureCount(r.others), what)
	}
	spread := func(r erasureRun, f func(erasureCost) float64) string {
		return fmt.Sprintf("%d erasures: %s", len(r.erasures), r.spread(f))
	}
	self := "itself: the reference the larger tables are compared with"
	than := "the same among " + erasureCount(few.others)
	goal := fmt.Sprintf("≤ %.2f× (equal within noise)", erasureGoal)
	row := func(r erasureRun, what, unit string, f func(erasureCost) float64, floor float64, floorName, goal string, note string) Row {
		v := r.median(f)
		row := Row{Name: name(r, what), Value: v, Floor: floor, Unit: unit, FloorName: floorName, Goal: goal, Note: spread(r, f) + note}
		if goal != "" {
			row.Met = Within(v, erasureGoal*floor)
		}
		return row
	}
	calls := func(r erasureRun) string {
		return fmt.Sprintf("; calls of each erasure: %s; runs after the first: %v; seeded %s items for the others in %s", r.calls(), r.resumes, erasureCount(r.seeded), r.seedTook.Round(time.Second))
	}
	rest := "; the items the erased player owns (edges, scores and matches, streak and activity, idempotency records, profile, account, secret) and the lists that name them, found through indexes"
	wait := "; the deleted edges' markers, held, then polled (BatchGetItem of the count intents, Query of the markers) until the counter processor has counted every deletion: the polls are as many as its lag needs"
	fr, fw := few.median(restR), few.median(restW)
	return []Row{
		row(few, "read, every table but Counters", "RCU", restR, fr, self, "", calls(few)),
		row(few, "write, every table but Counters", "WCU", restW, fw, self, "", rest),
		row(many, "read, every table but Counters", "RCU", restR, fr, than, goal, calls(many)),
		row(many, "write, every table but Counters", "WCU", restW, fw, than, goal, rest),
		row(few, "read on Counters (the wait for the counter processor)", "RCU", ctrR, 0, "", "", wait),
		row(many, "read on Counters (the wait for the counter processor)", "RCU", ctrR, few.median(ctrR), than, "", wait),
		row(few, "write on Counters (markers)", "WCU", ctrW, 0, "", "", ""),
		row(many, "write on Counters (markers)", "WCU", ctrW, few.median(ctrW), than, "", ""),
		row(many, "read, every table", "RCU", allR, few.median(allR), than, "", "; the whole erasure-processor's reads"),
		row(many, "write, every table", "WCU", allW, few.median(allW), than, "", "; the whole erasure-processor's writes"),
	}
}

func erasureCount(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// erasureMeasure seeds others players on a DynamoDB Local of its own,
// starts the stack over it, gives erased players their footprint through
// the API and erases them, metering each erasure.
func erasureMeasure(ctx context.Context, env *Env, others, erased int, label string) (erasureRun, error) {
	names := schema.NamesFromEnv(fmt.Sprintf("bench-erase-%s-", label))
	run := erasureRun{others: others, counters: names.Of(schema.Counters)}
	ddbl, err := dynamodblocal.Start(ctx, dynamodblocal.Options{JVM: dynamodblocal.Steady})
	if err != nil {
		return run, fmt.Errorf("DynamoDB Local: %w", err)
	}
	defer ddbl.Close()
	db := dynamodb.New(dynamodb.Options{
		Region: stack.Region, BaseEndpoint: aws.String(ddbl.Endpoint()),
		Credentials: credentials.NewStaticCredentialsProvider("local", "local", ""),
	})
	if err := erasureTables(ctx, db, names, false); err != nil {
		return run, err
	}
	start := time.Now()
	at := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	if run.seeded, err = erasureSeed(ctx, db, names, others, at); err != nil {
		return run, fmt.Errorf("seed %d players: %w", others, err)
	}
	run.seedTook = time.Since(start)
	fmt.Fprintf(os.Stderr, "bench: erasure: seeded %d players (%d items) in %s\n", others, run.seeded, run.seedTook.Round(time.Second))
	if err := erasureTables(ctx, db, names, true); err != nil {
		return run, err
	}

	st, err := routesStart(ctx, env, "bench-erase", 14, func(c *config.Config) {
		c.CacheCheckEvery, c.SnapshotEvery = time.Hour, time.Hour
	}, func(o *stack.Options) {
		o.DynamoDBEndpoint, o.Tables = ddbl.Endpoint(), names
		// An erasure is the run its stream record starts: no tick takes
		// it up, nor adds its own reads to the processor's.
		o.TickEvery = time.Hour
	})
	if err != nil {
		return run, err
	}
	defer st.Close()
	st.priceTransactions()
	if err := st.erasureFootprint(ctx, others, erased); err != nil {
		return run, fmt.Errorf("footprint: %w", err)
	}
	fn := routes.ErasureProcessor.Function
	for k := range erased {
		user := erasureUser(k)
		before := st.meter.Of(fn)
		if _, err := st.do(ctx, routesCall{Route: routes.EraseUser, Sub: user, Path: "/v1/users/" + user}); err != nil {
			return run, err
		}
		resumes, err := st.erasureCompleted(ctx, user)
		if err != nil {
			return run, err
		}
		used := st.meter.Of(fn).Minus(before)
		fmt.Fprintf(os.Stderr, "bench: erasure: among %d players: %.1f RCU, %.1f WCU (%s), %d resumes\n", others, used.RCU, used.WCU, used, resumes)
		run.erasures = append(run.erasures, used)
		run.resumes = append(run.resumes, resumes)
	}
	return run, nil
}

// erasureTables creates every table without its stream (streams false),
// or enables the streams of the tables that have one (streams true): a
// stream enabled after the seed starts empty, so the processors see only
// what happens once the stack runs.
func erasureTables(ctx context.Context, db *dynamodb.Client, names schema.Names, streams bool) error {
	g, gctx := errgroup.WithContext(ctx)
	for _, t := range schema.Tables() {
		if streams && !t.Stream {
			continue
		}
		g.Go(func() error {
			name := names.Of(t)
			if streams {
				_, err := db.UpdateTable(gctx, &dynamodb.UpdateTableInput{TableName: aws.String(name), StreamSpecification: &types.StreamSpecification{
					StreamEnabled: aws.Bool(true), StreamViewType: types.StreamViewTypeNewAndOldImages,
				}})
				if err != nil {
					return fmt.Errorf("enable the stream of %s: %w", name, err)
				}
				return nil
			}
			in := tables.Input(t, name)
			in.StreamSpecification = nil
			if _, err := db.CreateTable(gctx, in); err != nil {
				return fmt.Errorf("create %s: %w", name, err)
			}
			return nil
		})
	}
	return g.Wait()
}

func erasurePlayer(i int) string { return fmt.Sprintf("erasure-p%06d", i) }
func erasureUser(k int) string   { return fmt.Sprintf("erasure-u%d", k) }
func erasureGame(i int) string   { return fmt.Sprintf("erasure-g%03d", i%erasureGames) }
func erasurePost(i int) string   { return fmt.Sprintf("erasure-t%04d", i%erasurePosts) }

// erasureFriends is other player i's friend list as seeded: three others.
func erasureFriends(i, n int) []string {
	return []string{erasurePlayer((i + 1) % n), erasurePlayer((i + 7) % n), erasurePlayer((i + 31) % n)}
}

// erasureSeed writes n other players through the stores' import paths,
// in chunks written concurrently, and returns the items written.
func erasureSeed(ctx context.Context, db *dynamodb.Client, names schema.Names, n int, at time.Time) (int, error) {
	ps := &playersdynamo.Players{DB: db, Table: names.Of(schema.Players)}
	edges := &reactionsdynamo.Edges{DB: db, Table: names.Of(schema.Reactions)}
	scores := &leaderboardsdynamo.Scores{DB: db, Table: names.Of(schema.Scores), Events: names.Of(schema.ScoreEvents), Counters: names.Of(schema.Counters)}
	strk := &streaksdynamo.Store{DB: db, Streaks: names.Of(schema.Streaks), Activity: names.Of(schema.Activity)}
	const chunk = 2_000
	bp := leaderboards.BoardPeriod{Board: erasureBoard, Period: leaderboards.AllTime}
	var items [4]int
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(4)
	for c, from := 0, 0; from < n; c, from = c+1, from+chunk {
		to := min(from+chunk, n)
		var (
			list    []playersdynamo.Imported
			reacted []reactions.Activated
			scored  []leaderboards.Imported
			matches []leaderboards.Recorded
			states  []streaks.State
		)
		for i := from; i < to; i++ {
			p := erasurePlayer(i)
			list = append(list, playersdynamo.Imported{
				Profile: players.Profile{PlayerID: p, DisplayName: "Player " + p[len(p)-6:], AvatarURL: "https://cdn.example/a/" + p + ".png", Region: "eu", UpdatedAt: at},
				Friends: erasureFriends(i, n),
			})
			reacted = append(reacted, reactions.Activated{Ref: reactions.Ref{UserID: p, Kind: reactions.Favorite, TargetID: erasureGame(i)}, At: at})
			if i%10 == 0 {
				reacted = append(reacted, reactions.Activated{Ref: reactions.Ref{UserID: p, Kind: reactions.Like, TargetID: erasurePost(i)}, At: at})
			}
			score := int64(1000 + (i*7919)%5000)
			scored = append(scored, leaderboards.Imported{Score: leaderboards.Score{
				Board: erasureBoard, Period: leaderboards.AllTime, PlayerID: p, Score: score, ReachedAt: at, LastMatchID: "m1", UpdatedAt: at,
			}, Changes: 1})
			matches = append(matches, leaderboards.Recorded{Submission: leaderboards.Submission{Board: erasureBoard, Period: leaderboards.AllTime,
				Match: leaderboards.Match{PlayerID: p, MatchID: "m1", Score: score, OccurredAt: at}}, Applied: score, RecordedAt: at})
			streak := int64(1 + i%30)
			states = append(states, streaks.State{UserID: p, Current: streak, Longest: streak, LastDate: at.Format(streaks.DateLayout), ReachedAt: at,
				Timezone: "UTC", TotalPoints: 10 * streak, Version: streak, UpdatedAt: at})
		}
		items[0] += len(list) * 4
		items[1] += len(reacted)
		items[2] += 2*len(scored) + 1
		items[3] += len(states)
		job := fmt.Sprintf("bench-erasure-seed-%d", c)
		g.Go(func() error {
			if err := ps.Import(gctx, list); err != nil {
				return err
			}
			if err := edges.Import(gctx, reacted); err != nil {
				return err
			}
			if _, err := scores.Import(gctx, leaderboards.ImportChunk{Job: job, Line: 1}, map[string]leaderboards.Order{erasureBoard: leaderboards.Desc},
				scored, map[leaderboards.BoardPeriod]int64{bp: int64(len(scored))}, matches); err != nil {
				return err
			}
			// Each chunk counts its members under a job of its own: the
			// mark goes once counted, so the period's meta item is the
			// size one import leaves.
			if err := scores.ForgetImport(gctx, bp, job); err != nil {
				return err
			}
			return strk.Import(gctx, states)
		})
	}
	if err := g.Wait(); err != nil {
		return 0, err
	}
	return items[0] + items[1] + items[2] + items[3], nil
}

// erasureFootprint defines the boards and gives each erased player their
// reactions, scores, activity and friends through the API, with the
// listers' lists naming them, and waits for the processors.
func (s *routesStack) erasureFootprint(ctx context.Context, others, erased int) error {
	var calls []routesCall
	for b := range erasureBoards {
		body, _ := json.Marshal(map[string]any{"title": "b", "policy": "best", "order": "desc", "reset": "none", "tie_break": "earliest", "max_n": 100, "timezone": "UTC"})
		calls = append(calls, routesCall{Route: routes.PutLeaderboard, Path: fmt.Sprintf("/v1/leaderboards/erasure-b%d", b), Body: string(body)})
	}
	if err := s.worstAll(ctx, calls); err != nil {
		return err
	}
	calls = calls[:0]
	kinds := []string{"DAILY_OPEN", "LEVEL_COMPLETED", "SOCIAL_SHARE"}
	for k := range erased {
		u := erasureUser(k)
		for i := range erasureFootprint.favorites {
			calls = append(calls, routesCall{Route: routes.FavoriteGame, Sub: u, Path: "/v1/favorites/" + erasureGame(k*erasureFootprint.favorites+i)})
		}
		for i := range erasureFootprint.likes {
			calls = append(calls, routesCall{Route: routes.LikePost, Sub: u, Path: "/v1/posts/" + erasurePost(10*(k*erasureFootprint.likes+i)) + "/like"})
		}
		for b := range erasureBoards {
			calls = append(calls, routesCall{Route: routes.SubmitScore, Path: fmt.Sprintf("/v1/leaderboards/erasure-b%d/scores", b),
				Body: fmt.Sprintf(`{"player_id":%q,"match_id":"m%d","score":%d}`, u, b, 2000+100*k+b)})
		}
		// Each erased player's friends and listers are others of their
		// own: base, base+1, ... (no two erased players share one).
		base := k * (erasureFootprint.friends + erasureListers)
		friends := make([]string, erasureFootprint.friends)
		for i := range friends {
			friends[i] = erasurePlayer(base + i)
		}
		body, _ := json.Marshal(map[string]any{"friend_ids": friends})
		calls = append(calls, routesCall{Route: routes.PutFriends, Path: "/v1/players/" + u + "/friends", Body: string(body)})
		for j := range erasureListers {
			i := base + erasureFootprint.friends + j
			list := append(erasureFriends(i, others), u)
			body, _ := json.Marshal(map[string]any{"friend_ids": list})
			calls = append(calls, routesCall{Route: routes.PutFriends, Path: "/v1/players/" + erasurePlayer(i) + "/friends", Body: string(body)})
		}
	}
	if err := s.worstAll(ctx, calls); err != nil {
		return err
	}
	// Activities one at a time: each extends the same streak.
	for k := range erased {
		u := erasureUser(k)
		for i := range erasureFootprint.activities {
			c := routesCall{Route: routes.RecordActivity, Sub: u, Path: "/v1/activity",
				Body:    fmt.Sprintf(`{"event_type":%q,"source":"mobile_app","timezone":"UTC"}`, kinds[i%len(kinds)]),
				Headers: map[string]string{"Idempotency-Key": fmt.Sprintf("erasure-%d-%d", k, i)}}
			if _, err := s.do(ctx, c); err != nil {
				return err
			}
		}
	}
	return s.WaitIdle(ctx)
}

// erasureResumeAfter is how long an erasure may stay pending before the
// bench resumes it, as the processor's next tick would (ticks are off).
const erasureResumeAfter = 30 * time.Second

// erasureCompleted waits until user's erasure is COMPLETED, resuming it
// when it stays pending (a part still waits on a processor once its run
// gave up waiting) with an empty batch invoked on the erasure processor,
// what a tick does; it returns how many resumes it took.
func (s *routesStack) erasureCompleted(ctx context.Context, user string) (int, error) {
	resumes := 0
	deadline := time.Now().Add(8 * time.Minute)
	resumeAt := time.Now().Add(erasureResumeAfter)
	for {
		out, err := s.do(ctx, routesCall{Route: routes.ErasureStatusByService, Path: "/v1/ops/users/" + user + "/erasure"})
		if err != nil {
			return resumes, err
		}
		var got struct {
			Status string `json:"status"`
		}
		if err := json.Unmarshal(out, &got); err != nil {
			return resumes, fmt.Errorf("erasure status: %w", err)
		}
		if got.Status == "COMPLETED" {
			return resumes, nil
		}
		now := time.Now()
		if now.After(deadline) {
			return resumes, fmt.Errorf("erasure of %s still %s after 8 minutes and %d resumes", user, got.Status, resumes)
		}
		if now.After(resumeAt) {
			if err := s.erasureResume(ctx); err != nil {
				return resumes, err
			}
			resumes++
			resumeAt = time.Now().Add(erasureResumeAfter)
		}
		select {
		case <-ctx.Done():
			return resumes, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// erasureResume invokes the erasure processor with no records, through
// the stack's Lambda Invoke API: it takes up every pending erasure.
func (s *routesStack) erasureResume(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL()+"/2015-03-31/functions/"+routes.ErasureProcessor.Function+"/invocations", strings.NewReader(`{"Records":[]}`))
	if err != nil {
		return err
	}
	// The run waits on the processors as the stream's run did: longer
	// than the gateway client's timeout.
	resp, err := (&http.Client{Transport: s.http.Transport, Timeout: 5 * time.Minute}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("resume the erasures: %d %s", resp.StatusCode, out)
	}
	return nil
}
