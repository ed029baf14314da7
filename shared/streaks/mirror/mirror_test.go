package mirror_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/shared/cachegen"
	"github.com/rallyhq/rally/shared/schema"
	"github.com/rallyhq/rally/shared/streaks"
	"github.com/rallyhq/rally/shared/streaks/internal/streakmodel"
	"github.com/rallyhq/rally/shared/streaks/mirror"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// env is a mirror over a private redis-server, trusted through a real
// generation tracker (DynamoDB Local). The tracker has its own client so
// the round-trip counter sees only the mirror's traffic.
type env struct {
	m     *mirror.Mirror
	rdb   *redis.Client
	gen   *cachegen.Tracker
	trips *testenv.RoundTrips
}

func newEnv(t *testing.T) *env {
	t.Helper()
	db, names, _ := testenv.DynamoDB(t)
	srv := testenv.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	trips := &testenv.RoundTrips{}
	rdb.AddHook(trips)
	genRDB := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = rdb.Close(); _ = genRDB.Close() })
	gen := &cachegen.Tracker{DB: db, Table: names.Of(schema.Counters), Redis: genRDB, Scope: mirror.Scope, CheckEvery: time.Nanosecond}
	if err := gen.Advance(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	return &env{m: mirror.New(rdb, gen), rdb: rdb, gen: gen, trips: trips}
}

var (
	zones   = []string{"Pacific/Kiritimati", "Pacific/Pago_Pago", "Europe/Berlin", "America/New_York"}
	regions = []string{"", "eu", "na", "apac"}
)

// world plays random players' activities by the streak rules written out
// in streakmodel (not streaks.Apply: the boards are checked against the
// rules, not against the code that shares them), and keeps every state
// version it produced.
type world struct {
	rng     *rand.Rand
	players []*player
	all     []streaks.State
}

type player struct {
	st        streaks.State
	streak    streakmodel.Streak
	zone      string
	diligence float64 // chance to be active in a step
}

func newWorld(seed uint64, n int) *world {
	w := &world{rng: rand.New(rand.NewPCG(seed, 7))}
	for i := range n {
		w.players = append(w.players, &player{
			st:        streaks.State{UserID: fmt.Sprintf("u%03d", i), Region: regions[w.rng.IntN(len(regions))]},
			zone:      zones[w.rng.IntN(len(zones))],
			diligence: 0.03 + 0.3*w.rng.Float64(),
		})
	}
	return w
}

// act records an activity of p at at; now and then the player moves region.
func (w *world) act(p *player, at time.Time) streaks.State {
	p.streak.Play(at, p.zone)
	next := p.st
	next.Current, next.Longest, next.LastDate, next.ReachedAt = p.streak.Current, p.streak.Longest, p.streak.Last, p.streak.ReachedAt
	next.Timezone, next.UpdatedAt, next.Version, next.PrevRegion = p.zone, at, next.Version+1, ""
	if w.rng.IntN(15) == 0 {
		next.PrevRegion = next.Region
		for next.Region == next.PrevRegion {
			next.Region = regions[w.rng.IntN(len(regions))]
		}
	}
	p.st = next
	w.all = append(w.all, next)
	return next
}

