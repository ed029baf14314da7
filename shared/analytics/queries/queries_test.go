package queries_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	analyticsbind "github.com/rallyhq/rally/shared/analytics/bind"

	"github.com/aws/aws-lambda-go/events"
	_ "github.com/duckdb/duckdb-go/v2" // the SQL engine the queries run on locally

	"github.com/rallyhq/rally/infra/local/apitest"
	"github.com/rallyhq/rally/infra/local/stack"
	"github.com/rallyhq/rally/infra/local/stacktest"
	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/shared/analytics"
	"github.com/rallyhq/rally/shared/analytics/queries"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/streams"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// script is what the test did, counted by hand, per UTC day.
type script struct {
	active      map[string]map[string]bool     // day → players
	favorites   map[[2]string]*[3]int64        // (day, game) → added, removed, net
	submissions map[[2]string]map[string]int64 // (day, board) → player → submissions
	streaks     map[string]map[string]int64    // day → player → longest streak that day
	points      map[[2]string]*[2]int64        // (day, activity type) → events, points
}

func newScript() *script {
	return &script{
		active: map[string]map[string]bool{}, favorites: map[[2]string]*[3]int64{},
		submissions: map[[2]string]map[string]int64{}, streaks: map[string]map[string]int64{},
		points: map[[2]string]*[2]int64{},
	}
}

func (s *script) saw(day, player string) {
	if s.active[day] == nil {
		s.active[day] = map[string]bool{}
	}
	s.active[day][player] = true
}

func (s *script) favorite(day, player, game string, added bool) {
	s.saw(day, player)
	k := [2]string{day, game}
	if s.favorites[k] == nil {
		s.favorites[k] = &[3]int64{}
	}
	if added {
		s.favorites[k][0]++
		s.favorites[k][2]++
	} else {
		s.favorites[k][1]++
		s.favorites[k][2]--
	}
}

// shipTwice delivers every batch to the shipper, then the same batch again
// and its second half a third time, as Lambda may after a timeout.
type shipTwice struct {
	real atomic.Pointer[streams.Handler]
}

func (r *shipTwice) handle(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
	h := r.real.Load()
	if h == nil {
		return events.DynamoDBEventResponse{}, fmt.Errorf("the stack is still starting")
	}
	for _, batch := range []events.DynamoDBEvent{ev, ev, {Records: ev.Records[len(ev.Records)/2:]}} {
		if resp, err := (*h)(ctx, batch); err != nil || len(resp.BatchItemFailures) > 0 {
			return resp, err
		}
	}
	return events.DynamoDBEventResponse{}, nil
}

