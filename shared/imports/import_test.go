package imports_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rallyhq/rally/infra/local/apitest"
	"github.com/rallyhq/rally/infra/local/stack"
	"github.com/rallyhq/rally/infra/local/stacktest"
	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/infra/local/testenv/await"
	"github.com/rallyhq/rally/shared/app/all"
	"github.com/rallyhq/rally/shared/jobs"
	"github.com/rallyhq/rally/shared/leaderboards"
	leaderboardsbind "github.com/rallyhq/rally/shared/leaderboards/bind"
	"github.com/rallyhq/rally/shared/schema"
)

func TestMain(m *testing.M) { testenv.Main(m) }

type jobBody struct {
	ID       string `json:"job_id"`
	Kind     string `json:"kind"`
	Source   string `json:"source"`
	State    string `json:"state"`
	Progress struct {
		Done  int64 `json:"done"`
		Total int64 `json:"total"`
	} `json:"progress"`
	Rejected int64    `json:"rejected"`
	Examples []string `json:"examples"`
	Error    string   `json:"error"`
}

func importStack(t *testing.T) (*stack.Stack, *apitest.Client) {
	t.Helper()
	s := stacktest.Start(t, stack.Options{Log: testenv.FailureLog(t), TickEvery: 200 * time.Millisecond})
	return s, apitest.New(t, s)
}

// runImport imports the file at path through POST /v1/ops/jobs and
// awaits the job's end.
func runImport(t *testing.T, c *apitest.Client, path string) jobBody {
	t.Helper()
	var started struct {
		ID string `json:"job_id"`
	}
	c.Service("POST", "/v1/ops/jobs", map[string]any{"kind": "import", "source": "file://" + path}).Expect(t, 202).JSON(t, &started)
	var j jobBody
	await.Until(t, 3*time.Minute, "the import to finish", func() bool {
		c.Service("GET", "/v1/ops/jobs/"+started.ID, nil).Expect(t, 200).JSON(t, &j)
		return j.State != "RUNNING"
	})
	if j.State != "DONE" {
		t.Fatalf("import ended %s: %s", j.State, j.Error)
	}
	return j
}

// board is a board a test defines twice: once fed through the API, once
// by an import.
type board struct {
	policy, order string
	// scores draws a submission's score.
	scores func(r *rand.Rand) int64
}

var boards = []board{
	{"best", "desc", func(r *rand.Rand) int64 { return r.Int64N(60) }},
	{"increment", "desc", func(r *rand.Rand) int64 { return 1 + r.Int64N(5) }},
	{"latest", "asc", func(r *rand.Rand) int64 { return r.Int64N(40) }},
}

func define(t *testing.T, c *apitest.Client, id string, b board) {
	t.Helper()
	c.Service("PUT", "/v1/leaderboards/"+id, map[string]any{
		"title": id, "policy": b.policy, "order": b.order, "reset": "none", "tie_break": "earliest", "max_n": 100, "timezone": "UTC",
	}).Expect(t, 201)
}

// scoreLine is one submission, as an import line.
type scoreLine struct {
	Type      string `json:"type"`
	Board     string `json:"leaderboard_id"`
	Player    string `json:"player_id"`
	Score     int64  `json:"score"`
	ReachedAt string `json:"reached_at"`
}

// submissions draws n submissions to the boards named prefix+policy, by
// players few enough that each has many, at times few enough that equal
// scores are often reached at the same time (ties broken by player id).
func submissions(seed uint64, prefix string, players, n int, now time.Time) []scoreLine {
	r := rand.New(rand.NewPCG(seed, 7))
	out := make([]scoreLine, n)
	for i := range out {
		b := boards[r.IntN(len(boards))]
		out[i] = scoreLine{
			Type: "score", Board: prefix + b.policy, Player: fmt.Sprintf("p-%04d", r.IntN(players)), Score: b.scores(r),
			ReachedAt: now.Add(-time.Duration(r.IntN(600)) * time.Second).UTC().Format(time.RFC3339Nano),
		}
	}
	return out
}