// step lets the players act at now and returns the states the stream
// delivers: the new ones, some redelivered and some stale, shuffled.
func (w *world) step(now time.Time) []streaks.State {
	var out []streaks.State
	for _, p := range w.players {
		if w.rng.Float64() < p.diligence {
			out = append(out, w.act(p, now.Add(time.Duration(w.rng.IntN(3600_000))*time.Millisecond)))
		}
	}
	for range len(out) / 2 {
		out = append(out, w.all[w.rng.IntN(len(w.all))])
	}
	w.rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// live is what Store.Live would page through at now: the streaks whose
// player was active today or yesterday in their zone.
func (w *world) live(now time.Time) []streaks.State {
	var out []streaks.State
	for _, p := range w.players {
		if streakmodel.Live(p.streak.Last, p.zone, now) {
			out = append(out, p.st)
		}
	}
	return out
}

// want is the board by brute force: the live streaks in the region (all
// for ""), longer first, then reached earlier, then by user id.
func (w *world) want(region string, now time.Time) []streaks.Entry {
	var out []streaks.Entry
	for _, p := range w.players {
		if streakmodel.Live(p.streak.Last, p.zone, now) && (region == "" || p.st.Region == region) {
			out = append(out, streaks.Entry{UserID: p.st.UserID, Streak: p.streak.Current, ReachedAt: p.streak.ReachedAt})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		return streakmodel.Ahead(a.Streak, a.ReachedAt, a.UserID, b.Streak, b.ReachedAt, b.UserID)
	})
	for i := range out {
		out[i].Rank = i + 1
	}
	return out
}

func describe(es []streaks.Entry) string {
	var b strings.Builder
	for _, e := range es {
		fmt.Fprintf(&b, "\n  #%d %s streak %d reached %s", e.Rank, e.UserID, e.Streak, e.ReachedAt.UTC().Format(time.RFC3339Nano))
	}
	return b.String()
}

func sameEntries(a, b []streaks.Entry) bool {
	return slices.EqualFunc(a, b, func(x, y streaks.Entry) bool {
		return x.Rank == y.Rank && x.UserID == y.UserID && x.Streak == y.Streak && x.ReachedAt.Equal(y.ReachedAt)
	})
}

func checkBoards(t *testing.T, e *env, w *world, now time.Time) {
	t.Helper()
	for _, region := range regions {
		got, _, err := e.m.Top(context.Background(), region, 1000, now)
		if err != nil {
			t.Fatalf("top of %q at %s: %v", region, now, err)
		}
		if want := w.want(region, now); !sameEntries(got, want) {
			t.Fatalf("board %q at %s:\ngot%s\nwant%s", region, now, describe(got), describe(want))
		}
	}
}

// t0 is two days before Europe's move to summer time.
var t0 = time.Date(2026, 3, 27, 0, 0, 0, 0, time.UTC)

func TestTopIsTheBruteForceRankingOfLiveStreaksAsDaysPass(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	w := newWorld(1, 60)
	now := t0
	for range 48 {
		now = now.Add(time.Duration(1+w.rng.IntN(5)) * time.Hour)
		batch := w.step(now)
		// Half through one Put, the rest one by one (the write-through path).
		half := len(batch) / 2
		if err := e.m.Put(ctx, batch[:half]...); err != nil {
			t.Fatal(err)
		}
		for _, st := range batch[half:] {
			if err := e.m.Put(ctx, st); err != nil {
				t.Fatal(err)
			}
		}
		now = now.Add(time.Hour)
		checkBoards(t, e, w, now)
		// A short top is the head of the long one.
		got, _, err := e.m.Top(ctx, "", 5, now)
		if want := w.want("", now); err != nil || !sameEntries(got, want[:min(5, len(want))]) {
			t.Fatalf("top 5 at %s: %v%s", now, err, describe(got))
		}
	}
	if len(w.all) < 250 {
		t.Fatalf("only %d states were played", len(w.all))
	}
	// Nobody plays any more: the boards empty as the streaks break.
	for range 3 {
		now = now.Add(24 * time.Hour)
		checkBoards(t, e, w, now)
	}
	if got, _, _ := e.m.Top(ctx, "", 10, now); len(got) != 0 {
		t.Fatalf("streaks left after three idle days:%s", describe(got))
	}
	if n, _ := e.rdb.ZCard(ctx, mirror.DeadlinesKey).Result(); n != 0 {
		t.Fatalf("%d deadlines left after every streak broke", n)
	}
}

// at is noon of a date in UTC.
func at(date string) time.Time {
	d, _ := time.Parse(streaks.DateLayout, date)
	return d.Add(12 * time.Hour)
}

func state(user string, version, current int64, lastDate, region string) streaks.State {
	return streaks.State{
		UserID: user, Version: version, Current: current, Longest: current, LastDate: lastDate,
		ReachedAt: at(lastDate), Region: region, UpdatedAt: at(lastDate),
	}
}

func users(t *testing.T, e *env, region string, now time.Time) string {
	t.Helper()
	es, _, err := e.m.Top(context.Background(), region, 100, now)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, x := range es {
		out = append(out, fmt.Sprintf("%s:%d", x.UserID, x.Streak))
	}
	return strings.Join(out, " ")
}

func TestVersionsDecideWhatTheBoardsShow(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	now := at("2026-05-02")
	put := func(states ...streaks.State) {
		t.Helper()
		if err := e.m.Put(ctx, states...); err != nil {
			t.Fatal(err)
		}
	}
	expect := func(region, want string) {
		t.Helper()
		if got := users(t, e, region, now); got != want {
			t.Fatalf("board %q at %s: got %q, want %q", region, now, got, want)
		}
	}

	// Older after newer, and redelivery, change nothing.
	put(state("ann", 2, 2, "2026-05-02", "eu"))
	put(state("ann", 1, 1, "2026-05-01", "eu"))
	put(state("ann", 2, 2, "2026-05-02", "eu"), state("ann", 1, 1, "2026-05-01", "eu"))
	expect("", "ann:2")
	expect("eu", "ann:2")

	// A region move takes the player off the old board; a stale record of
	// the old region cannot bring them back; moving back works.
	moved := state("ann", 3, 2, "2026-05-02", "na")
	moved.PrevRegion = "eu"
	put(moved)
	put(state("ann", 2, 2, "2026-05-02", "eu"))
	expect("eu", "")
	expect("na", "ann:2")
	back := state("ann", 4, 2, "2026-05-02", "eu")
	back.PrevRegion = "na"
	put(back)
	expect("eu", "ann:2")
	expect("na", "")
	expect("", "ann:2")

	// Sweeping an old deadline leaves a player who was active again.
	put(state("bob", 1, 1, "2026-05-01", ""))
	put(state("bob", 2, 2, "2026-05-02", ""))
	now = time.Date(2026, 5, 3, 0, 30, 0, 0, time.UTC) // version 1 of ann and bob broke at midnight
	swept, err := e.m.Sweep(ctx, now)
	if err != nil || swept != 2 {
		t.Fatalf("swept %d, %v; want the two broken versions", swept, err)
	}
	expect("", "ann:2 bob:2")
	now = at("2026-05-04") // now both broke
	expect("", "")
	expect("eu", "")

	// A late record of a swept version stays off; the next activity is on.
	put(state("bob", 2, 2, "2026-05-02", ""))
	expect("", "")
	put(state("bob", 3, 1, "2026-05-04", ""))
	expect("", "bob:1")

	// Erasure leaves every board, whatever older records come with it.
	gone := state("bob", 3, 1, "2026-05-04", "")
	gone.Removed = true
	put(state("bob", 3, 1, "2026-05-04", ""), gone, state("bob", 2, 2, "2026-05-02", ""))
	expect("", "")
	if _, ok, err := e.m.Cached(ctx, "bob"); err != nil || ok {
		t.Fatalf("erased player cached: ok %v, %v", ok, err)
	}
	// It is forgotten, not tombstoned: a new streak of the same id, whose
	// versions start over, is on the board at once.
	put(state("bob", 1, 1, "2026-05-04", ""))
	expect("", "bob:1")
}

func TestBreakingFollowsThePlayersOwnMidnight(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	// Both were last active on May 1st in their own zone: Kiritimati
	// (UTC+14) breaks at 10:00 UTC on May 2nd, Pago Pago (UTC-11) at
	// 11:00 UTC on May 3rd.
	kiri := state("kiri", 1, 5, "2026-05-01", "")
	kiri.Timezone = "Pacific/Kiritimati"
	pago := state("pago", 1, 3, "2026-05-01", "")
	pago.Timezone = "Pacific/Pago_Pago"
	if err := e.m.Put(ctx, kiri, pago); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		now  time.Time
		want string
	}{
		{time.Date(2026, 5, 2, 9, 59, 59, 0, time.UTC), "kiri:5 pago:3"},
		{time.Date(2026, 5, 2, 10, 0, 0, 0, time.UTC), "pago:3"},
		{time.Date(2026, 5, 3, 10, 59, 59, 0, time.UTC), "pago:3"},
		{time.Date(2026, 5, 3, 11, 0, 0, 0, time.UTC), ""},
	} {
		if got := users(t, e, "", c.now); got != c.want {
			t.Fatalf("at %s: got %q, want %q", c.now, got, c.want)
		}
	}
}

