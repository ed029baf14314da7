package streaks

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/rallyhq/rally/shared/cachegen"
	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/errs"
	"github.com/rallyhq/rally/shared/freshness"
	"github.com/rallyhq/rally/shared/obs"
)

// MaxAttempts bounds how often an activity is retried after losing a race
// with another activity of the same player.
const MaxAttempts = 20

// dirtyUser prefixes the cache-generation marker of a player whose streak
// write Redis lost: a repair refreshes their cached streak and rebuilds the
// boards.
const dirtyUser = "user:"

// Service records activity and reads streaks.
type Service struct {
	Store Store
	Cache Cache
	// RegionOf returns the player's region from their profile ("" if none).
	RegionOf func(ctx context.Context, user string) (string, error)
	Gen      *cachegen.Tracker
	Clock    clock.Clock
	Log      *slog.Logger
	Metrics  *obs.Metrics

	// Freshness says how fresh streak boards read from Redis are: as of
	// the newest change the streak processor applied.
	Freshness freshness.Reads

	players players
}

// Recorded is the outcome of Record: the response body, and whether it is
// the stored answer to an earlier request with the same key.
type Recorded struct {
	Body     []byte
	Replayed bool
}

// Record records one activity of user under an idempotency key; hash
// identifies the request so a reused key with another body is refused.
// An event type a.By may not report is refused before anything is read or
// written.
func (s *Service) Record(ctx context.Context, user, key, hash string, a Activity) (Recorded, error) {
	if !MayReport(a.Type, a.By) {
		return Recorded{}, notReportable(a.Type, a.By)
	}
	// The region comes from the profile; read it while the streak and the
	// day are read, not before them.
	type found struct {
		region string
		err    error
	}
	lookup := make(chan found, 1)
	go func() {
		r, err := s.RegionOf(ctx, user)
		lookup <- found{r, err}
	}()
	region := sync.OnceValues(func() (string, error) {
		f := <-lookup
		return f.region, f.err
	})
	// Activities of one player in this process take turns; the version
	// guard still settles races between processes (Lambda instances).
	unlock := s.players.lock(user)
	defer unlock()
	for attempt := 0; attempt < MaxAttempts; attempt++ {
		if attempt > 0 {
			backoff(ctx, attempt)
		}
		a.At = s.Clock.Now()
		c, err := s.prepare(ctx, user, key, hash, region, a)
		if err != nil {
			return Recorded{}, err
		}
		switch err := s.Store.Commit(ctx, c); {
		case err == nil:
			s.writeThrough(ctx, c.Next)
			s.Metrics.Count("ActivityRecorded", 1, map[string]string{"EventType": string(a.Type)})
			return Recorded{Body: c.Response}, nil
		case errors.Is(err, ErrKeyUsed):
			return s.replay(ctx, user, key, hash)
		case !errors.Is(err, ErrConflict):
			return Recorded{}, err
		}
	}
	return Recorded{}, errs.New(errs.Conflict, "too many concurrent activities for this player; retry with the same Idempotency-Key")
}

// prepare reads the player's state and the day's totals and computes the
// transaction of one attempt.
func (s *Service) prepare(ctx context.Context, user, key, hash string, regionOf func() (string, error), a Activity) (Commit, error) {
	prev, _, err := s.Store.Get(ctx, user)
	if err != nil {
		return Commit{}, err
	}
	prev.UserID = user
	day, err := s.Store.Day(ctx, user, DateFor(prev, a))
	if err != nil {
		return Commit{}, err
	}
	next, out := Apply(prev, day, a)
	region, err := regionOf()
	if err != nil {
		return Commit{}, err
	}
	next.Region, next.PrevRegion = region, ""
	if prev.Region != region {
		next.PrevRegion = prev.Region
	}
	ev := Event{
		ID: EventID(user, key), UserID: user, Type: a.Type, Source: a.Source, OccurredAt: next.UpdatedAt,
		Date: out.Date, Points: out.Points, Timezone: out.Timezone, RejectedTimezone: out.RejectedTimezone,
		Streak: next.Current, Region: region,
	}
	body, err := json.Marshal(Receipt{
		EventID: ev.ID, PointsAwarded: out.Points, TotalPoints: next.TotalPoints, CurrentStreak: next.Current,
		LongestStreak: next.Longest, StreakExtended: out.Extended, ActivityDate: out.Date,
	})
	if err != nil {
		return Commit{}, err
	}
	return Commit{Key: key, Hash: hash, Prev: prev, Next: next, Event: ev, Day: day.With(a.Type, out.Points), Response: body}, nil
}

func (s *Service) replay(ctx context.Context, user, key, hash string) (Recorded, error) {
	r, ok, err := s.Store.Replay(ctx, user, key)
	if err != nil {
		return Recorded{}, err
	}
	if !ok {
		// The record expired between the two reads: the key is free again,
		// but only a retry may reuse it.
		return Recorded{}, errs.New(errs.Conflict, "the Idempotency-Key was just released; retry")
	}
	if r.Hash != hash {
		return Recorded{}, errs.New(errs.KeyReused, "the Idempotency-Key was used with a different request")
	}
	return Recorded{Body: r.Response, Replayed: true}, nil
}

// writeThrough shows the player their new streak at once. When Redis
// cannot take it, the streak boards are marked dirty so the processor
// rebuilds them and readers use DynamoDB meanwhile.
func (s *Service) writeThrough(ctx context.Context, st State) {
	err := s.Cache.Put(ctx, st)
	if err == nil {
		return
	}
	s.Log.WarnContext(ctx, "streak cache write failed; marking streaks dirty", obs.User(st.UserID), "error", err.Error())
	if err := s.Gen.MarkDirty(context.WithoutCancel(ctx), dirtyKeys(st), s.Clock.Now()); err != nil {
		s.Log.ErrorContext(ctx, "cannot mark streaks dirty", "error", err.Error())
	}
}

