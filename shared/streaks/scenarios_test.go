package streaks_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/infra/local/apitest"
	"github.com/rallyhq/rally/infra/local/stack"
	"github.com/rallyhq/rally/infra/local/stacktest"
	"github.com/rallyhq/rally/shared/schema"
)

// items counts what the tables hold for a user: Activity items by kind
// (evt, day, idem) and the Streaks item.
func items(t *testing.T, s *stack.Stack, user string) map[string]int {
	t.Helper()
	counts := map[string]int{}
	p := dynamodb.NewQueryPaginator(s.DB(), &dynamodb.QueryInput{
		TableName:                 aws.String(s.Tables().Of(schema.Activity)),
		KeyConditionExpression:    aws.String("user_id = :u"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":u": &types.AttributeValueMemberS{Value: user}},
		ConsistentRead:            aws.Bool(true),
	})
	for p.HasMorePages() {
		page, err := p.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range page.Items {
			sk := it[schema.AttrSK].(*types.AttributeValueMemberS).Value
			kind, _, _ := cut(sk)
			counts[kind]++
		}
	}
	out, err := s.DB().GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String(s.Tables().Of(schema.Streaks)), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{schema.AttrUserID: &types.AttributeValueMemberS{Value: user}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if out.Item != nil {
		counts["streak"] = 1
	}
	return counts
}

func cut(sk string) (string, string, bool) {
	for i := range sk {
		if sk[i] == '#' {
			return sk[:i], sk[i+1:], true
		}
	}
	return sk, "", false
}

func activity(c *apitest.Client, user, key string, body any) (apitest.Response, error) {
	h := map[string]string{}
	if key != "" {
		h["Idempotency-Key"] = key
	}
	return c.Try(apitest.Call{Method: "POST", Path: "/v1/activity", Body: body, As: user, Header: h})
}

func TestConcurrentActivitiesOfOnePlayerAllCount(t *testing.T) {
	s := stacktest.Start(t, stack.Options{})
	c := apitest.New(t, s)
	s.Clock().Set(time.Date(nextYear, 3, 10, 9, 0, 0, 0, time.UTC))
	const n = 20
	type result struct {
		EventID       string `json:"event_id"`
		PointsAwarded int64  `json:"points_awarded"`
	}
	results := make([]result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := c.Try(activityCall("ann", fmt.Sprintf("k%d", i), "MATCH_PLAYED", "")) // a game server's reports
			if err != nil || r.Status != 200 {
				t.Errorf("activity %d: %v %d %s", i, err, r.Status, r.Body)
				return
			}
			r.JSON(t, &results[i])
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	ids := map[string]bool{}
	var awarded int64
	for _, r := range results {
		ids[r.EventID] = true
		awarded += r.PointsAwarded
	}
	// MATCH_PLAYED earns 5 points up to 50 a day: ten earn, ten are recorded at 0.
	if len(ids) != n || awarded != 50 {
		t.Fatalf("%d distinct events, %d points awarded; want %d and 50", len(ids), awarded, n)
	}
	if got := items(t, s, "ann"); got["evt"] != n || got["idem"] != n || got["day"] != 1 {
		t.Fatalf("stored %v, want %d events, %d keys, 1 day", got, n, n)
	}
	var streak struct {
		TotalPoints   int64 `json:"total_points"`
		CurrentStreak int64 `json:"current_streak"`
	}
	c.Player("ann", "GET", "/v1/users/ann/streak", nil).Expect(t, 200).JSON(t, &streak)
	var history struct {
		Days []struct {
			Points, Events int64
		} `json:"days"`
	}
	c.Player("ann", "GET", "/v1/users/ann/points/history?days=1", nil).Expect(t, 200).JSON(t, &history)
	if streak.TotalPoints != 50 || streak.CurrentStreak != 1 || history.Days[0].Events != n || history.Days[0].Points != 50 {
		t.Fatalf("streak %+v, today %+v", streak, history.Days[0])
	}
}

func TestOneKeySentConcurrentlyHasOneEffect(t *testing.T) {
	s := stacktest.Start(t, stack.Options{})
	c := apitest.New(t, s)
	s.Clock().Set(time.Date(nextYear, 3, 10, 9, 0, 0, 0, time.UTC))
	const n = 20
	bodies := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := activity(c, "bob", "same-key", map[string]any{"event_type": "LEVEL_COMPLETED", "source": "console"})
			if err != nil || r.Status != 200 {
				t.Errorf("request %d: %v %d %s", i, err, r.Status, r.Body)
				return
			}
			bodies[i] = string(r.Body)
		}()
	}
	wg.Wait()
	for i := range bodies {
		if bodies[i] != bodies[0] {
			t.Fatalf("response %d differs:\n%s\n%s", i, bodies[i], bodies[0])
		}
	}
	if got := items(t, s, "bob"); got["evt"] != 1 || got["idem"] != 1 {
		t.Fatalf("stored %v, want one event under one key", got)
	}
	// The same key with another body is refused, and changes nothing.
	r, err := activity(c, "bob", "same-key", map[string]any{"event_type": "SOCIAL_SHARE", "source": "console"})
	if err != nil || r.Status != 422 {
		t.Fatalf("reused key: %v %d %s", err, r.Status, r.Body)
	}
	if got := items(t, s, "bob"); got["evt"] != 1 {
		t.Fatalf("stored %v after a reused key", got)
	}
}