func TestTheCacheKeepsTheNewestVersion(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	rng := rand.New(rand.NewPCG(3, 3))
	var versions []streaks.State
	for v := int64(1); v <= 6; v++ {
		st := state("cat", v, v, fmt.Sprintf("2026-05-%02d", v), "eu")
		st.Timezone, st.TotalPoints = "Europe/Berlin", 10*v
		st.TZChanges = []time.Time{at("2026-05-01")}
		versions = append(versions, st)
	}
	for round := range 5 {
		if err := e.rdb.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if err := e.gen.Advance(ctx, 0); err != nil {
			t.Fatal(err)
		}
		order := slices.Clone(versions)
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, st := range append(order, order...) {
			if err := e.m.Put(ctx, st); err != nil {
				t.Fatal(err)
			}
		}
		got, ok, err := e.m.Cached(ctx, "cat")
		newest := versions[len(versions)-1]
		if err != nil || !ok || got.Version != newest.Version || got.Current != 6 || got.TotalPoints != 60 ||
			!got.ReachedAt.Equal(newest.ReachedAt) || got.Timezone != "Europe/Berlin" || len(got.TZChanges) != 1 {
			t.Fatalf("round %d: cached %+v, %v, %v", round, got, ok, err)
		}
	}

	// A move hint is not part of the record.
	moved := state("cat", 7, 7, "2026-05-07", "na")
	moved.PrevRegion = "eu"
	if err := e.m.Put(ctx, moved); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := e.m.Cached(ctx, "cat"); got.Region != "na" || got.PrevRegion != "" {
		t.Fatalf("cached after a move: %+v", got)
	}

	// The cache keeps streaks for 8 days after their last write.
	if ttl, _ := e.rdb.PTTL(ctx, mirror.CacheKey("cat")).Result(); ttl < 8*24*time.Hour-time.Minute || ttl > 8*24*time.Hour {
		t.Fatalf("cache ttl %s, want 8 days", ttl)
	}

	// Erasure: a miss, with no key left (older records in the same batch
	// do not fill it).
	gone := moved
	gone.Removed = true
	if err := e.m.Put(ctx, moved, gone, versions[5]); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := e.m.Cached(ctx, "cat"); err != nil || ok {
		t.Fatalf("erased streak cached: ok %v, %v", ok, err)
	}
	if n, _ := e.rdb.Exists(ctx, mirror.CacheKey("cat")).Result(); n != 0 {
		t.Fatal("the erased streak's cache key is still there")
	}
	if _, ok, err := e.m.Cached(ctx, "nobody"); err != nil || ok {
		t.Fatalf("unknown player cached: ok %v, %v", ok, err)
	}
}

