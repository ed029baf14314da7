// Package streaks owns daily activity, streaks and points: a player's
// activity is dated in their own IANA time zone, extends (or restarts) their
// streak, earns points under a daily cap per event type, and is recorded
// with its idempotency key, the day's totals and the streak update in one
// DynamoDB transaction guarded by the streak's version. The streak processor
// mirrors streaks into Redis: a per-player cache and live-streak
// leaderboards, global and per region.
//
// Adapters live in sub-packages: dynamo (the Streaks and Activity tables)
// and mirror (Redis over shared/ranking).
package streaks

import (
	"context"
	"errors"
	"time"
)

// EventType is a kind of activity.
type EventType string

// Event types.
const (
	DailyOpen      EventType = "DAILY_OPEN"
	MatchPlayed    EventType = "MATCH_PLAYED"
	MatchWon       EventType = "MATCH_WON"
	LevelCompleted EventType = "LEVEL_COMPLETED"
	SocialShare    EventType = "SOCIAL_SHARE"
)

// Award is what an event type earns and who may report it: Points per
// event, at most DailyCap points per player per activity date (events over
// the cap are recorded with 0 points), reported by ReportedBy.
type Award struct {
	Points   int64
	DailyCap int64
	// ReportedBy is who may report the event type. Events with competitive
	// value come from game servers, which saw the match; a player's own
	// report of them is refused.
	ReportedBy Reporter
}

// Reporter is who reports an activity: the player themselves
// (POST /v1/activity), or a game server on the player's behalf
// (POST /v1/ops/activity). An Award's ReportedBy may name both.
type Reporter uint8

// Reporters.
const (
	Players Reporter = 1 << iota
	GameServers
)

func (r Reporter) String() string {
	switch r {
	case Players:
		return "players"
	case GameServers:
		return "game servers"
	case Players | GameServers:
		return "players and game servers"
	}
	return "nobody"
}

// AwardFor is what an event type earns, from the points table, the one
// place points and reporters are decided; ok is false for an unknown event
// type.
func AwardFor(t EventType) (a Award, ok bool) {
	a, ok = awards[t]
	return a, ok
}

// MayReport reports whether by may report event type t.
func MayReport(t EventType, by Reporter) bool {
	a, ok := awards[t]
	return ok && by != 0 && a.ReportedBy&by == by
}

// ReportableBy lists the event types by may report, in the order of
// EventTypes.
func ReportableBy(by Reporter) []EventType {
	var out []EventType
	for _, t := range EventTypes() {
		if MayReport(t, by) {
			out = append(out, t)
		}
	}
	return out
}

// EventTypes lists every event type.
func EventTypes() []EventType {
	return []EventType{DailyOpen, MatchPlayed, MatchWon, LevelCompleted, SocialShare}
}

// awards is the points table.
var awards = map[EventType]Award{
	DailyOpen:      {Points: 10, DailyCap: 10, ReportedBy: Players},
	MatchPlayed:    {Points: 5, DailyCap: 50, ReportedBy: GameServers},
	MatchWon:       {Points: 20, DailyCap: 200, ReportedBy: GameServers},
	LevelCompleted: {Points: 15, DailyCap: 150, ReportedBy: Players},
	SocialShare:    {Points: 25, DailyCap: 50, ReportedBy: Players},
}

// Source is where an activity happened.
type Source string

// Sources.
const (
	MobileApp Source = "mobile_app"
	Web       Source = "web"
	Console   Source = "console"
)

// Sources lists the accepted sources.
func Sources() []Source {
	return []Source{MobileApp, Web, Console}
}

// State is a player's streak record, one item of the Streaks table.
type State struct {
	UserID string
	// Current is the streak as of LastDate; a reader sees 0 once the
	// streak is broken (see View).
	Current int64
	Longest int64
	// LastDate is the local date (YYYY-MM-DD) of the latest activity,
	// empty before the first.
	LastDate string
	// ReachedAt is when Current was reached: the activity that extended
	// or restarted the streak. On streak leaderboards the earlier wins a tie.
	ReachedAt time.Time
	// Timezone is the player's IANA zone; empty means UTC.
	Timezone string
	// Region places the player on a regional streak leaderboard (from
	// their profile); empty means the global board only.
	Region string
	// PrevRegion is the region before this change, when it changed: the
	// boards move the player. Set by the stream decoder and the handler.
	PrevRegion string
	// Regions are every region the streak was ever in, as the stream
	// decoder reads them from the record: erasure takes the player off
	// each of those boards. Not part of what caches keep.
	Regions     []string
	TotalPoints int64
	// Version grows by one with every activity; the transaction is guarded
	// by it and caches keep the newest.
	Version int64
	// TZChanges are the accepted time-zone changes of the last 7 days.
	TZChanges []time.Time
	// TZRejected counts time-zone changes refused by the limit.
	TZRejected int64
	UpdatedAt  time.Time
	// Removed marks a stream change that deleted the record (erasure); it
	// comes one version past the record it deleted (the rule every stream
	// decoder follows, see shared/streams).
	Removed bool
}

func (st State) key() string    { return st.UserID }
func (st State) version() int64 { return st.Version }

func (st State) changedAt() time.Time { return st.UpdatedAt }

