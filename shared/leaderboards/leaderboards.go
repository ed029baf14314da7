// Package leaderboards owns Rally's leaderboards: definitions (policy,
// order, periodic reset in the board's time zone, tie-break, status), score
// submission by game servers (idempotent by match id, applied under the
// board's policy with a conditional DynamoDB transaction), and exact reads —
// top N, a player's rank with neighbours, rank among friends — from the Redis
// ranking engine, or from DynamoDB when Redis cannot be trusted.
//
// Adapters live in sub-packages: dynamo (definitions and scores) and mirror
// (the boards in Redis, over shared/ranking). Profiles and friend lists
// belong to shared/players.
package leaderboards

import (
	"context"
	"errors"
	"time"

	"github.com/rallyhq/rally/shared/players"
)

// Policy says how a submission changes a player's score.
type Policy string

// Policies.
const (
	Best      Policy = "best"      // keep the best score (highest for desc, lowest for asc)
	Increment Policy = "increment" // add the submitted score (points per win)
	Latest    Policy = "latest"    // the most recent match's score replaces the previous one
)

// Order says which scores are better.
type Order string

// Orders.
const (
	Desc Order = "desc" // higher is better
	Asc  Order = "asc"  // lower is better (times, strokes)
)

// Reset says when a board starts over.
type Reset string

// Resets; periods start at midnight in the board's time zone, weeks on
// Monday (ISO 8601).
const (
	Never   Reset = "none"
	Daily   Reset = "daily"
	Weekly  Reset = "weekly"
	Monthly Reset = "monthly"
)

// TieBreak says how equal scores are ranked.
type TieBreak string

// Tie-breaks.
const (
	// Earliest ranks 1..N with no gaps: equal scores by the earlier time
	// the score was reached, then by player id.
	Earliest TieBreak = "earliest"
	// Shared gives equal scores the same rank: 1, 2, 2, 4.
	Shared TieBreak = "shared"
)

// Status says what a board accepts.
type Status string

// Statuses.
const (
	Active   Status = "ACTIVE"   // accepts submissions
	Frozen   Status = "FROZEN"   // readable; submissions refused (e.g. while a tournament is judged)
	Archived Status = "ARCHIVED" // read-only for good
)

// Scope places a board in the game.
type Scope struct {
	Game   string `json:"game,omitempty" dynamodbav:"game,omitempty"`
	Mode   string `json:"mode,omitempty" dynamodbav:"mode,omitempty"`
	Region string `json:"region,omitempty" dynamodbav:"region,omitempty"`
}

// Definition is a leaderboard's configuration.
type Definition struct {
	ID       string
	Title    string
	Policy   Policy
	Order    Order
	Reset    Reset
	TieBreak TieBreak
	Scope    Scope
	Status   Status
	// MaxN is the largest top-N served.
	MaxN int
	// Timezone is the IANA zone periods are cut in.
	Timezone string
	// Regional boards keep a view per region beside the global board (see
	// View); fixed when the board is created.
	Regional bool
	// Partitions, when above 0, spreads each period's board in Redis over
	// that many score-range partitions, each under its own hash tag, so a
	// board larger than one Redis shard spreads over a cluster; fixed when
	// the board is created. At 0 a period's board starts as one sorted set
	// and is partitioned once it outgrows a threshold (RALLY_PARTITION_AT).
	Partitions int
	CreatedAt  time.Time
	UpdatedAt  time.Time
	// Version grows with every change of the definition.
	Version int64
}

// Score is a player's current score on a board in one period.
type Score struct {
	Board    string
	Period   string
	PlayerID string
	Score    int64
	// ReachedAt is when the player reached this score; the earlier wins a
	// tie under Earliest.
	ReachedAt time.Time
	// Version grows with every change; caches keep the newest.
	Version     int64
	LastMatchID string
	UpdatedAt   time.Time
	// Region is the view the score also appears in, on a regional board:
	// the player's region when their last submission was applied.
	Region string
	// Removed is set on a stream change that took the score away
	// (erasure); it comes one version past the score it removed (the rule
	// every stream decoder follows, see shared/streams).
	Removed bool
}

// scoreKey is what a board keeps one score under: a player in a period.
type scoreKey struct{ board, period, player string }

func (s Score) key() scoreKey  { return scoreKey{s.Board, s.Period, s.PlayerID} }
func (s Score) version() int64 { return s.Version }

func (s Score) changedAt() time.Time { return s.UpdatedAt }

// Match is one submission: a game server reporting a player's result.
type Match struct {
	PlayerID   string
	MatchID    string
	Score      int64
	OccurredAt time.Time
	// Region is the player's region as the submission is applied (their
	// profile's), on a regional board; empty otherwise.
	Region string
	// Late is set when the match lands in a period that is not the current
	// one: its submission checks, in its transaction, that the period has
	// not been closed (see Close).
	Late bool
}

// Submission is one accepted submission of a match to a board period, as
// the ScoreEvents stream carries it to analytics.
type Submission struct {
	Board  string
	Period string
	Match
}