func TestRebuildAfterRedisLostEverythingReproducesTheBoards(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	w := newWorld(2, 80)
	now := t0
	for range 24 {
		now = now.Add(3 * time.Hour)
		if err := e.m.Put(ctx, w.step(now)...); err != nil {
			t.Fatal(err)
		}
	}
	now = now.Add(time.Hour)
	before := map[string][]streaks.Entry{}
	for _, region := range regions {
		es, _, err := e.m.Top(ctx, region, 1000, now)
		if err != nil {
			t.Fatal(err)
		}
		before[region] = es
	}
	if len(before[""]) < 20 {
		t.Fatalf("only %d live streaks to rebuild", len(before[""]))
	}

	if err := e.rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.m.Top(ctx, "", 10, now); !errors.Is(err, mirror.ErrStale) {
		t.Fatalf("top of an emptied redis: %v, want ErrStale", err)
	}
	live := w.live(now)
	err := e.m.Rebuild(ctx, now, func(fn func([]streaks.State) error) error {
		for page := range slices.Chunk(live, 17) {
			if err := fn(page); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.gen.Advance(ctx, 0); err != nil {
		t.Fatal(err)
	}
	for _, region := range regions {
		got, _, err := e.m.Top(ctx, region, 1000, now)
		if err != nil {
			t.Fatal(err)
		}
		if !sameEntries(got, before[region]) {
			t.Fatalf("board %q rebuilt:\ngot%s\nwant%s", region, describe(got), describe(before[region]))
		}
	}
	// The deadlines came back too: streaks still break on time.
	for range 3 {
		now = now.Add(12 * time.Hour)
		checkBoards(t, e, w, now)
	}
}

func TestAFailedRebuildLeavesTheBoardsAsTheyWere(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	now := at("2026-05-02")
	if err := e.m.Put(ctx, state("ann", 1, 4, "2026-05-02", "eu"), state("bob", 1, 2, "2026-05-02", "na")); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("dynamodb went away")
	err := e.m.Rebuild(ctx, now, func(fn func([]streaks.State) error) error {
		if err := fn([]streaks.State{state("cat", 1, 9, "2026-05-02", "apac")}); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("rebuild: %v, want the scan's error", err)
	}
	for region, want := range map[string]string{"": "ann:4 bob:2", "eu": "ann:4", "na": "bob:2", "apac": ""} {
		if got := users(t, e, region, now); got != want {
			t.Fatalf("board %q after a failed rebuild: %q, want %q", region, got, want)
		}
	}
	// The next rebuild is not blocked by the failed one.
	err = e.m.Rebuild(ctx, now, func(fn func([]streaks.State) error) error {
		return fn([]streaks.State{state("cat", 1, 9, "2026-05-02", "apac")})
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := users(t, e, "", now); got != "cat:9" {
		t.Fatalf("global board after the rebuild: %q", got)
	}
}

func TestReadsRefuseWhileRedisMayBeBehind(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	now := at("2026-05-02")
	if err := e.m.Put(ctx, state("ann", 1, 4, "2026-05-02", "")); err != nil {
		t.Fatal(err)
	}
	if err := e.gen.Bump(ctx); err != nil { // a write was lost
		t.Fatal(err)
	}
	if _, _, err := e.m.Top(ctx, "", 10, now); !errors.Is(err, mirror.ErrStale) {
		t.Fatalf("top: %v, want ErrStale", err)
	}
	if _, _, err := e.m.Cached(ctx, "ann"); !errors.Is(err, mirror.ErrStale) {
		t.Fatalf("cached: %v, want ErrStale", err)
	}
	// Writes still go through, so a repair has less to do.
	if err := e.m.Put(ctx, state("ann", 2, 5, "2026-05-03", "")); err != nil {
		t.Fatal(err)
	}
	if err := e.gen.Advance(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if st, ok, err := e.m.Cached(ctx, "ann"); err != nil || !ok || st.Current != 5 {
		t.Fatalf("cached after repair: %+v, %v, %v", st, ok, err)
	}
}

func TestAProcessorBatchCostsOneRoundTripPerWrite(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	batch := make([]streaks.State, 500)
	for i := range batch {
		batch[i] = state(fmt.Sprintf("p%03d", i), 1, int64(1+i%30), "2026-05-02", regions[i%len(regions)])
	}
	if err := e.m.Put(ctx, batch[:1]...); err != nil { // loads the scripts
		t.Fatal(err)
	}
	start := e.trips.Count()
	if err := e.m.Put(ctx, batch...); err != nil {
		t.Fatal(err)
	}
	// The cache, the deadlines, the global board and three region boards,
	// sent concurrently.
	if n := e.trips.Count() - start; n != 6 {
		t.Fatalf("a batch of 500 cost %d round trips, want 6", n)
	}
	start = e.trips.Count()
	if _, _, err := e.m.Top(ctx, "eu", 10, at("2026-05-02")); err != nil {
		t.Fatal(err)
	}
	// The sweep's look at the deadlines, then the board.
	if n := e.trips.Count() - start; n != 2 {
		t.Fatalf("top cost %d round trips, want 2", n)
	}
}

func TestABatchWithAStateNoBoardCouldTakeWritesNothing(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	for _, bad := range []streaks.State{
		state("", 1, 1, "2026-05-02", ""),
		state(strings.Repeat("x", 513), 1, 1, "2026-05-02", ""),
		state("ann", 1, 1, "2026-05-02", "{eu}"),
		state("ann", -1, 1, "2026-05-02", ""),
	} {
		if err := e.m.Put(ctx, state("ok", 1, 1, "2026-05-02", "eu"), bad); err == nil {
			t.Fatalf("put of user %.10q region %q version %d: no error", bad.UserID, bad.Region, bad.Version)
		}
	}
	if keys, _ := e.rdb.Keys(ctx, "*").Result(); !slices.Equal(keys, []string{e.gen.RedisKey()}) {
		t.Fatalf("a refused batch wrote %v", keys)
	}
}
