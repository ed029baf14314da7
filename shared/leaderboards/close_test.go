package leaderboards_test

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/infra/local/apitest"
	"github.com/rallyhq/rally/infra/local/stack"
	"github.com/rallyhq/rally/infra/local/testenv/await"
	"github.com/rallyhq/rally/shared/jobs"
	"github.com/rallyhq/rally/shared/leaderboards"
	lbbind "github.com/rallyhq/rally/shared/leaderboards/bind"
	"github.com/rallyhq/rally/shared/schema"
)

// closeDay is the day the close tests play: yesterday by the wall clock,
// so the stores' TTLs (counted on the wall clock) keep what it writes.
func closeDay() time.Time {
	return time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -1).Add(9 * time.Hour)
}

// playDay submits players' matches to a daily board on day (two rounds,
// many tied scores), concurrently, and returns the model of the day.
func playDay(t *testing.T, c *apitest.Client, b board, day time.Time, players int, seed uint64) *model {
	t.Helper()
	m := newModel(b)
	rng := rand.New(rand.NewPCG(seed, 1))
	type match struct {
		player, id string
		score      int64
		at         time.Time
	}
	n := 0
	for round := range 2 {
		var all []match
		for i := range players {
			all = append(all, match{fmt.Sprintf("p%03d", i), fmt.Sprintf("r%d", round), rng.Int64N(40), day.Add(time.Duration(n) * time.Second)})
			n++
		}
		for _, x := range all {
			m.submit(x.player, x.id, x.score, x.at)
		}
		// A round's matches are submitted concurrently, the next round's
		// after them (a player's two matches in the order they were played).
		var wg sync.WaitGroup
		sem := make(chan struct{}, 8)
		for _, x := range all {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				c.Service("POST", "/v1/leaderboards/"+b.ID+"/scores", map[string]any{
					"player_id": x.player, "match_id": x.id, "score": x.score, "occurred_at": x.at.Format(time.RFC3339Nano),
				}).Expect(t, 200)
			}()
		}
		wg.Wait()
	}
	return m
}

// awaitClose awaits the scheduled close of a board period, moving the
// clock on while it waits (the schedule, and the close's settling,
// follow the stack's clock).
func awaitClose(t *testing.T, s *stack.Stack, c *apitest.Client, board, period string) {
	t.Helper()
	id := leaderboards.CloseJobID(board, period)
	var j struct {
		State string `json:"state"`
		Error string `json:"error"`
	}
	await.Until(t, 2*time.Minute, "the close of "+board+" "+period, func() bool {
		r := c.Service("GET", "/v1/ops/jobs/"+id, nil)
		if r.Status == 404 {
			s.Clock().Advance(time.Second)
			return false
		}
		r.Expect(t, 200).JSON(t, &j)
		if j.State == "RUNNING" {
			s.Clock().Advance(time.Second)
		}
		return j.State != "RUNNING"
	})
	if j.State != "DONE" {
		t.Fatalf("close %s ended %s: %s", id, j.State, j.Error)
	}
}

