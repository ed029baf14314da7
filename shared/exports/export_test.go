package exports_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"reflect"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/infra/local/apitest"
	"github.com/rallyhq/rally/infra/local/stack"
	"github.com/rallyhq/rally/infra/local/stacktest"
	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/infra/local/testenv/await"
	"github.com/rallyhq/rally/shared/app"
	"github.com/rallyhq/rally/shared/app/all"
	"github.com/rallyhq/rally/shared/config"
	"github.com/rallyhq/rally/shared/exports"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
	"github.com/rallyhq/rally/shared/streams"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// world is a local stack whose export processor writes at most perRun
// items a run (0: the default bound) and counts the chunks it writes.
type world struct {
	s      *stack.Stack
	c      *apitest.Client
	perRun atomic.Int64
	chunks atomic.Int64
	// erasures gates the erasure processor: closed, it acknowledges its
	// records without acting, so an erasure stays pending.
	erasures atomic.Bool
}

// chunkCounter counts the chunks the export processor writes.
type chunkCounter struct {
	exports.Documents
	n *atomic.Int64
}

func (c chunkCounter) Put(ctx context.Context, key string, data []byte) error {
	if strings.Contains(key, "/chunk-") {
		c.n.Add(1)
	}
	return c.Documents.Put(ctx, key, data)
}

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{}
	w.erasures.Store(true)
	var exporter, eraser atomic.Pointer[streams.Handler]
	gate := func(h *atomic.Pointer[streams.Handler], open func() bool) streams.Handler {
		return func(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
			if p := h.Load(); p != nil && open() {
				return (*p)(ctx, ev)
			}
			return events.DynamoDBEventResponse{}, nil
		}
	}
	w.s = stacktest.Start(t, stack.Options{
		// First-seen times are recorded (the account part), and no budget
		// stands in the way of the generated writes.
		Configure: func(c *config.Config) {
			c.YoungAccountAge = time.Nanosecond
			for _, b := range routes.PlayerBudgets() {
				c.Budgets[b.Name] = 0
			}
		},
		Processors: map[string]streams.Handler{
			routes.ExportProcessor.Function:  gate(&exporter, func() bool { return true }),
			routes.ErasureProcessor.Function: gate(&eraser, w.erasures.Load),
		},
	})
	d := w.s.Deps()
	base := all.ExportJob(d)
	base.Documents = chunkCounter{Documents: base.Documents, n: &w.chunks}
	process := func(ctx context.Context, recs []events.DynamoDBEventRecord) error {
		job := *base
		job.PerRun = int(w.perRun.Load())
		return job.Process(ctx, recs)
	}
	h := d.Stream(app.Feature{Name: routes.Privacy, Bind: func(*app.Deps) app.Handlers {
		return app.Handlers{Processors: map[string]streams.BatchFunc{routes.ExportProcessor.Function: process}}
	}}, routes.ExportProcessor)
	exporter.Store(&h)
	er := d.Stream(all.Erasure, routes.ErasureProcessor)
	eraser.Store(&er)
	w.c = apitest.New(t, w.s)
	// Items with a TTL are dated in the coming year: DynamoDB Local
	// expires them against the wall clock. The clock stands still between
	// the test's moves, so the model knows every time a handler stamps.
	w.s.Clock().Stop()
	w.s.Clock().Set(time.Date(time.Now().Year()+1, 3, 1, 8, 0, 0, 0, time.UTC))
	return w
}

func (w *world) idle(t *testing.T) {
	t.Helper()
	if err := w.s.WaitIdle(context.Background()); err != nil {
		t.Fatal(err)
	}
}

type exportBody struct {
	ExportID    string     `json:"export_id"`
	Status      string     `json:"status"`
	RequestedAt time.Time  `json:"requested_at"`
	ReadyAt     *time.Time `json:"ready_at"`
	URL         *string    `json:"url"`
	ExpiresAt   *time.Time `json:"expires_at"`
}

