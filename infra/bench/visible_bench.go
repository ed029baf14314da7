package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"

	"github.com/rallyhq/rally/infra/local/poller"
	"github.com/rallyhq/rally/infra/local/stack"
	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/config"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/streamread"
)

// The visible section: how long after a write's 2xx answer its read route
// shows it, through the local stack (gateway, handlers, pollers feeding
// the processors), beside the stream delivery floor: a bare PutItem until
// a local poller hands its record to a handler.
const (
	visibleSamples      = 40
	visibleCountSamples = 20 // favorites wait out the counter's batching window
	visiblePollEvery    = 5 * time.Millisecond
	visibleDeadline     = 5 * time.Second
	visibleLeaderboard  = "bench-visible"
	visibleGoal         = 300 // ms, p95
	// visiblePollerInterval is the local pollers' pause between empty
	// polls (infra/local/poller's default, Lambda's four polls a second).
	visiblePollerInterval = 250 * time.Millisecond
)

// visibleClient calls the local stack's API.
type visibleClient struct {
	s    *stack.Stack
	http *http.Client
}

// call sends a request as a player (as != "") or signed as a service, and
// decodes a 2xx JSON answer into out; it returns the status.
func (c visibleClient) call(ctx context.Context, as, method, path string, body, out any) (int, error) {
	var raw []byte
	if body != nil {
		var err error
		if raw, err = json.Marshal(body); err != nil {
			return 0, err
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, c.s.URL()+path, bytes.NewReader(raw))
	if err != nil {
		return 0, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
		// Writes that require one get a fresh Idempotency-Key.
		req.Header.Set("Idempotency-Key", fmt.Sprintf("bench-%d", time.Now().UnixNano()))
	}
	if as != "" {
		tok, err := c.s.Token(as)
		if err != nil {
			return 0, err
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	} else if err := stack.SignRequest(req, raw); err != nil {
		return 0, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, err
	}
	if resp.StatusCode/100 != 2 {
		if resp.StatusCode != http.StatusNotFound {
			fmt.Fprintf(os.Stderr, "bench: visible: %s %s: %d %s\n", method, path, resp.StatusCode, got)
		}
		return resp.StatusCode, nil
	}
	if out != nil {
		if err := json.Unmarshal(got, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s %s: %w", method, path, err)
		}
	}
	return resp.StatusCode, nil
}

// must is call that wants a 2xx.
func (c visibleClient) must(ctx context.Context, as, method, path string, body, out any) error {
	status, err := c.call(ctx, as, method, path, body, out)
	if err == nil && status/100 != 2 {
		err = fmt.Errorf("%s %s: status %d", method, path, status)
	}
	return err
}

// visibleJitter waits a random part of the pollers' interval before a
// write, so the writes land at every phase of the polling rather than
// always just after a poll that delivered the previous one.
func visibleJitter(ctx context.Context, rng *rand.Rand) error {
	return clock.Sleep(ctx, time.Duration(rng.Int64N(int64(visiblePollerInterval))))
}

// visibleTimes are one write's: from its 2xx answer until a read shows
// it, and until a read's as_of covers it (the processor applied it).
type visibleTimes struct {
	shown, applied []time.Duration
	// missed counts writes not shown within visibleDeadline: each is
	// counted at the deadline, so percentiles include them.
	missed int
}

// visibleAfter times n writes, one at a time: for each, the span from the
// write's 2xx answer to the first read that shows it, and to the first
// whose as_of (the newest change the processor applied) is at or past the
// write; the read route is polled every few milliseconds. seen reports
// whether the read shows write i, and its as_of.
func visibleAfter(ctx context.Context, s *stack.Stack, rng *rand.Rand, n int, write func(i int) error, seen func(i int) (bool, time.Time, error)) (visibleTimes, error) {
	var out visibleTimes
	for i := range n {
		if err := visibleJitter(ctx, rng); err != nil {
			return out, err
		}
		at := s.Clock().Now().Truncate(time.Millisecond)
		if err := write(i); err != nil {
			return out, err
		}
		start := time.Now()
		var shown, applied time.Duration
		for shown == 0 || applied == 0 {
			ok, asOf, err := seen(i)
			if err != nil {
				return out, err
			}
			if ok && shown == 0 {
				shown = max(time.Since(start), 1)
			}
			if !asOf.Before(at) && applied == 0 {
				applied = max(time.Since(start), 1)
			}
			if time.Since(start) > visibleDeadline {
				fmt.Fprintf(os.Stderr, "bench: visible: write %d not visible after %s (shown %v, applied %v)\n", i, visibleDeadline, shown > 0, applied > 0)
				out.missed++
				if shown == 0 {
					shown = visibleDeadline
				}
				if applied == 0 {
					applied = visibleDeadline
				}
				break
			}
			time.Sleep(visiblePollEvery) // the read route is polled: nothing outside the stack can be awaited
		}
		out.shown, out.applied = append(out.shown, shown), append(out.applied, applied)
	}
	return out, nil
}

func benchVisible(ctx context.Context, env *Env) (Section, error) {
	floor, err := visibleFloor(ctx, env)
	if err != nil {
		return Section{}, fmt.Errorf("stream delivery floor: %w", err)
	}
	fmt.Fprintf(os.Stderr, "bench: visible: stream delivery floor p50 %s\n", Percentile(floor, 50).Round(time.Millisecond))

	state, err := os.MkdirTemp("", "rally-bench-visible-")
	if err != nil {
		return Section{}, err
	}
	defer os.RemoveAll(state)
	s, err := stack.Start(ctx, stack.Options{
		DynamoDBEndpoint: env.DynamoDB.Endpoint(),
		RedisURL:         env.Redis.URL(),
		TablePrefix:      fmt.Sprintf("bench-visible-%d-", time.Now().UnixNano()),
		StateDir:         state,
		Log:              io.Discard,
		// Reads are polled every few milliseconds: no budget may refuse them.
		Configure: func(c *config.Config) {
			c.Budgets = map[string]int{}
			for _, b := range routes.AllBudgets() {
				c.Budgets[b.Name] = 0
			}
			// A young account's budgets are halved, to at least 1 a
			// minute even when turned off: every player here is new.
			c.YoungAccountAge = 0
		},
	})
	if err != nil {
		return Section{}, err
	}
	defer s.Close()
	c := visibleClient{s: s, http: &http.Client{Timeout: 10 * time.Second}}
	rng := rand.New(rand.NewPCG(5, 6))
	run := strconv.FormatInt(time.Now().UnixNano(), 36)

	// Favorite → its count.
	fmt.Fprintf(os.Stderr, "bench: visible: %d favorites\n", visibleCountSamples)
	game := "bench-game-" + run
	favorites, err := visibleAfter(ctx, s, rng, visibleCountSamples,
		func(i int) error {
			return c.must(ctx, fmt.Sprintf("fan-%s-%d", run, i), "POST", "/v1/favorites/"+game, nil, nil)
		},
		func(i int) (bool, time.Time, error) {
			var body struct {
				Count int       `json:"count"`
				AsOf  time.Time `json:"as_of"`
			}
			err := c.must(ctx, "reader", "GET", "/v1/games/"+game+"/favorites/count", nil, &body)
			return body.Count == i+1, body.AsOf, err
		})
	if err != nil {
		return Section{}, fmt.Errorf("favorites: %w", err)
	}

	// Score → the player's rank.
	fmt.Fprintf(os.Stderr, "bench: visible: %d scores\n", visibleSamples)
	if err := c.must(ctx, "", "PUT", "/v1/leaderboards/"+visibleLeaderboard, map[string]any{
		"title": "Bench", "policy": "best", "order": "desc", "reset": "none", "tie_break": "earliest", "max_n": 100, "timezone": "UTC",
	}, nil); err != nil {
		return Section{}, err
	}
	scores, err := visibleAfter(ctx, s, rng, visibleSamples,
		func(i int) error {
			return c.must(ctx, "", "POST", "/v1/leaderboards/"+visibleLeaderboard+"/scores", map[string]any{
				"player_id": fmt.Sprintf("player-%s-%d", run, i), "match_id": fmt.Sprintf("match-%s-%d", run, i), "score": 100 + i,
			}, nil)
		},
		func(i int) (bool, time.Time, error) {
			var body struct {
				Score int64     `json:"score"`
				AsOf  time.Time `json:"as_of"`
			}
			status, err := c.call(ctx, "reader", "GET", fmt.Sprintf("/v1/leaderboards/%s/players/player-%s-%d/rank?k=0", visibleLeaderboard, run, i), nil, &body)
			if err == nil && status != 200 && status != 404 {
				err = fmt.Errorf("rank: status %d", status)
			}
			return status == 200 && body.Score == int64(100+i), body.AsOf, err
		})
	if err != nil {
		return Section{}, fmt.Errorf("scores: %w", err)
	}

	// Activity → the streak board.
	fmt.Fprintf(os.Stderr, "bench: visible: %d activities\n", visibleSamples)
	activities, err := visibleAfter(ctx, s, rng, visibleSamples,
		func(i int) error {
			return c.must(ctx, fmt.Sprintf("streaker-%s-%d", run, i), "POST", "/v1/activity",
				map[string]string{"event_type": "DAILY_OPEN", "source": "mobile_app"}, nil)
		},
		func(i int) (bool, time.Time, error) {
			var body struct {
				Entries []struct {
					UserID string `json:"user_id"`
				} `json:"entries"`
				AsOf time.Time `json:"as_of"`
			}
			err := c.must(ctx, "reader", "GET", "/v1/streaks/top?n=100", nil, &body)
			want := fmt.Sprintf("streaker-%s-%d", run, i)
			for _, e := range body.Entries {
				if e.UserID == want {
					return true, body.AsOf, err
				}
			}
			return false, body.AsOf, err
		})
	if err != nil {
		return Section{}, fmt.Errorf("activity: %w", err)
	}

	row := func(name string, lat []time.Duration, p float64, goal bool, note string) Row {
		v, f := Millis(Percentile(lat, p)), Millis(Percentile(floor, p))
		r := Row{Name: fmt.Sprintf("%s, p%g", name, p), Value: v, Floor: f, Unit: "ms", FloorName: "stream delivery: PutItem → a poller hands the record over", Note: note}
		if goal {
			r.Goal, r.Met = fmt.Sprintf("≤ %d ms", visibleGoal), Within(v, visibleGoal)
		}
		return r
	}
	window := routes.CounterProcessor.BatchWindow
	countNote := "no batching window (MaximumBatchingWindowInSeconds 0 in AWS): the counter processor takes each batch as soon as it is read, and coalesces within it (next section)"
	if window > 0 {
		countNote = fmt.Sprintf("the counter processor's batching window holds each batch until %s after its first record: "+
			"MaximumBatchingWindowInSeconds %d in AWS, and the local poller emulates it the same way", window, int(window.Seconds()))
	}
	missed := func(t visibleTimes, note string) string {
		if t.missed == 0 {
			return note
		}
		return fmt.Sprintf("%d of %d writes not shown within %s (counted at %s); %s", t.missed, len(t.shown), visibleDeadline, visibleDeadline, note)
	}
	through := func(what string) string {
		return "below the floor: the handler writes " + what + " in Redis itself (a versioned write-through), so a read shows it before the stream delivers it"
	}
	applied := "as_of reaches the write once the processor applied it from the stream"
	rows := []Row{
		row("favorite → GET …/favorites/count shows it", favorites.shown, 50, false, ""),
		row("favorite → GET …/favorites/count shows it", favorites.shown, 95, true, missed(favorites, countNote)),
		row("favorite → its as_of covers it", favorites.applied, 95, false, "the count is only written by the processor: shown and applied together"),
		row("score → GET …/players/{id}/rank shows it", scores.shown, 50, false, through("the board")),
		row("score → GET …/players/{id}/rank shows it", scores.shown, 95, true, missed(scores, through("the board"))),
		row("score → its as_of covers it", scores.applied, 50, false, applied),
		row("score → its as_of covers it", scores.applied, 95, false, applied),
		row("activity → GET /v1/streaks/top shows it", activities.shown, 50, false, through("the streak board")),
		row("activity → GET /v1/streaks/top shows it", activities.shown, 95, true, missed(activities, through("the streak board"))),
		row("activity → its as_of covers it", activities.applied, 50, false, applied),
		row("activity → its as_of covers it", activities.applied, 95, false, applied),
	}
	if !*rows[1].Met {
		rows[1].Note = "not met: " + rows[1].Note
	}
	return Section{
		Title: "Write → visible",
		Intro: fmt.Sprintf("Through the local stack (gateway, in-process handlers, a poller per stream processor, DynamoDB Local and redis-server): "+
			"the time from a write's 2xx answer to the first read that shows it, and to the first whose as_of (the newest change its processor applied) "+
			"is at or past the write, the read route polled every %s (rate budgets off). "+
			"%d favorites of one game (each by a new player), %d scores (each a new player's) and %d first activities, one at a time, each after a random "+
			"pause within the pollers' interval so writes land at every phase of the polling. "+
			"The floor is the local stream delivery itself: a bare PutItem until a poller (infra/local/poller, the same stream reading path, "+
			"%s between empty polls, no batching window) hands the record to a handler, %d samples.",
			visiblePollEvery, visibleCountSamples, visibleSamples, visibleSamples, visiblePollerInterval, len(floor)),
		Rows: rows,
	}, nil
}

// visibleFloor measures the stream delivery floor: a bare PutItem on a
// table with a stream until a local poller hands its record to a handler.
func visibleFloor(ctx context.Context, env *Env) ([]time.Duration, error) {
	db := dynamodb.New(dynamodb.Options{
		Region: stack.Region, BaseEndpoint: aws.String(env.DynamoDB.Endpoint()),
		Credentials: credentials.NewStaticCredentialsProvider("local", "local", ""),
	})
	table := fmt.Sprintf("bench-visible-floor-%d", time.Now().UnixNano())
	if _, err := db.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(table),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
		StreamSpecification:  &types.StreamSpecification{StreamEnabled: aws.Bool(true), StreamViewType: types.StreamViewTypeNewAndOldImages},
	}); err != nil {
		return nil, err
	}
	defer func() {
		_, _ = db.DeleteTable(context.WithoutCancel(ctx), &dynamodb.DeleteTableInput{TableName: aws.String(table)})
	}()

	var (
		mu      sync.Mutex
		arrived = map[string]time.Time{}
		wake    = make(chan struct{}, 1)
	)
	handler := func(_ context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		now := time.Now()
		mu.Lock()
		for _, r := range ev.Records {
			arrived[r.Change.Keys["pk"].String()] = now
		}
		mu.Unlock()
		select {
		case wake <- struct{}{}:
		default:
		}
		return events.DynamoDBEventResponse{}, nil
	}
	p, err := poller.New(poller.Options{
		Processor: routes.Processor{Function: "bench-floor", BatchSize: 100, MaxRetries: 1, MaxRecordAge: time.Hour},
		Handler:   handler, Table: table, DB: db, Region: stack.Region, PollInterval: visiblePollerInterval, MaxPollInterval: visiblePollerInterval,
		Streams:   streamread.Retained{Client: dynamodbstreams.New(dynamodbstreams.Options{Region: stack.Region, BaseEndpoint: aws.String(env.DynamoDB.Endpoint()), Credentials: credentials.NewStaticCredentialsProvider("local", "local", "")})},
		OnFailure: func(context.Context, streamread.Parked) error { return errors.New("the floor's handler does not fail") },
	})
	if err != nil {
		return nil, err
	}
	pctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = p.Run(pctx) })
	defer func() { stop(); wg.Wait() }()

	rng := rand.New(rand.NewPCG(3, 4))
	var lat []time.Duration
	for i := range visibleSamples + 1 {
		if err := visibleJitter(ctx, rng); err != nil {
			return nil, err
		}
		key := strconv.Itoa(i)
		if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: key}}}); err != nil {
			return nil, err
		}
		put := time.Now()
		deadline := time.NewTimer(visibleDeadline)
		for {
			mu.Lock()
			at, ok := arrived[key]
			mu.Unlock()
			if ok {
				// The first put also waits for the poller to find the shard.
				if i > 0 {
					lat = append(lat, at.Sub(put))
				}
				break
			}
			select {
			case <-wake:
			case <-deadline.C:
				return nil, fmt.Errorf("record %s not delivered after %s", key, visibleDeadline)
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		deadline.Stop()
	}
	return lat, nil
}
