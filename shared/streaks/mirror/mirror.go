// Package mirror keeps streaks in Redis: a per-player cache of the streak
// record and live-streak leaderboards (global and per region) in the
// ranking engine, plus the deadlines at which live streaks break.
//
// Every write carries the streak's version, so the handler's write-through,
// the stream, cache fills and rebuilds may race in any order. Boards use
// twice the streak version: a state of version v is written at 2v, and the
// streak breaking is a removal at 2v+1, which beats its own entry and loses
// to the next activity (2v+2). Erasure is the exception: it leaves no
// tombstone, since a tombstone would keep the player's id (see forget.go).
// Reads refuse to answer while the cache generation says Redis may be
// behind, so callers fall back to DynamoDB.
package mirror

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/rallyhq/rally/shared/cache"
	"github.com/rallyhq/rally/shared/cachegen"
	freshmirror "github.com/rallyhq/rally/shared/freshness/mirror"
	"github.com/rallyhq/rally/shared/ranking"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/streaks"
)

// Scope is the cache generation scope of streaks.
const Scope = cachegen.ScopeStreaks

// ErrStale means Redis cannot be trusted for streaks right now.
var ErrStale = errors.New("streaks mirror: redis may be behind dynamodb")

// cacheTTL is how long a cached streak is kept after its last write: a
// streak untouched that long is long broken.
const cacheTTL = 8 * 24 * time.Hour

// Mirror is the Redis side of streaks.
type Mirror struct {
	Rank  *ranking.Engine
	Redis redis.UniversalClient
	Gen   *cachegen.Tracker

	// registered holds when this process last listed each region in
	// regionsKey.
	registered sync.Map
}

// regionsKey lists the regions with a board, so a rebuild begins every
// region's load at its start: a region's load begun later would drop a
// write its board took before it began.
const regionsKey = "rally:streaks:regions"

// registerEvery is how often a process lists again a region it writes
// (after a Redis that lost the list).
const registerEvery = 10 * time.Minute

// New returns a mirror over rdb, trusted for reads only while gen says so.
func New(rdb redis.UniversalClient, gen *cachegen.Tracker) *Mirror {
	return &Mirror{Rank: ranking.New(rdb), Redis: rdb, Gen: gen}
}

var _ streaks.Cache = (*Mirror)(nil)

// Board is the live-streak board of a region, or the global one for "".
// Each board has its own hash tag, so regions spread over the cluster.
func Board(region string) ranking.Board {
	tag := "streaks:global"
	if region != "" {
		tag = "streaks:r:" + region
	}
	return ranking.Board{Tag: tag, Name: "live", Order: ranking.Desc, Ties: ranking.Earliest}
}

// validRegion reports whether a region can name a board and a deadline.
func validRegion(r string) bool { return !strings.ContainsAny(r, "{}|") }

// Board versions of a streak version v: its entry, and its removal when it
// breaks or is erased.
func entryVersion(v int64) int64   { return 2 * v }
func removalVersion(v int64) int64 { return 2*v + 1 }

// cacheKey is a player's cached streak: "<order>|<state JSON>", where order
// is the board version of the write (2v).
func cacheKey(user string) string { return "rally:streak:" + user }

// putCachedScript stores a cached streak only if its order is newer than
// the stored one. KEYS[1] key; ARGV[1] order; ARGV[2] state JSON; ARGV[3]
// ttl ms.
var putCachedScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur then
  local o = tonumber(string.match(cur, '^(%d+)|'))
  if o and o >= tonumber(ARGV[1]) then return 0 end