// export asks for an export of user (as the user, or as a service when as
// is ""), waits until it is READY and returns its status.
func (w *world) export(t *testing.T, as, user string) exportBody {
	t.Helper()
	var b exportBody
	if as == "" {
		w.c.Service("POST", "/v1/ops/users/"+user+"/export", nil).Expect(t, 202).JSON(t, &b)
	} else {
		w.c.Player(as, "POST", "/v1/users/"+user+"/export", nil).Expect(t, 202).JSON(t, &b)
	}
	if b.Status != "PENDING" || !strings.HasPrefix(b.ExportID, "ex_") || b.URL != nil {
		t.Fatalf("export answer %+v", b)
	}
	await.Success(t, time.Minute, "export "+b.ExportID+" ready", func() error {
		b = w.status(t, user, b.ExportID)
		if b.Status == "READY" {
			return nil
		}
		w.idle(t)
		return fmt.Errorf("still %s", b.Status)
	})
	return b
}

func (w *world) status(t *testing.T, user, id string) exportBody {
	t.Helper()
	var b exportBody
	w.c.Service("GET", "/v1/ops/users/"+user+"/exports/"+id, nil).Expect(t, 200).JSON(t, &b)
	return b
}

// fetch reads a link.
func fetch(t *testing.T, url string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, body
}

// document reads a READY export's document through its link.
func document(t *testing.T, b exportBody) map[string]any {
	t.Helper()
	if b.URL == nil || b.ExpiresAt == nil || b.ReadyAt == nil {
		t.Fatalf("a READY export without its link: %+v", b)
	}
	code, body := fetch(t, *b.URL)
	if code != 200 {
		t.Fatalf("GET %s: %d %s", *b.URL, code, body)
	}
	var doc map[string]any
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatalf("the document is not JSON: %v\n%s", err, body)
	}
	return doc
}

// The model: what a user did, kept from the requests themselves, in the
// document's shape.