func writeLines(t *testing.T, name string, lines []string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func encode(t *testing.T, v any) string {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

type entry struct {
	Rank   int    `json:"rank"`
	Player string `json:"player_id"`
	Score  int64  `json:"score"`
}

// standings reads a whole board through the API, page by page.
func standings(t *testing.T, c *apitest.Client, id string) ([]entry, int64) {
	t.Helper()
	var all []entry
	var total int64
	for from := 1; ; from += 100 {
		var top struct {
			Entries []entry `json:"entries"`
			Total   int64   `json:"total"`
		}
		c.Player("reader", "GET", fmt.Sprintf("/v1/leaderboards/%s/top?n=100&from_rank=%d", id, from), nil).Expect(t, 200).JSON(t, &top)
		all, total = append(all, top.Entries...), top.Total
		if len(top.Entries) < 100 {
			return all, total
		}
	}
}

// sameBoards asserts that the boards named a+policy and b+policy read
// back the same: every entry, rank and total, and a player's rank with
// neighbours.
func sameBoards(t *testing.T, c *apitest.Client, a, b string) {
	t.Helper()
	for _, bd := range boards {
		want, wantTotal := standings(t, c, a+bd.policy)
		got, gotTotal := standings(t, c, b+bd.policy)
		if wantTotal == 0 || gotTotal != wantTotal || !slices.Equal(got, want) {
			t.Fatalf("%s%s reads %d entries (total %d), %s%s %d (total %d); first difference: %s",
				b, bd.policy, len(got), gotTotal, a, bd.policy, len(want), wantTotal, firstDiff(got, want))
		}
		for _, e := range []entry{want[0], want[len(want)/2], want[len(want)-1]} {
			var ra, rb json.RawMessage
			c.Player("reader", "GET", "/v1/leaderboards/"+a+bd.policy+"/players/"+e.Player+"/rank?k=3", nil).Expect(t, 200).JSON(t, &ra)
			c.Player("reader", "GET", "/v1/leaderboards/"+b+bd.policy+"/players/"+e.Player+"/rank?k=3", nil).Expect(t, 200).JSON(t, &rb)
			if strip(t, ra) != strip(t, rb) {
				t.Fatalf("rank of %s: %s%s says %s, %s%s %s", e.Player, a, bd.policy, ra, b, bd.policy, rb)
			}
		}
	}
}

func firstDiff(got, want []entry) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf("entry %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	return "one is a prefix of the other"
}

// strip drops what differs between two boards' answers by nature (as_of).
func strip(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	delete(m, "as_of")
	return encode(t, m)
}

// What an import loads reads back exactly like the same scores submitted
// through the API, under every policy, with its bad lines refused and
// counted; importing the file again changes nothing (an increment board
// included) and refuses the same lines.
func TestAnImportReadsBackLikeTheSameScoresSubmitted(t *testing.T) {
	s, c := importStack(t)
	ctx := context.Background()
	for _, b := range boards {
		define(t, c, "api-"+b.policy, b)
		define(t, c, "imp-"+b.policy, b)
	}
	c.Service("PUT", "/v1/leaderboards/frozen", map[string]any{
		"title": "frozen", "policy": "best", "order": "desc", "reset": "none", "tie_break": "earliest", "max_n": 100, "timezone": "UTC", "status": "FROZEN",
	}).Expect(t, 201)

	now := s.Clock().Now()
	subs := submissions(1, "", 150, testenv.Scale(1500, 1500), now)
	var lines []string
	for i, sub := range subs {
		c.Service("POST", "/v1/leaderboards/api-"+sub.Board+"/scores", map[string]any{
			"player_id": sub.Player, "match_id": fmt.Sprintf("m-%d", i), "score": sub.Score, "occurred_at": sub.ReachedAt,
		}).Expect(t, 200)
		sub.Board = "imp-" + sub.Board
		lines = append(lines, encode(t, sub))
	}
	// Bad lines among the good ones, each refused for what it is.
	bad := map[int]string{
		10:  `{"type":"score","leaderboard_id":"imp-best","player_id":"p-0001","score":5`,
		20:  `{"type":"trophy","user_id":"p-0001"}`,
		30:  `{"type":"score","leaderboard_id":"nowhere","player_id":"p-0001","score":5}`,
		40:  `{"type":"score","leaderboard_id":"imp-best","player_id":"not an id!","score":5}`,
		50:  `{"type":"score","leaderboard_id":"imp-best","player_id":"p-0001"}`,
		60:  `{"type":"score","leaderboard_id":"imp-best","player_id":"p-0001","score":1.5}`,
		70:  `{"type":"score","leaderboard_id":"frozen","player_id":"p-0001","score":5}`,
		80:  `{"type":"score","leaderboard_id":"imp-best","player_id":"p-0001","score":5,"colour":"red"}`,
		90:  `["score"]`,
		100: `{"leaderboard_id":"imp-best","player_id":"p-0001","score":5}`,
	}
	var file []string
	var rejectedLines []int
	for i, l := range lines {
		if b, ok := bad[i]; ok {
			file = append(file, b)
			rejectedLines = append(rejectedLines, len(file))
		}
		file = append(file, l)
	}
	path := writeLines(t, "scores.jsonl", file)

	j := runImport(t, c, path)
	if j.Rejected != int64(len(bad)) || len(j.Examples) != len(bad) || j.Progress.Done != j.Progress.Total || j.Progress.Total == 0 {
		t.Fatalf("the import: %d rejected, progress %+v, examples %q; want %d rejected", j.Rejected, j.Progress, j.Examples, len(bad))
	}
	for i, n := range rejectedLines {
		if !strings.HasPrefix(j.Examples[i], fmt.Sprintf("rejected: line %d: ", n)) {
			t.Errorf("example %d is %q, want line %d", i, j.Examples[i], n)
		}
	}
	for _, want := range []string{`"trophy" is not one of`, "no leaderboard nowhere", "player_id:", "score: is required", "frozen is FROZEN", "colour", "type: is required"} {
		if !slices.ContainsFunc(j.Examples, func(e string) bool { return strings.Contains(e, want) }) {
			t.Errorf("no example says %q: %q", want, j.Examples)
		}
	}
	if err := s.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	sameBoards(t, c, "api-", "imp-")
	sameItems(t, s)

	again := runImport(t, c, path)
	if again.Rejected != j.Rejected {
		t.Fatalf("the second import rejected %d lines, the first %d", again.Rejected, j.Rejected)
	}
	if err := s.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	sameBoards(t, c, "api-", "imp-")
}

// sameItems asserts that the import wrote Scores and ScoreEvents items
// with exactly the attributes the submit path writes.
func sameItems(t *testing.T, s *stack.Stack) {
	t.Helper()
	for _, table := range []schema.Table{schema.Scores, schema.ScoreEvents} {
		shapes := map[string]map[string]bool{} // board prefix → attribute names
		for _, it := range testenv.TableItems(t, s.DB(), s.Tables().Of(table)) {
			names := []string{}
			for name := range it {
				names = append(names, name)
			}
			slices.Sort(names)
			pk := it[schema.AttrPK]
			for _, prefix := range []string{"api-", "imp-"} {
				if testenv.Mentions(pk, prefix) && !strings.Contains(encode(t, pk), "#meta") {
					if shapes[prefix] == nil {
						shapes[prefix] = map[string]bool{}
					}
					shapes[prefix][strings.Join(names, ",")] = true
				}
			}
		}
		if len(shapes["api-"]) == 0 || encode(t, shapes["api-"]) != encode(t, shapes["imp-"]) {
			t.Errorf("%s items: the API writes %v, the import %v", table.Name, shapes["api-"], shapes["imp-"])
		}
	}
}

// An import cut short again and again, mid-chunk and mid-write, each run
// resumed from the last checkpoint the runner would have kept, ends with
// the same scores, member counts and boards as the same file imported in
// one run.
func TestAnImportCutShortAndResumedEndsLikeOneWholeRun(t *testing.T) {
	s, c := importStack(t)
	d := s.Deps()
	for _, b := range boards {
		define(t, c, "whole-"+b.policy, b)
		define(t, c, "cut-"+b.policy, b)
	}
	n := testenv.Scale(4000, 4000)
	files := map[string]string{}
	now := s.Clock().Now()
	for _, prefix := range []string{"whole-", "cut-"} {
		var lines []string
		for i, sub := range submissions(2, prefix, 400, n, now) {
			if i%500 == 7 {
				lines = append(lines, `{"type":"score","leaderboard_id":"`+prefix+`best","player_id":"p-0001","score":"high"}`)
			}
			lines = append(lines, encode(t, sub))
		}
		files[prefix] = writeLines(t, prefix+"scores.jsonl", lines)
	}
	task := all.Importer(d)

	start := time.Now()
	whole := run(t, task, files["whole-"], func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) })

	t.Logf("%d lines imported in one run in %v", n, time.Since(start))
	r := rand.New(rand.NewPCG(3, 3))
	cuts := 0
	cut := run(t, task, files["cut-"], func() (context.Context, context.CancelFunc) {
		cuts++
		if cuts > 15 {
			return context.WithCancel(context.Background())
		}
		return context.WithTimeout(context.Background(), time.Duration(200+r.IntN(3000))*time.Millisecond)
	})
	if cut.Rejected != whole.Rejected || whole.Rejected != int64(n/500) {
		t.Fatalf("rejected: %d cut short, %d whole; want %d", cut.Rejected, whole.Rejected, n/500)
	}
	// Each chunk counted its members once and reached Redis, cut short or
	// not: the catch-up found nothing to recount or rebuild.
	for name, f := range map[string]jobs.Findings{"whole": whole, "cut": cut} {
		if f.Drifted != 0 {
			t.Fatalf("the %s run's catch-up found drift: %q", name, f.Examples)
		}
	}
	t.Logf("the cut run took %d runs", cuts)

	scores := leaderboardsbind.Scores(d)
	ctx := context.Background()
	for _, b := range boards {
		var got, want []string
		for prefix, into := range map[string]*[]string{"whole-": &want, "cut-": &got} {
			err := scores.Scan(ctx, prefix+b.policy, "all", func(page []leaderboards.Score) error {
				for _, sc := range page {
					_, line, _ := strings.Cut(strings.TrimPrefix(sc.LastMatchID, "import-"), "-")
					*into = append(*into, fmt.Sprintf("%s %d %d %s", sc.PlayerID, sc.Score, sc.ReachedAt.UnixMilli(), line))
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(*into)
		}
		if len(want) == 0 || !slices.Equal(got, want) {
			diffs := 0
			for i := range min(len(got), len(want)) {
				if got[i] != want[i] && diffs < 5 {
					diffs++
					t.Logf("cut %q, whole %q", got[i], want[i])
				}
			}
			t.Fatalf("%s: %d scores cut short, %d whole", b.policy, len(got), len(want))
		}
		for prefix, count := range map[string]int{"whole-": len(want), "cut-": len(got)} {
			members, err := scores.Members(ctx, prefix+b.policy, "all")
			if err != nil || members != int64(count) {
				t.Fatalf("%s%s counts %d members (%v), holds %d scores", prefix, b.policy, members, err, count)
			}
		}
	}
	if err := s.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	sameBoards(t, c, "whole-", "cut-")
}

// run imports the file at path with the import task as the job runner
// would: each run in a context from runCtx, continued from the cursor it
// returned when it stopped in time, or from its last checkpoint when it
// was cut short mid-call.
func run(t *testing.T, task interface {
	Run(context.Context, jobs.Spec, string, *jobs.Work) (string, bool, error)
}, path string, runCtx func() (context.Context, context.CancelFunc)) jobs.Findings {
	t.Helper()
	spec := jobs.Spec{Kind: jobs.Import, Source: "file://" + path}
	var findings jobs.Findings
	saved := ""
	for runs := 0; ; runs++ {
		if runs > 200 {
			t.Fatal("the import never ends")
		}
		ctx, cancel := runCtx()
		w := jobs.NewWork(func(_ context.Context, cursor string) error { saved = cursor; return nil })
		w.Findings = &findings
		next, done, err := task.Run(ctx, spec, saved, w)
		cancel()
		switch {
		case err != nil && ctx.Err() == nil:
			t.Fatalf("run %d: %v", runs, err)
		case err != nil:
			// Cut short mid-call: back to the checkpoint.
		case done:
			return findings
		default:
			saved = next
		}
	}
}

// Favorites and likes imported count like the same reactions made
// through the API (a user reacting twice counts once; a removed favorite
// comes back), bad lines are refused, and importing the file again
// changes no count.
func TestImportedReactionsCountLikeReactionsMadeThroughTheAPI(t *testing.T) {
	s, c := importStack(t)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(4, 4))
	games, posts := 12, 30
	var lines []string
	for range testenv.Scale(2000, 2000) {
		user := fmt.Sprintf("u-%03d", r.IntN(200))
		if r.IntN(3) == 0 {
			post := fmt.Sprintf("post-%02d", r.IntN(posts))
			c.Player(user, "PUT", "/v1/posts/api-"+post+"/like", nil).Expect(t, 200)
			lines = append(lines, encode(t, map[string]string{"type": "like", "user_id": user, "post_id": "imp-" + post}))
			continue
		}
		game := fmt.Sprintf("game-%02d", r.IntN(games))
		c.Player(user, "POST", "/v1/favorites/api-"+game, nil).Expect(t, 200)
		lines = append(lines, encode(t, map[string]string{"type": "favorite", "user_id": user, "game_id": "imp-" + game, "created_at": "2026-01-02T03:04:05Z"}))
	}
	// A favorite removed before the import comes back, as a new favorite
	// through the API would.
	c.Player("u-000", "DELETE", "/v1/favorites/imp-game-00", nil).Expect(t, 200)
	lines = append(lines,
		`{"type":"favorite","user_id":"u-000","post_id":"imp-post-00"}`,
		`{"type":"like","user_id":"u 0","post_id":"imp-post-00"}`,
		`{"type":"favorite","user_id":"u-000"}`,
	)
	path := writeLines(t, "reactions.jsonl", lines)
	j := runImport(t, c, path)
	if j.Rejected != 3 {
		t.Fatalf("rejected %d lines, want 3: %q", j.Rejected, j.Examples)
	}
	counts := func() map[string]int64 {
		if err := s.WaitIdle(ctx); err != nil {
			t.Fatal(err)
		}
		out := map[string]int64{}
		for _, prefix := range []string{"api-", "imp-"} {
			for g := range games {
				var body struct {
					Count int64 `json:"count"`
				}
				c.Player("reader", "GET", fmt.Sprintf("/v1/games/%sgame-%02d/favorites/count", prefix, g), nil).Expect(t, 200).JSON(t, &body)
				out[fmt.Sprintf("%sgame-%02d", prefix, g)] = body.Count
			}
			for p := range posts {
				var body struct {
					Count int64 `json:"count"`
				}
				c.Player("reader", "GET", fmt.Sprintf("/v1/posts/%spost-%02d/likes/count", prefix, p), nil).Expect(t, 200).JSON(t, &body)
				out[fmt.Sprintf("%spost-%02d", prefix, p)] = body.Count
			}
		}
		return out
	}
	check := func(got map[string]int64) {
		t.Helper()
		for key, n := range got {
			if strings.HasPrefix(key, "api-") && got["imp-"+strings.TrimPrefix(key, "api-")] != n {
				t.Errorf("%s counts %d, imp-%s %d", key, n, strings.TrimPrefix(key, "api-"), got["imp-"+strings.TrimPrefix(key, "api-")])
			}
		}
	}
	first := counts()
	check(first)
	runImport(t, c, path)
	if again := counts(); encode(t, again) != encode(t, first) {
		t.Fatalf("counts after the file again: %v, before %v", again, first)
	}
}

// Streaks imported read back as the file says: a live streak on the
// player's streak and on the streak board, ranked; one whose last day is
// long past as broken (0) and off the board; a bad line refused.
func TestImportedStreaksReadBackAndRank(t *testing.T) {
	s, c := importStack(t)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(5, 5))
	today := s.Clock().Now().UTC().Format("2006-01-02")
	long := s.Clock().Now().UTC().AddDate(0, 0, -9).Format("2006-01-02")
	want := map[string]int64{}
	var lines []string
	for u := range testenv.Scale(1500, 1500) {
		user := fmt.Sprintf("s-%04d", u)
		current := 1 + r.Int64N(40)
		date := today
		if u%5 == 0 {
			date = long
		}
		lines = append(lines, encode(t, map[string]any{"type": "streak", "user_id": user, "current_streak": current,
			"longest_streak": current + r.Int64N(5), "last_activity_date": date, "timezone": "UTC", "total_points": 10 * current}))
		if date == today {
			want[user] = current
		} else {
			want[user] = 0
		}
	}
	lines = append(lines, `{"type":"streak","user_id":"s-9999","current_streak":5,"longest_streak":2,"last_activity_date":"2026-01-01","timezone":"UTC"}`)
	path := writeLines(t, "streaks.jsonl", lines)
	check := func() {
		t.Helper()
		if err := s.WaitIdle(ctx); err != nil {
			t.Fatal(err)
		}
		for _, user := range []string{"s-0000", "s-0001", "s-0002", "s-0777", "s-1499"} {
			var st struct {
				Current int64 `json:"current_streak"`
			}
			c.Player(user, "GET", "/v1/users/"+user+"/streak", nil).Expect(t, 200).JSON(t, &st)
			if st.Current != want[user] {
				t.Errorf("%s's streak is %d, want %d", user, st.Current, want[user])
			}
		}
		var top struct {
			Entries []struct {
				User   string `json:"user_id"`
				Streak int64  `json:"current_streak"`
			} `json:"entries"`
		}
		c.Player("reader", "GET", "/v1/streaks/top?n=10", nil).Expect(t, 200).JSON(t, &top)
		users := slices.Collect(func(yield func(string) bool) {
			for u := range want {
				if !yield(u) {
					return
				}
			}
		})
		slices.SortFunc(users, func(a, b string) int {
			if want[a] != want[b] {
				return int(want[b] - want[a])
			}
			return strings.Compare(a, b)
		})
		if len(top.Entries) != 10 {
			t.Fatalf("the streak board: %+v", top.Entries)
		}
		for i, e := range top.Entries {
			if e.User != users[i] || e.Streak != want[users[i]] {
				t.Fatalf("streak board entry %d: %+v, want %s at %d", i, e, users[i], want[users[i]])
			}
		}
	}
	j := runImport(t, c, path)
	if j.Rejected != 1 || !strings.Contains(j.Examples[0], fmt.Sprintf("line %d: longest_streak", len(lines))) {
		t.Fatalf("rejected %d: %q", j.Rejected, j.Examples)
	}
	check()
	runImport(t, c, path)
	check()
}