// backoff waits before retry attempt: exponential from 10 ms up to 400 ms,
// half of it random, so a burst of one player's activities spreads out
// instead of colliding again on the same version.
func backoff(ctx context.Context, attempt int) {
	d := min(10*time.Millisecond<<min(attempt, 6), 400*time.Millisecond)
	_ = clock.Sleep(ctx, d/2+rand.N(d/2+1))
}

// players serialises the activities of each player within a process, so
// a burst from one player does not become a burst of transactions that
// all but one must lose and retry.
type players struct {
	mu    sync.Mutex
	locks map[string]*playerLock
}

type playerLock struct {
	sync.Mutex
	waiters int
}

// lock takes the player's turn and returns the function that gives it up.
func (p *players) lock(user string) func() {
	p.mu.Lock()
	if p.locks == nil {
		p.locks = map[string]*playerLock{}
	}
	l := p.locks[user]
	if l == nil {
		l = &playerLock{}
		p.locks[user] = l
	}
	l.waiters++
	p.mu.Unlock()
	l.Lock()
	return func() {
		l.Unlock()
		p.mu.Lock()
		if l.waiters--; l.waiters == 0 {
			delete(p.locks, user)
		}
		p.mu.Unlock()
	}
}

// ServerKey is the Idempotency-Key of a game server's report as the
// Activity table keeps it. Keys live in the reported player's partition, so
// a server's key reused for another player is another key; scoped by the
// server's identity, so two servers' keys never meet; and spelled with '#',
// which a client's key cannot hold, so no key of the player's own takes the
// server's slot (or the reverse).
func ServerKey(server, key string) string {
	sum := sha256.Sum256([]byte(server))
	return "server#" + hex.EncodeToString(sum[:8]) + "#" + key
}

// EventID is the id of the activity recorded under a player's idempotency
// key: the same request always names the same event.
func EventID(user, key string) string {
	sum := sha256.Sum256([]byte(user + "\x00" + key))
	return hex.EncodeToString(sum[:16])
}

// Streak is a player's streak as they see it now.
type Streak struct {
	State
	View
	// Degraded is set when Redis could not be used (unreachable, or not
	// trusted) and the streak was read from DynamoDB instead: exact, but
	// served without the cache, as every such read says.
	Degraded bool
}

// Get returns a player's streak: from the cache, else DynamoDB. A player
// with no activity has a zero streak, not an error.
func (s *Service) Get(ctx context.Context, user string) (Streak, error) {
	now := s.Clock.Now()
	st, ok, cacheErr := s.Cache.Cached(ctx, user)
	if cacheErr == nil && ok {
		s.Metrics.CacheReads(1, 0)
	} else {
		s.Metrics.CacheReads(0, 1)
		var err error
		if st, _, err = s.Store.Get(ctx, user); err != nil {
			return Streak{}, err
		}
		if st.Version > 0 && cacheErr == nil {
			s.fill(ctx, st)
		}
	}
	st.UserID = user
	return Streak{State: st, View: st.ViewAt(now), Degraded: cacheErr != nil}, nil
}

// fill puts a state read from DynamoDB into the cache; a failure only
// costs the next reader a DynamoDB read.
func (s *Service) fill(ctx context.Context, st State) {
	if err := s.Cache.Put(ctx, st); err != nil {
		s.Log.DebugContext(ctx, "streak cache fill failed", obs.User(st.UserID), "error", err.Error())
	}
}

// History returns the player's points per day for the last days days
// (today in their zone included), newest first, days without activity as
// zeros.
func (s *Service) History(ctx context.Context, user string, days int) ([]Day, error) {
	st, _, err := s.Store.Get(ctx, user)
	if err != nil {
		return nil, err
	}
	today := DateIn(s.Clock.Now(), st.Timezone)
	from := AddDays(today, 1-days)
	stored, err := s.Store.History(ctx, user, from, today)
	if err != nil {
		return nil, err
	}
	byDate := make(map[string]Day, len(stored))
	for _, d := range stored {
		byDate[d.Date] = d
	}
	out := make([]Day, 0, days)
	for date := today; date >= from; date = AddDays(date, -1) {
		d, ok := byDate[date]
		if !ok {
			d = Day{Date: date}
		}
		out = append(out, d)
	}
	return out, nil
}

// Top is a streak leaderboard: the live streaks, best first.
type Top struct {
	Entries  []Entry
	AsOf     time.Time
	Degraded bool
}

// Top ranks the n longest live streaks, globally (region "") or in a region:
// from Redis, as of the streak processor's newest applied change, or
// exactly from DynamoDB when Redis cannot answer. That read is of the
// Streaks table's own live-streak indexes, the truth the processor
// mirrors, not of anything it derives: it is as of the read.
func (s *Service) Top(ctx context.Context, region string, n int) (Top, error) {
	now := s.Clock.Now()
	entries, asOf, err := s.Cache.Top(ctx, region, n, now)
	if err == nil {
		s.Metrics.CacheReads(1, 0)
		return Top{Entries: entries, AsOf: s.Freshness.AsOf(ctx, asOf)}, nil
	}
	s.Metrics.CacheReads(0, 1)
	s.Log.DebugContext(ctx, "streak board from dynamodb", "region", region, "reason", err.Error())
	entries, err = s.Store.Top(ctx, region, n, now)
	if err != nil {
		return Top{}, err
	}
	return Top{Entries: entries, AsOf: now, Degraded: true}, nil
}