// TestNamedQueriesAnswerWhatHappened plays two scripted days through the
// local stack — favorites, likes, score submissions, activity — with every
// analytics batch delivered more than once, then runs each named query
// over the local export with DuckDB and compares its answer with what the
// script did.
func TestNamedQueriesAnswerWhatHappened(t *testing.T) {
	redo := &shipTwice{}
	dir := t.TempDir()
	s := stacktest.Start(t, stack.Options{StateDir: dir, Processors: map[string]streams.Handler{
		routes.AnalyticsShipper.Function: redo.handle,
	}})
	real := s.Deps().Stream(analyticsbind.Analytics, routes.AnalyticsShipper)
	redo.real.Store(&real)
	c := apitest.New(t, s)
	want := newScript()
	day1 := time.Date(time.Now().Year()+1, 3, 10, 8, 0, 0, 0, time.UTC)
	s.Clock().Set(day1)
	d1 := day1.Format("2006-01-02")

	c.Service("PUT", "/v1/leaderboards/cup", map[string]any{"title": "Cup", "policy": "increment"}).Expect(t, 201)
	submit := func(day, player, match string, score int64, applied bool) {
		r := c.Service("POST", "/v1/leaderboards/cup/scores", map[string]any{"player_id": player, "match_id": match, "score": score}).Expect(t, 200)
		if got := strings.Contains(string(r.Body), `"applied":true`); got != applied {
			t.Fatalf("submit %s/%s: %s", player, match, r.Body)
		}
		if applied {
			want.saw(day, player)
			k := [2]string{day, "cup"}
			if want.submissions[k] == nil {
				want.submissions[k] = map[string]int64{}
			}
			want.submissions[k][player]++
		}
	}
	act := func(day, player, key, typ string) {
		call := apitest.Call{Method: "POST", Path: "/v1/activity", As: player, Header: map[string]string{"Idempotency-Key": key},
			Body: map[string]any{"event_type": typ, "source": "mobile_app"}}
		if strings.HasPrefix(typ, "MATCH_") { // game servers report matches
			call.Path, call.As, call.Service = "/v1/ops/activity", "", true
			call.Body = map[string]any{"user_id": player, "event_type": typ, "source": "console"}
		}
		r := c.Do(call).Expect(t, 200)
		var got struct {
			PointsAwarded int64 `json:"points_awarded"`
			CurrentStreak int64 `json:"current_streak"`
		}
		r.JSON(t, &got)
		want.saw(day, player)
		if want.streaks[day] == nil {
			want.streaks[day] = map[string]int64{}
		}
		want.streaks[day][player] = max(want.streaks[day][player], got.CurrentStreak)
		k := [2]string{day, typ}
		if want.points[k] == nil {
			want.points[k] = &[2]int64{}
		}
		want.points[k][0]++
		want.points[k][1] += got.PointsAwarded
	}

	c.Player("ann", "POST", "/v1/favorites/g1", nil).Expect(t, 200)
	want.favorite(d1, "ann", "g1", true)
	c.Player("bob", "POST", "/v1/favorites/g1", nil).Expect(t, 200)
	want.favorite(d1, "bob", "g1", true)
	c.Player("bob", "POST", "/v1/favorites/g1", nil).Expect(t, 200) // already a favorite: no event
	c.Player("cat", "POST", "/v1/favorites/g2", nil).Expect(t, 200)
	want.favorite(d1, "cat", "g2", true)
	c.Player("ann", "DELETE", "/v1/favorites/g1", nil).Expect(t, 200)
	want.favorite(d1, "ann", "g1", false)
	c.Player("dan", "PUT", "/v1/posts/p1/like", nil).Expect(t, 200)
	want.saw(d1, "dan")
	submit(d1, "ann", "m1", 3, true)
	submit(d1, "ann", "m2", 1, true)
	submit(d1, "ann", "m2", 1, false) // a repeated match: no event
	submit(d1, "bob", "m1", 2, true)
	act(d1, "ann", "a1", "DAILY_OPEN")
	act(d1, "ann", "a2", "MATCH_WON")
	act(d1, "ann", "a3", "MATCH_WON")
	act(d1, "eve", "e1", "MATCH_PLAYED")

	day2 := day1.Add(24 * time.Hour)
	s.Clock().Set(day2)
	d2 := day2.Format("2006-01-02")
	act(d2, "ann", "a4", "DAILY_OPEN")
	act(d2, "cat", "c1", "SOCIAL_SHARE")
	c.Player("eve", "POST", "/v1/favorites/g2", nil).Expect(t, 200)
	want.favorite(d2, "eve", "g2", true)
	submit(d2, "cat", "m9", 5, true)

	if err := s.WaitIdle(context.Background()); err != nil {
		t.Fatal(err)
	}
	db := duck(t, filepath.Join(dir, "analytics"))

	var dupes int
	if err := db.QueryRow(`SELECT COUNT(*) FROM (SELECT event_id FROM rally_events GROUP BY event_id HAVING COUNT(*) > 1)`).Scan(&dupes); err != nil {
		t.Fatal(err)
	}
	if dupes != 0 {
		t.Fatalf("%d event ids exported more than once", dupes)
	}
	expected := map[string][]string{}
	for day, players := range want.active {
		expected["daily_active_players"] = append(expected["daily_active_players"], row(day, len(players)))
	}
	for k, v := range want.favorites {
		expected["favorites_per_game_per_day"] = append(expected["favorites_per_game_per_day"], row(k[0], k[1], v[0], v[1], v[2]))
	}
	for k, players := range want.submissions {
		var n int64
		for _, c := range players {
			n += c
		}
		expected["score_submissions_per_board_per_day"] = append(expected["score_submissions_per_board_per_day"], row(k[0], k[1], n, len(players)))
	}
	for day, players := range want.streaks {
		hist := map[int64]int{}
		for _, st := range players {
			hist[st]++
		}
		for st, n := range hist {
			expected["streak_length_distribution"] = append(expected["streak_length_distribution"], row(day, st, n))
		}
	}
	for k, v := range want.points {
		expected["points_per_event_type"] = append(expected["points_per_event_type"], row(k[0], k[1], v[0], v[1]))
	}
	all := queries.All()
	if len(all) != len(expected) {
		t.Fatalf("%d named queries, the test checks %d", len(all), len(expected))
	}
	for _, q := range all {
		got := run(t, db, q.SQL)
		exp := expected[q.Name]
		sort.Strings(exp)
		if !reflect.DeepEqual(got, exp) {
			t.Errorf("%s (%s):\n got %v\nwant %v", q.Name, q.Description, got, exp)
		}
		t.Logf("%s: %v", q.Name, got)
	}
}

// duck opens DuckDB with the local export as the analysts' table: the
// partitions come from the paths, as Athena's partition projection reads them.
func duck(t *testing.T, dir string) *sql.DB {
	t.Helper()
	db, err := sql.Open("duckdb", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	glob := filepath.Join(dir, analytics.Prefix, "*", "*", "*", "*.parquet")
	view := fmt.Sprintf(`CREATE VIEW %s AS SELECT * FROM read_parquet('%s', hive_partitioning = true,
		hive_types = {'event_type': VARCHAR, 'dt': VARCHAR, 'hour': VARCHAR})`, analytics.Table, glob)
	if _, err := db.Exec(view); err != nil {
		t.Fatal(err)
	}
	return db
}

// run returns a query's rows, each as its values joined by spaces, sorted.
func run(t *testing.T, db *sql.DB, query string) []string {
	t.Helper()
	rows, err := db.Query(query)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		out = append(out, row(vals...))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

func row(vals ...any) string {
	parts := make([]string, len(vals))
	for i, v := range vals {
		parts[i] = fmt.Sprint(v)
	}
	return strings.Join(parts, " ")
}