func TestBadActivityInputWritesNothing(t *testing.T) {
	s := stacktest.Start(t, stack.Options{})
	c := apitest.New(t, s)
	ok := map[string]any{"event_type": "DAILY_OPEN", "source": "mobile_app"}
	with := func(k string, v any) map[string]any {
		m := map[string]any{"event_type": "DAILY_OPEN", "source": "mobile_app"}
		m[k] = v
		return m
	}
	cases := []struct {
		name   string
		key    string
		body   any
		status int
	}{
		{"unknown event type", "k1", with("event_type", "DANCED"), 400},
		{"unknown source", "k2", with("source", "fax"), 400},
		{"no Idempotency-Key", "", ok, 400},
		{"malformed Idempotency-Key", "has spaces in it", ok, 400},
		{"invalid time zone", "k3", with("timezone", "Mars/Olympus"), 400},
		{"empty time zone", "k4", with("timezone", ""), 400},
		{"unknown field", "k5", with("points", 1000), 400},
		{"wrong type", "k6", with("event_type", 7), 400},
		{"another player's id", "k7", with("user_id", "mallory"), 403},
		{"no body", "k8", nil, 400},
	}
	for _, tc := range cases {
		r, err := activity(c, "eve", tc.key, tc.body)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != tc.status || r.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s: %d %s %s, want %d problem+json", tc.name, r.Status, r.Header.Get("Content-Type"), r.Body, tc.status)
		}
	}
	reads := []struct {
		name, path string
		status     int
	}{
		{"days 0", "/v1/users/eve/points/history?days=0", 400},
		{"days 91", "/v1/users/eve/points/history?days=91", 400},
		{"days not a number", "/v1/users/eve/points/history?days=ten", 400},
		{"another player's history", "/v1/users/mallory/points/history", 403},
		{"n 0", "/v1/streaks/top?n=0", 400},
		{"n 101", "/v1/streaks/top?n=101", 400},
		{"bad region", "/v1/streaks/top?region=a%20b", 400},
		{"bad user id", "/v1/users/a%20b/streak", 400},
	}
	for _, tc := range reads {
		r := c.Player("eve", "GET", tc.path, nil)
		if r.Status != tc.status {
			t.Errorf("%s: %d %s, want %d", tc.name, r.Status, r.Body, tc.status)
		}
	}
	if got := items(t, s, "eve"); len(got) != 0 {
		t.Fatalf("bad input wrote %v", got)
	}
	// A service cannot record a player's activity: the route is for players.
	r := c.Do(apitest.Call{Method: "POST", Path: "/v1/activity", Body: ok, Service: true, Header: map[string]string{"Idempotency-Key": "svc"}})
	if r.Status != 401 && r.Status != 403 {
		t.Errorf("service call: %d %s", r.Status, r.Body)
	}
}