// Submitted is the outcome of a submission.
type Submitted struct {
	// Applied is false when the match id was already submitted.
	Applied bool
	// Changed is true when the player's score changed.
	Changed bool
	// Previous is the score before, if the player had one.
	Previous *Score
	// Current is the score after.
	Current Score
}

// Entry is one ranked player.
type Entry struct {
	Rank      int
	PlayerID  string
	Score     int64
	ReachedAt time.Time
}

// Placement is a player's entry and neighbours as the Scores store ranks
// them without Redis, with the board period's size.
type Placement struct {
	Self   Entry
	Window []Entry
	Total  int64
	// Approximate is set when the rank is an estimate (a big board, read
	// from its score histogram instead of counted): the player's true rank
	// lies within Self.Rank ± RankError, and the neighbours are ranked
	// relative to the player.
	Approximate bool
	RankError   int64
}

// BoardPeriod names one period of one board.
type BoardPeriod struct{ Board, Period string }

// ErrNotRanked means the player has no score on the board in that period.
var ErrNotRanked = errors.New("leaderboards: player not ranked")

// Update decides a player's next score from the current one (nil if none);
// changed is false when the submission leaves the score as it is.
type Update func(current *Score) (next Score, changed bool, err error)

// Definitions stores board definitions.
type Definitions interface {
	// Put creates or updates a definition. Changing an immutable field
	// (policy, order, reset, tie-break, time zone) is a Conflict.
	Put(ctx context.Context, d Definition) (Definition, bool, error)
	// Get returns a definition, or a NotFound error.
	Get(ctx context.Context, id string) (Definition, error)
	// List returns every definition.
	List(ctx context.Context) ([]Definition, error)
	// Page returns up to limit definitions that match f, after the board
	// named after ("" from the start); next names the last one returned
	// when more may follow, else "".
	Page(ctx context.Context, f Filter, after string, limit int) (defs []Definition, next string, err error)
}

// Filter selects definitions in a listing: by the game of their scope and
// by status; an empty field selects all.
type Filter struct {
	Game   string `json:"game,omitempty"`
	Status Status `json:"status,omitempty"`
}

// Scores stores scores, the source of truth of every board.
type Scores interface {
	// Submit records the match for d's period exactly once and applies
	// update to the player's score, in one transaction, retrying when a
	// concurrent submission for the same player wins the race.
	Submit(ctx context.Context, d Definition, period string, m Match, update Update) (Submitted, error)
	// Get returns the scores of the given players (absent ones omitted).
	Get(ctx context.Context, board, period string, players []string) ([]Score, error)
	// Members counts the players with a score.
	Members(ctx context.Context, board, period string) (int64, error)
	// Top returns n entries from rank from (1-based) on, ranked, read from
	// the score-ordered index.
	Top(ctx context.Context, d Definition, period string, from, n int) ([]Entry, error)
	// Around returns the player's entry and up to k entries on each side,
	// read from the score-ordered index, and the period's size; ranked
	// exactly on a small board and near the top, else estimated with a
	// bound (Placement.Approximate). ErrNotRanked if unranked.
	Around(ctx context.Context, d Definition, period, player string, k int) (Placement, error)
	// Scan calls fn with every score of a board period, in pages.
	Scan(ctx context.Context, board, period string, fn func([]Score) error) error
	// RemovePlayer deletes the player's score on d in one period ("" for
	// all) with its regional view, keeping their matches recorded, and
	// returns the board periods (views included) that held one.
	RemovePlayer(ctx context.Context, d Definition, player, period string) ([]BoardPeriod, error)
	// Ban refuses the player's submissions from now on and hides every
	// score of theirs on boards (every defined one), returning when the
	// ban began and the board periods it hid a score in.
	Ban(ctx context.Context, player string, boards []string) (time.Time, []BoardPeriod, error)
	// Unban lifts a ban and restores the hidden scores, ranked by each
	// board's order, returning them.
	Unban(ctx context.Context, player string, boards []string, order func(board string) Order) ([]Score, error)
}

// Cache is the Redis side of boards: fast, exact reads, and writes that
// carry DynamoDB's version. Reads fail while Redis cannot be trusted. Top,
// Around and Among also return their as_of: the leaderboard processor's
// newest applied change, read in the same round trip (zero when Redis
// holds none).
type Cache interface {
	Trusted(ctx context.Context) error
	Upsert(ctx context.Context, d Definition, s Score) (rank int, total int64, err error)
	Top(ctx context.Context, d Definition, period string, from, n int) (es []Entry, total int64, asOf time.Time, err error)
	Around(ctx context.Context, d Definition, period, player string, k int) (self Entry, window []Entry, total int64, asOf time.Time, err error)
	Among(ctx context.Context, d Definition, period string, players []string) (es []Entry, asOf time.Time, err error)
	Total(ctx context.Context, d Definition, period string) (int64, error)
	// Apply writes scores, versioned; a Removed one is forgotten.
	Apply(ctx context.Context, d Definition, period string, scores []Score) error
}

// Players is what boards read of players (shared/players): display names
// for the entries, and friend lists for friends-rank.
type Players interface {
	Profiles(ctx context.Context, ids []string) (map[string]players.Profile, error)
	Friends(ctx context.Context, player string) ([]string, error)
}