// A day's board, closed by the schedule, reads from its archive exactly
// as a plain sort of what was submitted says, with Redis emptied: top,
// deep pages across archive pages, rank with neighbours at page edges,
// percentile, and rank among friends. A late match is refused and
// changes nothing; a close asked for again writes nothing.
func TestAClosedDayReadsFromItsArchive(t *testing.T) {
	s, c := startStack(t, "")
	day := closeDay()
	s.Clock().Set(day.Add(time.Hour))
	period := day.Format("2006-01-02")
	boards := []board{
		{ID: "sprint", Title: "Sprint", Policy: "best", Order: "desc", Reset: "daily", TieBreak: "earliest", MaxN: 100, Timezone: "UTC"},
		{ID: "golf", Title: "Golf", Policy: "best", Order: "asc", Reset: "daily", TieBreak: "shared", MaxN: 100, Timezone: "UTC"},
	}
	const players = 230 // three archive pages
	models := map[string]*model{}
	for i, b := range boards {
		define(t, c, b)
		models[b.ID] = playDay(t, c, b, day, players, uint64(i+1))
	}
	friends := []string{"p007", "p100", "p101", "p199", "p229"}
	c.Service("PUT", "/v1/players/p050/friends", map[string]any{"friend_ids": friends}).Expect(t, 200)
	if err := s.WaitIdle(context.Background()); err != nil {
		t.Fatal(err)
	}

	s.Clock().Set(day.Truncate(24*time.Hour).AddDate(0, 0, 1).Add(leaderboards.CloseAfter))
	for _, b := range boards {
		awaitClose(t, s, c, b.ID, period)
	}
	before := archiveItems(t, s)
	if len(before) == 0 {
		t.Fatal("the close wrote no archive")
	}
	// The JSON Lines an analyst reads hold the same final order.
	for _, b := range boards {
		if got, want := archiveLines(t, s, b.ID, period), standings(b, models[b.ID].scores, nil); !sameRanked(got, want) {
			t.Fatalf("%s: the JSON Lines hold %d lines %v, want %d %v", b.ID, len(got), got, len(want), want)
		}
	}
	// A match of the closed day arrives late: refused, nothing written.
	late := c.Service("POST", "/v1/leaderboards/sprint/scores", map[string]any{
		"player_id": "p001", "match_id": "late", "score": 1000, "occurred_at": day.Add(time.Hour).Format(time.RFC3339),
	})
	if late.Status != 409 || late.Map(t)["type"] != "urn:rally:problem:too-old" {
		t.Fatalf("a late match into a closed day: %d %s", late.Status, late.Body)
	}
	// An import's lines into the closed day are refused the same way:
	// nothing written; a line into today is applied.
	imported := filepath.Join(t.TempDir(), "late.jsonl")
	var lines []string
	for _, l := range []map[string]any{
		{"type": "score", "leaderboard_id": "sprint", "player_id": "p001", "score": 1_000_000, "reached_at": day.Add(2 * time.Hour).Format(time.RFC3339)},
		{"type": "score", "leaderboard_id": "sprint", "player_id": "newcomer", "score": 5, "reached_at": day.Add(3 * time.Hour).Format(time.RFC3339)},
		{"type": "score", "leaderboard_id": "sprint", "player_id": "newcomer", "score": 7},
	} {
		raw, _ := json.Marshal(l)
		lines = append(lines, string(raw))
	}
	if err := os.WriteFile(imported, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var imp struct {
		ID string `json:"job_id"`
	}
	c.Service("POST", "/v1/ops/jobs", map[string]any{"kind": "import", "source": "file://" + imported}).Expect(t, 202).JSON(t, &imp)
	var job struct {
		State    string   `json:"state"`
		Rejected int      `json:"rejected"`
		Examples []string `json:"examples"`
	}
	await.Until(t, time.Minute, "the import", func() bool {
		c.Service("GET", "/v1/ops/jobs/"+imp.ID, nil).Expect(t, 200).JSON(t, &job)
		return job.State != "RUNNING"
	})
	if job.State != "DONE" || job.Rejected != 2 || !strings.Contains(strings.Join(job.Examples, " "), "is closed") {
		t.Fatalf("an import into the closed day: %+v, want DONE with its 2 lines of the day refused as closed", job)
	}
	got, err := lbbind.Scores(s.Deps()).Get(context.Background(), "sprint", period, []string{"p001", "newcomer"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].PlayerID != "p001" || got[0].Score != models["sprint"].scores["p001"].score {
		t.Fatalf("the closed day's scores after the import: %+v, want p001's alone, unchanged (%d)", got, models["sprint"].scores["p001"].score)
	}
	if err := s.Deps().Redis.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}

	for _, b := range boards {
		want := standings(b, models[b.ID].scores, nil)
		if len(want) != players {
			t.Fatalf("%s: the model holds %d players", b.ID, len(want))
		}
		for _, from := range []int{1, 2, 95, 100, 101, 150, 200, 201, 225, 230, 231} {
			var top struct {
				Entries []ranked `json:"entries"`
				Total   int      `json:"total"`
				Period  string   `json:"period"`
			}
			c.Player("p001", "GET", fmt.Sprintf("/v1/leaderboards/%s/top?n=10&from_rank=%d&period=%s", b.ID, from, period), nil).Expect(t, 200).JSON(t, &top)
			exp := want[min(from-1, len(want)):min(from-1+10, len(want))]
			if top.Total != players || top.Period != period || !sameRanked(top.Entries, exp) {
				t.Fatalf("%s top from %d: total %d, entries %v, want %v", b.ID, from, top.Total, top.Entries, exp)
			}
		}
		for _, at := range []int{0, 3, 98, 99, 100, 101, 199, 200, 228, 229} {
			self := want[at]
			var got struct {
				Rank       int      `json:"rank"`
				Score      int64    `json:"score"`
				Total      int      `json:"total"`
				Percentile float64  `json:"percentile"`
				Neighbors  []ranked `json:"neighbors"`
			}
			c.Player(self.PlayerID, "GET", fmt.Sprintf("/v1/leaderboards/%s/players/%s/rank?k=4&period=%s", b.ID, self.PlayerID, period), nil).Expect(t, 200).JSON(t, &got)
			exp := want[max(0, at-4):min(len(want), at+5)]
			behind := float64(players - self.Rank)
			pct := float64(int64(behind/float64(players)*10000+0.5)) / 100
			if got.Rank != self.Rank || got.Score != self.Score || got.Total != players || got.Percentile != pct || !sameRanked(got.Neighbors, exp) {
				t.Fatalf("%s rank of %s: %+v, want rank %d score %d percentile %v neighbours %v", b.ID, self.PlayerID, got, self.Rank, self.Score, pct, exp)
			}
		}
		var fr struct {
			FriendsRank  int      `json:"friends_rank"`
			FriendsTotal int      `json:"friends_total"`
			Neighbors    []ranked `json:"neighbors"`
		}
		c.Player("p050", "GET", fmt.Sprintf("/v1/leaderboards/%s/players/p050/friends-rank?k=10&period=%s", b.ID, period), nil).Expect(t, 200).JSON(t, &fr)
		among := standings(b, models[b.ID].scores, append([]string{"p050"}, friends...))
		if fr.FriendsTotal != len(among) || !sameRanked(fr.Neighbors, among) {
			t.Fatalf("%s friends rank: %+v, want %v", b.ID, fr, among)
		}
	}

	// A player erased after the close (the one who opens the second
	// archive page) is struck from the archive: the others keep the ranks
	// they closed with, and the page is still found from its new first.
	erased := standings(boards[0], models["sprint"].scores, nil)[100].PlayerID
	c.Service("DELETE", "/v1/ops/users/"+erased, nil).Expect(t, 202)
	await.Until(t, time.Minute, "the erasure of "+erased, func() bool {
		var st struct {
			Status string `json:"status"`
		}
		c.Service("GET", "/v1/ops/users/"+erased+"/erasure", nil).Expect(t, 200).JSON(t, &st)
		if st.Status != "COMPLETED" {
			if err := s.WaitIdle(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		return st.Status == "COMPLETED"
	})
	for _, raw := range archiveItems(t, s) {
		var it map[string]any
		if err := attributevalue.UnmarshalMap(raw, &it); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(fmt.Sprint(it), erased) {
			t.Fatalf("the archive still names %s after their erasure: %v", erased, it)
		}
	}
	want := standings(boards[0], models["sprint"].scores, nil)
	if got, exp := archiveLines(t, s, "sprint", period), append(want[:100:100], want[101:]...); !sameRanked(got, exp) {
		t.Fatalf("after the erasure the JSON Lines hold %d lines, want the %d others with their ranks", len(got), len(exp))
	}
	var top struct {
		Entries []ranked `json:"entries"`
	}
	c.Player("p001", "GET", "/v1/leaderboards/sprint/top?n=3&from_rank=101&period="+period, nil).Expect(t, 200).JSON(t, &top)
	if exp := want[101:104]; !sameRanked(top.Entries, exp) {
		t.Fatalf("after the erasure, from rank 101: %v, want %v", top.Entries, exp)
	}
	var next struct {
		Rank      int      `json:"rank"`
		Neighbors []ranked `json:"neighbors"`
	}
	c.Player("p001", "GET", fmt.Sprintf("/v1/leaderboards/sprint/players/%s/rank?k=2&period=%s", want[101].PlayerID, period), nil).Expect(t, 200).JSON(t, &next)
	if exp := []ranked{want[98], want[99], want[101], want[102], want[103]}; next.Rank != want[101].Rank || !sameRanked(next.Neighbors, exp) {
		t.Fatalf("after the erasure, the page's new first: %+v, want rank %d neighbours %v", next, want[101].Rank, exp)
	}
	c.Player(erased, "GET", "/v1/leaderboards/sprint/players/"+erased+"/rank?period="+period, nil).Expect(t, 404)
	before = archiveItems(t, s)

	// Asked for again, by an operator: done, and nothing written.
	var j struct {
		ID string `json:"job_id"`
	}
	c.Service("POST", "/v1/ops/jobs", map[string]any{"kind": "close", "target": "leaderboard", "id": "sprint", "period": period}).Expect(t, 202).JSON(t, &j)
	await.Until(t, time.Minute, "the repeated close", func() bool {
		return c.Service("GET", "/v1/ops/jobs/"+j.ID, nil).Expect(t, 200).Map(t)["state"] == "DONE"
	})
	if after := archiveItems(t, s); !reflect.DeepEqual(before, after) {
		t.Fatalf("a repeated close changed the archive: %d items before, %d after", len(before), len(after))
	}
}

// sameRanked compares entries by rank, player and score.
func sameRanked(got, want []ranked) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i].Rank != want[i].Rank || got[i].PlayerID != want[i].PlayerID || got[i].Score != want[i].Score {
			return false
		}
	}
	return true
}