// Day is a player's points on one local date (the Activity table's
// day#YYYY-MM-DD item).
type Day struct {
	Date   string
	Points int64
	Events int64
	// ByType is the points awarded per event type, for the daily caps.
	ByType map[EventType]int64
}

// Event is one recorded activity in the points event log (kept 90 days).
type Event struct {
	ID         string
	UserID     string
	Type       EventType
	Source     Source
	OccurredAt time.Time
	// Date is the local activity date the event counted for.
	Date   string
	Points int64
	// Timezone is the zone the date was taken in.
	Timezone string
	// RejectedTimezone is a zone the request asked for and the limit
	// refused; empty when none was refused.
	RejectedTimezone string
	// Streak is the player's streak after the event; Region their region
	// then. Analytics read both from the event log.
	Streak int64
	Region string
}

// Receipt is the response to an activity, stored with its idempotency
// record so a retry gets the same bytes.
type Receipt struct {
	EventID        string `json:"event_id"`
	PointsAwarded  int64  `json:"points_awarded"`
	TotalPoints    int64  `json:"total_points"`
	CurrentStreak  int64  `json:"current_streak"`
	LongestStreak  int64  `json:"longest_streak"`
	StreakExtended bool   `json:"streak_extended"`
	ActivityDate   string `json:"activity_date"`
}

// Commit is one activity's transaction: the idempotency record, the
// event, the day's new totals and the streak update, all or nothing.
type Commit struct {
	// Key is the Idempotency-Key; Hash identifies the request body.
	Key  string
	Hash string
	// Prev is the state read before; Prev.Version 0 means no item yet.
	// The update applies only while the stored version is still Prev's.
	Prev  State
	Next  State
	Event Event
	Day   Day
	// Response is the body stored for retries.
	Response []byte
}

// Replay is a stored idempotency record.
type Replay struct {
	Hash     string
	Response []byte
}

// Entry is one ranked live streak.
type Entry struct {
	Rank      int
	UserID    string
	Streak    int64
	ReachedAt time.Time
}

var (
	// ErrConflict means another activity of the player committed first;
	// read again and retry.
	ErrConflict = errors.New("streaks: the streak changed meanwhile")
	// ErrKeyUsed means the idempotency key was already committed.
	ErrKeyUsed = errors.New("streaks: idempotency key already used")
)

// Store is the source of truth: the Streaks and Activity tables.
type Store interface {
	// Get returns a player's state, strongly consistent; ok is false when
	// the player has none.
	Get(ctx context.Context, user string) (st State, ok bool, err error)
	// Day returns the player's totals of one date, strongly consistent
	// (zero totals when none).
	Day(ctx context.Context, user, date string) (Day, error)
	// Commit writes c in one transaction. It returns ErrKeyUsed when the
	// key exists (whatever else failed) and ErrConflict when the stored
	// version is no longer c.Prev.Version.
	Commit(ctx context.Context, c Commit) error
	// Replay returns the stored record of an idempotency key.
	Replay(ctx context.Context, user, key string) (Replay, bool, error)
	// History returns the player's days with activity from..to
	// (inclusive dates), in any order.
	History(ctx context.Context, user, from, to string) ([]Day, error)
	// Top ranks the live streaks at now, best first (longer, then reached
	// earlier, then user id), globally or in one region, from the
	// streak-ordered indexes: the fallback when Redis cannot answer.
	Top(ctx context.Context, region string, n int, now time.Time) ([]Entry, error)
	// Live calls fn with every streak live at now, in pages: what a
	// rebuild of the Redis boards loads.
	Live(ctx context.Context, now time.Time, fn func([]State) error) error
}

// Cache is the Redis side: the per-player streak cache and the live-streak
// boards. Writes carry the state's version, so the handler's write-through,
// the stream and rebuilds may race in any order.
type Cache interface {
	// Cached returns a player's cached state; ok is false on a miss.
	Cached(ctx context.Context, user string) (st State, ok bool, err error)
	// Put writes states (newer versions only) to the cache and the boards;
	// a Removed state (erasure) takes every trace of the player out.
	Put(ctx context.Context, states ...State) error
	// Top ranks the streaks live at now, globally or in one region, and
	// returns the as_of: the streak processor's newest applied change,
	// read in the same round trip as the board (zero when Redis holds
	// none). It fails while Redis cannot be trusted.
	Top(ctx context.Context, region string, n int, now time.Time) (es []Entry, asOf time.Time, err error)
	// Sweep takes off the boards the streaks that broke by now.
	Sweep(ctx context.Context, now time.Time) (int, error)
	// Rebuild reloads the boards from live, which calls its argument with
	// every live streak in pages.
	Rebuild(ctx context.Context, now time.Time, live func(fn func([]State) error) error) error
}

// BoardsRebuild is a rebuild of the streak boards under way. It may span
// invocations: Save returns the state to resume it from (JobCache's
// ResumeRebuild).
type BoardsRebuild interface {
	// Now is when the rebuild counts streaks as live.
	Now() time.Time
	// Add loads a page of streaks (those not live at Now are left out).
	Add(ctx context.Context, page []State) error
	Save(ctx context.Context) (string, error)
	// Commit makes every rebuilt board live; Abort drops them.
	Commit(ctx context.Context) error
	// Again, after Commit, says a board began late (a region first met
	// mid-rebuild) and the rebuild must go round once more.
	Again() bool
	Abort(ctx context.Context) error
}