end
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. ARGV[2], 'PX', ARGV[3])
return 1`)

func (m *Mirror) trusted(ctx context.Context) error {
	if !m.Gen.Fresh(ctx) {
		return ErrStale
	}
	return nil
}

// Cached returns a player's cached streak in one round trip; ok is false on
// a miss. (An empty body is the tombstone earlier erasures left: a miss.)
func (m *Mirror) Cached(ctx context.Context, user string) (streaks.State, bool, error) {
	if err := m.trusted(ctx); err != nil {
		return streaks.State{}, false, err
	}
	s, err := m.Redis.Get(ctx, cacheKey(user)).Result()
	if cache.IsMiss(err) {
		return streaks.State{}, false, nil
	}
	if err != nil {
		return streaks.State{}, false, fmt.Errorf("read cached streak of %s: %w", user, err)
	}
	_, body, ok := strings.Cut(s, "|")
	if !ok || body == "" {
		return streaks.State{}, false, nil
	}
	var st streaks.State
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		return streaks.State{}, false, fmt.Errorf("decode cached streak of %s: %w", user, err)
	}
	return st, true, nil
}

// cacheCall is the versioned cache write of st.
func cacheCall(st streaks.State) (cache.ScriptCall, error) {
	// Move hints for the boards, not part of the record.
	st.PrevRegion, st.Regions = "", nil
	body, err := json.Marshal(st)
	if err != nil {
		return cache.ScriptCall{}, fmt.Errorf("encode streak of %s: %w", st.UserID, err)
	}
	return cache.ScriptCall{
		Script: putCachedScript, Keys: []string{cacheKey(st.UserID)},
		Args: []any{strconv.FormatInt(entryVersion(st.Version), 10), string(body), cacheTTL.Milliseconds()},
	}, nil
}

// Put writes states to the cache, the boards and the deadlines. Erasures
// (Removed states) go first, each taking every trace of its player out of
// Redis; the other writes then go out concurrently, one pipelined round
// trip each: the cache, the deadlines, the global board and each region
// board touched. Whatever order they land in, versions decide.
func (m *Mirror) Put(ctx context.Context, states ...streaks.State) error {
	if len(states) == 0 {
		return nil
	}
	for _, st := range states {
		if err := validate(st); err != nil {
			return err
		}
	}
	states, erased := splitErasures(states)
	if err := m.eraseAll(ctx, erased); err != nil {
		return err
	}
	if len(states) == 0 {
		return nil
	}
	calls := make([]cache.ScriptCall, 0, len(states))
	boards := map[string][]ranking.Item{} // region ("" global) → items
	var deadlines []redis.Z
	for _, st := range states {
		c, err := cacheCall(st)
		if err != nil {
			return err
		}
		calls = append(calls, c)
		for region, it := range boardItems(st) {
			boards[region] = append(boards[region], it)
		}
		if d, ok := deadline(st); ok {
			deadlines = append(deadlines, d)
		}
	}
	var g errgroup.Group
	g.Go(func() error {
		if _, err := cache.RunScripts(ctx, m.Redis, calls); err != nil {
			return fmt.Errorf("cache %d streaks: %w", len(calls), err)
		}
		return nil
	})
	// The deadlines and the regions to list go in one pipeline.
	regions := m.unlisted(boards)
	if len(deadlines) > 0 || len(regions) > 0 {
		g.Go(func() error {
			_, err := m.Redis.Pipelined(ctx, func(pipe redis.Pipeliner) error {
				if len(deadlines) > 0 {
					pipe.ZAdd(ctx, deadlinesKey, deadlines...)
				}
				if len(regions) > 0 {
					pipe.SAdd(ctx, regionsKey, regions...)
				}
				return nil
			})
			if err != nil {
				return fmt.Errorf("record %d streak deadlines and regions %v: %w", len(deadlines), regions, err)
			}
			m.listed(regions)
			return nil
		})
	}
	m.upsertBoards(ctx, &g, boards)
	return g.Wait()
}

// unlisted returns the regions of boards this process has not listed in
// regionsKey lately.
func (m *Mirror) unlisted(boards map[string][]ranking.Item) []any {
	var regions []any
	now := time.Now()
	for region := range boards {
		if region == "" {
			continue
		}
		if at, ok := m.registered.Load(region); ok && now.Sub(at.(time.Time)) < registerEvery {
			continue
		}
		regions = append(regions, region)
	}
	return regions
}

// listed notes that regions are in regionsKey.
func (m *Mirror) listed(regions []any) {
	now := time.Now()
	for _, r := range regions {
		m.registered.Store(r, now)
	}
}

// upsertBoards writes each board's items (by region, "" global) in its own
// round trip, all at once.
func (m *Mirror) upsertBoards(ctx context.Context, g *errgroup.Group, boards map[string][]ranking.Item) {
	for region, items := range boards {
		g.Go(func() error {
			if _, err := m.Rank.UpsertMany(ctx, Board(region), items); err != nil {
				return fmt.Errorf("write %d streaks to %s: %w", len(items), Board(region), err)
			}
			return nil
		})
	}
}

// validate refuses, before anything is written, a state the boards could
// not take: a deadline written for it would fail every sweep after. An
// erasure needs only the player's id (regions no board could have are
// skipped).
func validate(st streaks.State) error {
	if st.UserID == "" || len(st.UserID) > ranking.MaxIDLen {
		return fmt.Errorf("put streak: user id must be 1 to %d bytes, got %d", ranking.MaxIDLen, len(st.UserID))
	}
	if st.Removed {
		return nil
	}
	if st.Version < 0 || removalVersion(st.Version) > ranking.MaxVersion {
		return fmt.Errorf("put streak of %s: version %d out of range", st.UserID, st.Version)
	}
	if !validRegion(st.Region) || !validRegion(st.PrevRegion) {
		return fmt.Errorf("put streak of %s: region %q or %q holds a brace or '|'", st.UserID, st.Region, st.PrevRegion)
	}
	return nil
}

// boardItems are the board writes of st, by region ("" is the global
// board). A live streak is written at 2v to the global board and its
// region's; leaving a region removes it there at 2v, the move's own
// version, so later stale records of the old region cannot bring it back.
// A record with no streak leaves every board at 2v+1. Whether a streak is
// still live is the sweep's call: Put has no clock.
func boardItems(st streaks.State) map[string]ranking.Item {
	out := map[string]ranking.Item{}
	moved := st.PrevRegion != "" && st.PrevRegion != st.Region
	if st.Current <= 0 {
		gone := ranking.Item{ID: st.UserID, Version: removalVersion(st.Version), Removed: true}
		out[""] = gone
		if st.Region != "" {
			out[st.Region] = gone
		}
		if moved {
			out[st.PrevRegion] = gone
		}
		return out
	}
	it := ranking.Item{ID: st.UserID, Score: st.Current, ReachedAt: st.ReachedAt, Version: entryVersion(st.Version)}
	out[""] = it
	if st.Region != "" {
		out[st.Region] = it
	}
	if moved {
		out[st.PrevRegion] = ranking.Item{ID: st.UserID, Version: entryVersion(st.Version), Removed: true}
	}
	return out
}

// watermarkKey holds the streak processor's watermark, which every board
// read fetches in its own round trip: their as_of.
var watermarkKey = freshmirror.Key(routes.StreakProcessor.Function)

// Top ranks the streaks live at now, best first, globally (region "") or in
// a region, with the as_of read beside the board. Streaks that broke by
// now are swept off first.
func (m *Mirror) Top(ctx context.Context, region string, n int, now time.Time) ([]streaks.Entry, time.Time, error) {
	if err := m.trusted(ctx); err != nil {
		return nil, time.Time{}, err
	}
	if _, err := m.Sweep(ctx, now); err != nil {
		return nil, time.Time{}, err
	}
	var mark string
	es, _, err := m.Rank.Top(ctx, Board(region), n, ranking.Also(watermarkKey, &mark))
	if err != nil {
		return nil, time.Time{}, err
	}
	w, _ := freshmirror.Parse(mark)
	out := make([]streaks.Entry, len(es))
	for i, e := range es {
		out[i] = streaks.Entry{Rank: e.Rank, UserID: e.ID, Streak: e.Score, ReachedAt: e.ReachedAt}
	}
	return out, w.NewestChange, nil
}