// archiveItems reads the whole Archives table.
func archiveItems(t *testing.T, s *stack.Stack) map[string]map[string]types.AttributeValue {
	t.Helper()
	d := s.Deps()
	out := map[string]map[string]types.AttributeValue{}
	p := dynamodb.NewScanPaginator(d.DB, &dynamodb.ScanInput{TableName: aws.String(d.Table(schema.Archives)), ConsistentRead: aws.Bool(true)})
	for p.HasMorePages() {
		page, err := p.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range page.Items {
			out[it[schema.AttrPK].(*types.AttributeValueMemberS).Value+"|"+it[schema.AttrSK].(*types.AttributeValueMemberS).Value] = it
		}
	}
	return out
}

// archiveLines reads every part of a board period's gzip JSON Lines, in
// order, from the local stack's documents directory.
func archiveLines(t *testing.T, s *stack.Stack, board, period string) []ranked {
	t.Helper()
	dir := filepath.Join(s.Deps().Config.ExportsDir, filepath.FromSlash(leaderboards.ArchivePrefix(board, period)))
	parts, err := filepath.Glob(filepath.Join(dir, "part-*.jsonl.gz"))
	if err != nil || len(parts) == 0 {
		t.Fatalf("no JSON Lines parts in %s: %v", dir, err)
	}
	sort.Strings(parts)
	var out []ranked
	for _, name := range parts {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		zr, err := gzip.NewReader(f)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		dec := json.NewDecoder(zr)
		for {
			var l ranked
			if err := dec.Decode(&l); err == io.EOF {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			out = append(out, l)
		}
		f.Close()
	}
	return out
}

// cutArchive is an archive whose page writes end the run after a number
// of them, as an invocation's deadline would.
type cutArchive struct {
	leaderboards.Archive
	after  int
	cancel context.CancelFunc
}

func (a *cutArchive) PutPages(ctx context.Context, d leaderboards.Definition, period string, first int, pages [][]leaderboards.Entry) error {
	err := a.Archive.PutPages(ctx, d, period, first, pages)
	if a.after--; a.after == 0 {
		a.cancel()
	}
	return err
}

type memDocs struct {
	mu   sync.Mutex
	objs map[string]string
}

func (m *memDocs) Put(_ context.Context, key string, data []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.objs[key] = string(data)
	return nil
}

// A close cut short after any chunk and resumed from where it stopped
// writes the same archive, and the same JSON Lines, as one run through.
func TestACloseCutShortAnywhereResumesToTheSameArchive(t *testing.T) {
	s, c := startStack(t, "")
	day := closeDay()
	s.Clock().Set(day.Add(time.Hour))
	period := day.Format("2006-01-02")
	b := board{ID: "sprint", Title: "Sprint", Policy: "best", Order: "desc", Reset: "daily", TieBreak: "shared", MaxN: 100, Timezone: "UTC"}
	define(t, c, b)
	m := playDay(t, c, b, day, 450, 7)
	if err := s.WaitIdle(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Past the day's end, before the schedule would start its close.
	s.Clock().Set(day.Truncate(24*time.Hour).AddDate(0, 0, 1).Add(time.Second))
	spec := jobs.Spec{Kind: jobs.Close, Target: jobs.Leaderboard, ID: b.ID, Period: period}
	d := s.Deps()
	// close runs the task to its end, cut short after cut chunks (0:
	// never), and returns the archive and documents it left.
	close := func(cut int) (map[string]map[string]types.AttributeValue, map[string]string) {
		clearArchive(t, s)
		docs := &memDocs{objs: map[string]string{}}
		closer := lbbind.Closer(d, docs)
		closer.Chunk = leaderboards.ArchivePage
		cursor, runs := "", 0
		cutter := &cutArchive{Archive: lbbind.Archives(d), after: cut}
		closer.Archive = cutter
		for {
			ctx, cancel := context.WithCancel(context.Background())
			cutter.cancel = cancel
			run := closer.Tasks()[jobs.Key{Kind: jobs.Close, Target: jobs.Leaderboard}]
			next, done, err := run.Run(ctx, spec, cursor, jobs.NewWork(func(context.Context, string) error { return nil }))
			cancel()
			if err != nil && ctx.Err() == nil {
				t.Fatalf("close run %d: %v", runs, err)
			}
			runs++
			if done {
				return archiveItems(t, s), docs.objs
			}
			if next != "" {
				cursor = next
			}
			// The run slept until the index settled: the clock moves on.
			s.Clock().Advance(leaderboards.IndexSettle)
		}
	}
	wantItems, wantDocs := close(0)
	if len(wantDocs) != 5 || len(wantItems) != 1+5+5 {
		t.Fatalf("a run through wrote %d items and %d parts, want a head, 5 pages and pointers, and 5 parts", len(wantItems), len(wantDocs))
	}
	// The pages hold the model's standings, ties shared across chunks.
	var archived []ranked
	for p := range 5 {
		page, err := lbbind.Archives(d).Page(context.Background(), b.ID, period, p)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page {
			archived = append(archived, ranked{e.Rank, e.PlayerID, e.Score})
		}
	}
	if want := standings(b, m.scores, nil); !sameRanked(archived, want) {
		t.Fatalf("the archive's pages differ from the standings: %v\nwant %v", archived, want)
	}
	for cut := 1; cut <= 5; cut++ {
		items, docs := close(cut)
		if !reflect.DeepEqual(items, wantItems) || !reflect.DeepEqual(docs, wantDocs) {
			t.Fatalf("cut short after chunk %d: the archive differs from one run through", cut)
		}
	}
}

// clearArchive deletes every archive item, so a close runs again from
// the start (its mark stays: the first time it was set).
func clearArchive(t *testing.T, s *stack.Stack) {
	t.Helper()
	d := s.Deps()
	for _, it := range archiveItems(t, s) {
		key := map[string]types.AttributeValue{schema.AttrPK: it[schema.AttrPK], schema.AttrSK: it[schema.AttrSK]}
		if _, err := d.DB.DeleteItem(context.Background(), &dynamodb.DeleteItemInput{TableName: aws.String(d.Table(schema.Archives)), Key: key}); err != nil {
			t.Fatal(err)
		}
	}
}