type reaction struct {
	GameID    string    `json:"game_id,omitempty"`
	PostID    string    `json:"post_id,omitempty"`
	State     string    `json:"state"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

type score struct {
	LeaderboardID string    `json:"leaderboard_id"`
	Period        string    `json:"period"`
	Score         int64     `json:"score"`
	ReachedAt     time.Time `json:"reached_at"`
	LastMatchID   string    `json:"last_match_id"`
	UpdatedAt     time.Time `json:"updated_at"`
}

type match struct {
	LeaderboardID string    `json:"leaderboard_id"`
	MatchID       string    `json:"match_id"`
	Period        string    `json:"period"`
	Score         int64     `json:"score"`
	OccurredAt    time.Time `json:"occurred_at"`
	RecordedAt    time.Time `json:"recorded_at"`
	ScoreAfter    int64     `json:"score_after"`
}

type activity struct {
	EventID    string    `json:"event_id"`
	EventType  string    `json:"event_type"`
	Source     string    `json:"source"`
	OccurredAt time.Time `json:"occurred_at"`
	Date       string    `json:"date"`
	Points     int64     `json:"points"`
	Timezone   string    `json:"timezone"`
	Streak     int64     `json:"streak"`
	Region     string    `json:"region,omitempty"`
}

type day struct {
	Date   string           `json:"date"`
	Points int64            `json:"points"`
	Events int64            `json:"events"`
	ByType map[string]int64 `json:"by_type"`
}

type streak struct {
	CurrentStreak    int64       `json:"current_streak"`
	LongestStreak    int64       `json:"longest_streak"`
	LastActivityDate string      `json:"last_activity_date"`
	Timezone         string      `json:"timezone"`
	Region           string      `json:"region,omitempty"`
	TotalPoints      int64       `json:"total_points"`
	TimezoneChanges  []time.Time `json:"timezone_changes"`
	TimezoneRefused  int64       `json:"timezone_changes_refused"`
	UpdatedAt        time.Time   `json:"updated_at"`
}

type profile struct {
	DisplayName string    `json:"display_name"`
	AvatarURL   string    `json:"avatar_url"`
	Region      string    `json:"region"`
	UpdatedAt   time.Time `json:"updated_at"`
}

type model struct {
	user      string
	firstSeen time.Time
	profile   *profile
	// playerWrite is the last write of the user's Players item.
	playerWrite time.Time
	friends     []string
	favorites   map[string]*reaction
	likes       map[string]*reaction
	scores      map[string]*score // board#period
	matches     []match
	activity    []activity
	days        map[string]*day
	streak      *streak
}

func newModel(user string) *model {
	return &model{user: user, friends: []string{}, favorites: map[string]*reaction{}, likes: map[string]*reaction{},
		scores: map[string]*score{}, days: map[string]*day{}}
}

// points is the points table and daily caps of DESIGN (per event type).
var points = map[string]struct{ each, cap int64 }{
	"DAILY_OPEN": {10, 10}, "MATCH_PLAYED": {5, 50}, "MATCH_WON": {20, 200}, "LEVEL_COMPLETED": {15, 150}, "SOCIAL_SHARE": {25, 50},
}

func addDays(date string, n int) string {
	d, _ := time.Parse("2006-01-02", date)
	return d.AddDate(0, 0, n).Format("2006-01-02")
}

// document is the export the model expects, as the JSON the document
// holds (a generic value, compared after a round trip).
func (m *model) document(t *testing.T) map[string]any {
	t.Helper()
	sorted := func(set map[string]*reaction) []reaction {
		keys := make([]string, 0, len(set))
		for k := range set {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		out := []reaction{}
		for _, k := range keys {
			out = append(out, *set[k])
		}
		return out
	}
	var account any
	if !m.firstSeen.IsZero() {
		account = map[string]any{"first_seen": m.firstSeen}
	}
	var prof any
	if m.profile != nil {
		p := *m.profile
		p.UpdatedAt = m.playerWrite
		prof = p
	}
	keys := make([]string, 0, len(m.scores))
	for k := range m.scores {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	scores := []score{}
	for _, k := range keys {
		scores = append(scores, *m.scores[k])
	}
	matches := append([]match{}, m.matches...)
	sort.Slice(matches, func(i, j int) bool {
		if matches[i].LeaderboardID != matches[j].LeaderboardID {
			return matches[i].LeaderboardID < matches[j].LeaderboardID
		}
		return matches[i].MatchID < matches[j].MatchID
	})
	dates := make([]string, 0, len(m.days))
	for d := range m.days {
		dates = append(dates, d)
	}
	sort.Strings(dates)
	days := []day{}
	for _, d := range dates {
		days = append(days, *m.days[d])
	}
	var st any
	if m.streak != nil {
		st = *m.streak
	}
	want := map[string]any{
		"account": account, "profile": prof, "friends": m.friends,
		"favorites": sorted(m.favorites), "likes": sorted(m.likes),
		"scores": scores, "score_events": matches,
		"streak": st, "activity": append([]activity{}, m.activity...), "points": days,
		"erasure": nil,
	}
	return roundTrip(t, want)
}

func roundTrip(t *testing.T, v any) map[string]any {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// compare checks a document against the model's, part by part, besides
// the header (user, export, format).
func compare(t *testing.T, what string, got, want map[string]any, user, id string) {
	t.Helper()
	if got["user_id"] != user || got["export_id"] != id || got["format_version"] != float64(exports.FormatVersion) {
		t.Errorf("%s: header user %v export %v format %v, want %s %s %d", what, got["user_id"], got["export_id"], got["format_version"], user, id, exports.FormatVersion)
	}
	for k := range got {
		if _, ok := want[k]; !ok && k != "user_id" && k != "export_id" && k != "requested_at" && k != "format_version" {
			t.Errorf("%s: the document has a part %q the model does not know", what, k)
		}
	}
	for k, v := range want {
		if !reflect.DeepEqual(got[k], v) {
			g, _ := json.MarshalIndent(got[k], "", " ")
			w, _ := json.MarshalIndent(v, "", " ")
			t.Errorf("%s: part %q\n got %s\nwant %s", what, k, g, w)
		}
	}
}

// actor makes random writes for a user and keeps the model of them.
type actor struct {
	w   *world
	rng *rand.Rand
	m   *model
	// others' ids in friend lists, games and posts the user may touch
	games, posts, friends []string
	match                 int
	keys                  int
}

// now is the stack's clock, as the handlers saw it.
func (a *actor) now() time.Time { return a.w.s.Clock().Now().UTC().Truncate(time.Millisecond) }

// seen records that a player route succeeded for the user.
func (a *actor) seen() {
	if a.m.firstSeen.IsZero() {
		a.m.firstSeen = a.now()
	}
}

func (a *actor) react(t *testing.T, set map[string]*reaction, kind, target string, on bool) {
	t.Helper()
	c, user := a.w.c, a.m.user
	switch {
	case kind == "favorite" && on:
		c.Player(user, "POST", "/v1/favorites/"+target, nil).Expect(t, 200)
	case kind == "favorite":
		c.Player(user, "DELETE", "/v1/favorites/"+target, nil).Expect(t, 200)
	case on:
		c.Player(user, "PUT", "/v1/posts/"+target+"/like", nil).Expect(t, 200)
	default:
		c.Player(user, "DELETE", "/v1/posts/"+target+"/like", nil).Expect(t, 200)
	}
	a.seen()
	r, now := set[target], a.now()
	switch {
	case on && (r == nil || r.State == "REMOVED"):
		r = &reaction{State: "ACTIVE", CreatedAt: now, UpdatedAt: now}
		if kind == "favorite" {
			r.GameID = target
		} else {
			r.PostID = target
		}
		set[target] = r
	case !on && r != nil && r.State == "ACTIVE":
		r.State, r.UpdatedAt = "REMOVED", now
	}
}

// boards: cup adds every match's points (all time), sprint keeps the day's
// best.
func (a *actor) submit(t *testing.T, board string, points int64) {
	t.Helper()
	a.match++
	id := fmt.Sprintf("%s-m%03d", a.m.user, a.match)
	a.w.c.Service("POST", "/v1/leaderboards/"+board+"/scores", map[string]any{"player_id": a.m.user, "match_id": id, "score": points}).Expect(t, 200)
	now := a.now()
	period := "all"
	if board == "sprint" {
		period = now.Format("2006-01-02")
	}
	cur := a.m.scores[board+"#"+period]
	switch {
	case cur == nil:
		cur = &score{LeaderboardID: board, Period: period, Score: points, ReachedAt: now, LastMatchID: id, UpdatedAt: now}
		a.m.scores[board+"#"+period] = cur
	case board == "cup":
		cur.Score += points
		cur.ReachedAt, cur.LastMatchID, cur.UpdatedAt = now, id, now
	case points > cur.Score:
		cur.Score, cur.ReachedAt, cur.LastMatchID, cur.UpdatedAt = points, now, id, now
	}
	a.m.matches = append(a.m.matches, match{
		LeaderboardID: board, MatchID: id, Period: period, Score: points, OccurredAt: now, RecordedAt: now, ScoreAfter: cur.Score,
	})
}

func (a *actor) act(t *testing.T, eventType string) {
	t.Helper()
	a.keys++
	key := fmt.Sprintf("%s-k%03d", a.m.user, a.keys)
	source := []string{"mobile_app", "web", "console"}[a.rng.IntN(3)]
	var resp apitest.Response
	if eventType == "MATCH_PLAYED" || eventType == "MATCH_WON" {
		resp = a.w.c.Do(apitest.Call{Method: "POST", Path: "/v1/ops/activity", Service: true, Header: map[string]string{"Idempotency-Key": key},
			Body: map[string]any{"user_id": a.m.user, "event_type": eventType, "source": source}}).Expect(t, 200)
	} else {
		resp = a.w.c.Do(apitest.Call{Method: "POST", Path: "/v1/activity", As: a.m.user, Header: map[string]string{"Idempotency-Key": key},
			Body: map[string]any{"event_type": eventType, "source": source}}).Expect(t, 200)
		a.seen()
	}
	var r struct {
		EventID string `json:"event_id"`
	}
	resp.JSON(t, &r)
	now := a.now()
	date := now.Format("2006-01-02")
	d := a.m.days[date]
	if d == nil {
		d = &day{Date: date, ByType: map[string]int64{}}
		a.m.days[date] = d
	}
	p := points[eventType]
	got := max(0, min(p.each, p.cap-d.ByType[eventType]))
	d.Points += got
	d.Events++
	d.ByType[eventType] += got
	st := a.m.streak
	if st == nil {
		st = &streak{TimezoneChanges: []time.Time{}}
		a.m.streak = st
	}
	switch {
	case st.LastActivityDate == "" || date > addDays(st.LastActivityDate, 1):
		st.CurrentStreak, st.LastActivityDate = 1, date
	case date == addDays(st.LastActivityDate, 1):
		st.CurrentStreak, st.LastActivityDate = st.CurrentStreak+1, date
	}
	st.LongestStreak = max(st.LongestStreak, st.CurrentStreak)
	st.TotalPoints += got
	st.UpdatedAt = now
	region := ""
	if a.m.profile != nil {
		region = a.m.profile.Region
	}
	st.Region = region
	a.m.activity = append(a.m.activity, activity{
		EventID: r.EventID, EventType: eventType, Source: source, OccurredAt: now, Date: date, Points: got,
		Streak: st.CurrentStreak, Region: region,
	})
}

func (a *actor) setProfile(t *testing.T) {
	t.Helper()
	name := fmt.Sprintf("%s the %d", strings.ToUpper(a.m.user[:1])+a.m.user[1:], a.rng.IntN(1000))
	avatar := fmt.Sprintf("https://cdn.example.com/%s/%d.png", a.m.user, a.rng.IntN(1000))
	a.w.c.Service("PUT", "/v1/players/"+a.m.user+"/profile", map[string]any{"display_name": name, "avatar_url": avatar, "region": "eu"}).Expect(t, 200)
	a.m.profile = &profile{DisplayName: name, AvatarURL: avatar, Region: "eu"}
	a.m.playerWrite = a.now()
}

func (a *actor) setFriends(t *testing.T) {
	t.Helper()
	var friends []string
	for _, f := range a.friends {
		if a.rng.IntN(2) == 0 {
			friends = append(friends, f)
		}
	}
	a.w.c.Service("PUT", "/v1/players/"+a.m.user+"/friends", map[string]any{"friend_ids": append([]string{}, friends...)}).Expect(t, 200)
	if friends == nil {
		friends = []string{}
	}
	a.m.friends = friends
	a.m.playerWrite = a.now()
}

// step makes one random write.
func (a *actor) step(t *testing.T) {
	t.Helper()
	switch n := a.rng.IntN(20); {
	case n < 5:
		a.react(t, a.m.favorites, "favorite", a.games[a.rng.IntN(len(a.games))], a.rng.IntN(3) > 0)
	case n < 8:
		a.react(t, a.m.likes, "like", a.posts[a.rng.IntN(len(a.posts))], a.rng.IntN(3) > 0)
	case n < 12:
		a.submit(t, []string{"cup", "sprint"}[a.rng.IntN(2)], int64(1+a.rng.IntN(100)))
	case n < 17:
		a.act(t, []string{"DAILY_OPEN", "LEVEL_COMPLETED", "SOCIAL_SHARE", "MATCH_PLAYED", "MATCH_WON"}[a.rng.IntN(5)])
	case n < 18:
		a.setProfile(t)
	default:
		a.setFriends(t)
	}
}

// TestAnExportHoldsExactlyWhatTheUserDid generates random writes by a user
// (favorites and unfavorites, likes and unlikes, scores on an all-time and
// a daily board over several days, activity of every type over several
// days, profile and friend list) interleaved with another user's, keeps a
// plain model of the user's own, and checks the export against it, part by
// part. The same export written a few items a run (across many
// invocations) and in one run are the same document. The link reads the
// document until it expires; another player may neither ask for nor read
// the user's exports.
func TestAnExportHoldsExactlyWhatTheUserDid(t *testing.T) {
	w := newWorld(t)
	c := w.c
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	c.Service("PUT", "/v1/leaderboards/cup", map[string]any{"title": "Cup", "policy": "increment"}).Expect(t, 201)
	c.Service("PUT", "/v1/leaderboards/sprint", map[string]any{"title": "Sprint", "policy": "best", "reset": "daily"}).Expect(t, 201)
	c.Service("PUT", "/v1/leaderboards/quiet", map[string]any{"title": "Quiet", "policy": "best"}).Expect(t, 201)
	ada := &actor{w: w, rng: rand.New(rand.NewPCG(uint64(seed), 1)), m: newModel("ada"),
		games: []string{"g1", "g2", "g3", "g4", "g5"}, posts: []string{"p1", "p2", "p3"}, friends: []string{"cyd", "dan", "eve"}}
	// The other user touches what ada does and things of her own (named
	// bea-only): none of it may reach ada's export.
	bea := &actor{w: w, rng: rand.New(rand.NewPCG(uint64(seed), 2)), m: newModel("bea"),
		games: []string{"g1", "g2", "bea-only-g"}, posts: []string{"p1", "bea-only-p"}, friends: []string{"ada", "cyd"}}
	ada.setProfile(t)
	for range 4 { // days
		for range 15 {
			actor := ada
			if bea.rng.IntN(3) == 0 {
				actor = bea
			}
			actor.step(t)
			w.s.Clock().Advance(time.Duration(1+ada.rng.IntN(90)) * time.Second)
		}
		w.s.Clock().Advance(time.Duration(20+ada.rng.IntN(8)) * time.Hour)
	}
	// Enough favorites that a page of them spans runs.
	for i := range 30 {
		ada.react(t, ada.m.favorites, "favorite", fmt.Sprintf("bulk-%02d", i), true)
		w.s.Clock().Advance(time.Second)
	}
	w.idle(t)
	want := ada.m.document(t)

	// A few items a run: the export spans many invocations.
	w.perRun.Store(7)
	w.chunks.Store(0)
	small := w.export(t, "ada", "ada")
	smallChunks := w.chunks.Load()
	smallDoc := document(t, small)
	compare(t, "the export written 7 items a run", smallDoc, want, "ada", small.ExportID)
	items := 0
	for _, v := range want {
		if l, ok := v.([]any); ok {
			items += len(l)
		}
	}
	if smallChunks < int64(items/7) {
		t.Errorf("the export of %d items, 7 a run, was written in %d chunks", items, smallChunks)
	}

	// Asked by an operator, in one run.
	w.perRun.Store(0)
	w.chunks.Store(0)
	w.s.Clock().Advance(time.Minute)
	big := w.export(t, "", "ada")
	if n := w.chunks.Load(); n != 1 {
		t.Errorf("the export in one run was written in %d chunks, want 1", n)
	}
	bigDoc := document(t, big)
	compare(t, "the export written in one run", bigDoc, want, "ada", big.ExportID)
	for _, doc := range []map[string]any{smallDoc, bigDoc} {
		delete(doc, "export_id")
		delete(doc, "requested_at")
	}
	if !reflect.DeepEqual(smallDoc, bigDoc) {
		t.Error("the export written across runs differs from the one written in one")
	}
	t.Logf("%d items, %d chunks across runs", items, smallChunks)

	// The other user's own data never appears.
	_, raw := fetch(t, *big.URL)
	if strings.Contains(string(raw), "bea") {
		t.Errorf("ada's export mentions bea: %s", raw)
	}

	// Another player may neither ask for ada's export nor read it; an id
	// of ada's export is nobody else's.
	c.Player("bea", "POST", "/v1/users/ada/export", nil).Expect(t, 403)
	c.Player("bea", "GET", "/v1/users/ada/exports/"+big.ExportID, nil).Expect(t, 403)
	c.Player("bea", "GET", "/v1/users/bea/exports/"+big.ExportID, nil).Expect(t, 404)
	c.Player("ada", "GET", "/v1/users/ada/exports/ex_0000", nil).Expect(t, 404)
	c.Player("ada", "GET", "/v1/users/ada/exports/not%20an%20id", nil).Expect(t, 400)
	var own exportBody
	c.Player("ada", "GET", "/v1/users/ada/exports/"+big.ExportID, nil).Expect(t, 200).JSON(t, &own)
	if own.Status != "READY" || own.URL == nil {
		t.Fatalf("ada reads her export as %+v", own)
	}

	// The link reads the document for 24 hours, and a link that was
	// tampered with reads nothing.
	if got := own.ExpiresAt.Sub(w.s.Clock().Now()); got != exports.LinkValidity {
		t.Errorf("the link expires at %s, %s from now, want %s", own.ExpiresAt, got, exports.LinkValidity)
	}
	if code, _ := fetch(t, strings.Replace(*own.URL, "expires=", "expires=9", 1)); code != 403 {
		t.Errorf("a link with another expiry answers %d, want 403", code)
	}
	w.s.Clock().Advance(exports.LinkValidity + time.Second)
	if code, body := fetch(t, *own.URL); code != 403 {
		t.Errorf("an expired link answers %d, want 403: %s", code, body)
	}
	// Asked again, a new link; it never outlives the document.
	c.Player("ada", "GET", "/v1/users/ada/exports/"+big.ExportID, nil).Expect(t, 200).JSON(t, &own)
	if code, _ := fetch(t, *own.URL); code != 200 {
		t.Errorf("a fresh link answers %d", code)
	}
	if own.ExpiresAt.After(own.ReadyAt.Add(exports.Retention)) {
		t.Errorf("a link expiring at %s outlives the document (ready at %s)", own.ExpiresAt, own.ReadyAt)
	}
	// Past its retention the export is gone.
	w.s.Clock().Advance(exports.Retention)
	c.Player("ada", "GET", "/v1/users/ada/exports/"+big.ExportID, nil).Expect(t, 404)
}

// TestAnErasedOrErasingUserIsNotExported: while a user's erasure is under
// way their export is refused (409 erasure-pending) and writes nothing;
// once it completed, refused too (409 erased); a user who comes back after
// their erasure exports what they did since, and the erasure record.
func TestAnErasedOrErasingUserIsNotExported(t *testing.T) {
	w := newWorld(t)
	c := w.c
	zoe := &actor{w: w, rng: rand.New(rand.NewPCG(1, 2)), m: newModel("zoe"), games: []string{"g1"}, posts: []string{"p1"}}
	zoe.react(t, zoe.m.favorites, "favorite", "g1", true)
	zoe.act(t, "DAILY_OPEN")
	w.idle(t)

	w.erasures.Store(false) // the erasure stays pending
	var erasure struct {
		ID string `json:"erasure_id"`
	}
	c.Service("DELETE", "/v1/ops/users/zoe", nil).Expect(t, 202).JSON(t, &erasure)
	problem := func(r apitest.Response) string {
		var p struct {
			Type string `json:"type"`
		}
		r.JSON(t, &p)
		return p.Type
	}
	if got := problem(c.Player("zoe", "POST", "/v1/users/zoe/export", nil).Expect(t, 409)); got != "urn:rally:problem:erasure-pending" {
		t.Errorf("an export while the erasure is pending: %s", got)
	}
	if got := problem(c.Service("POST", "/v1/ops/users/zoe/export", nil).Expect(t, 409)); got != "urn:rally:problem:erasure-pending" {
		t.Errorf("an operator's export while the erasure is pending: %s", got)
	}

	w.erasures.Store(true)
	await.Success(t, time.Minute, "the erasure completed", func() error {
		var st struct {
			Status string `json:"status"`
		}
		c.Service("GET", "/v1/ops/users/zoe/erasure", nil).Expect(t, 200).JSON(t, &st)
		if st.Status != "COMPLETED" {
			w.idle(t)
			return fmt.Errorf("still %s", st.Status)
		}
		return nil
	})
	w.idle(t)
	if got := problem(c.Service("POST", "/v1/ops/users/zoe/export", nil).Expect(t, 409)); got != "urn:rally:problem:erased" {
		t.Errorf("an export of an erased user: %s", got)
	}
	if got := problem(c.Player("zoe", "POST", "/v1/users/zoe/export", nil).Expect(t, 409)); got != "urn:rally:problem:erased" {
		t.Errorf("an erased user's own export: %s", got)
	}
	for _, e := range testenvItems(t, w) {
		t.Errorf("a refused export left a record: %v", e)
	}

	// Zoe comes back.
	w.s.Clock().Advance(time.Hour)
	back := &actor{w: w, rng: rand.New(rand.NewPCG(3, 4)), m: newModel("zoe"), games: []string{"g2"}, posts: []string{"p2"}}
	back.react(t, back.m.favorites, "favorite", "g2", true)
	w.idle(t)
	b := w.export(t, "zoe", "zoe")
	want := back.m.document(t)
	var er struct {
		Status      string     `json:"status"`
		ErasureID   string     `json:"erasure_id"`
		CompletedAt *time.Time `json:"completed_at"`
	}
	c.Service("GET", "/v1/ops/users/zoe/erasure", nil).Expect(t, 200).JSON(t, &er)
	doc := document(t, b)
	got := doc["erasure"]
	gotRecord, _ := got.(map[string]any)
	if gotRecord == nil || gotRecord["erasure_id"] != er.ErasureID || er.ErasureID != erasure.ID || gotRecord["status"] != "COMPLETED" || gotRecord["completed_at"] == nil {
		t.Errorf("the export's erasure record is %v, want erasure %s COMPLETED", got, erasure.ID)
	}
	delete(doc, "erasure")
	delete(want, "erasure")
	compare(t, "the export after the user came back", doc, want, "zoe", b.ExportID)
}

// testenvItems lists the Exports items of zoe.
func testenvItems(t *testing.T, w *world) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, it := range testenv.TableItems(t, w.s.DB(), w.s.Tables().Of(schema.Exports)) {
		if testenv.Mentions(&types.AttributeValueMemberM{Value: it}, "zoe") {
			out = append(out, map[string]any{"item": it})
		}
	}
	return out
}
