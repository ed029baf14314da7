// Package ranking is Rally's ranking engine: exact, deterministic
// leaderboards on Redis sorted sets, shared by player leaderboards, trending
// games and streak leaderboards.
//
// Redis is a rebuildable cache here. Every write carries the version
// DynamoDB gave it and applies only when that version is newer than the one
// already stored, so stream redelivery and out-of-order records change
// nothing; removals leave a versioned tombstone so an older record cannot
// bring an item back.
//
// Ordering is total: the score (by the board's Order), then the earlier
// ReachedAt, then the ID in byte order. The sorted-set score carries the
// score (negated for Desc) and the member is the ReachedAt in fixed-width
// big-endian milliseconds followed by the ID, so Redis's own member order
// breaks ties exactly. A lookup from ID to (ReachedAt, version) lives in many
// small hashes that stay in Redis's compact listpack encoding; their number
// grows with the board in levels (see keys.go).
//
// Every script names all the keys it touches in KEYS, and every key of a
// board carries the board's {hash tag}, so the engine runs unchanged on
// Redis Cluster and ElastiCache Serverless (which refuses scripts that touch
// undeclared keys) as well as on a single Redis or miniredis.
package ranking

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Order says which scores are better.
type Order int

const (
	// Desc ranks higher scores first.
	Desc Order = iota
	// Asc ranks lower scores first (fastest lap, fewest moves).
	Asc
)

// Ties says how equal scores are ranked.
type Ties int

const (
	// Earliest ranks equal scores by who reached the score first, then by
	// ID, so ranks are 1..N with no gaps.
	Earliest Ties = iota
	// Shared gives equal scores the same rank, 1 + the number of entries
	// with a strictly better score: 1, 2, 2, 4. The order of entries within
	// a shared rank is still the Earliest order.
	Shared
)

// Board names one ranked set. Boards with the same Tag share a Redis hash
// slot, so they can be combined (Sum). The key layout is owned by this
// package. Order and Ties must stay the same for the life of a board.
type Board struct {
	Tag   string
	Name  string
	Order Order
	Ties  Ties
	// Partitions, when above 0, spreads the board over score-range
	// partitions, each under its own hash tag (see partition.go), and is
	// how many Rebalance keeps. 0 keeps the board in one sorted set. It
	// must stay the same (zero or not) for the life of a board.
	Partitions int
	// PartitionAt, when above 0 on a board with Partitions 0, lets the
	// board pick its shape: it starts as one sorted set, and Rebalance
	// converts it to score-range partitions (about PartitionAt/2 entries
	// each) once it holds more than PartitionAt entries, while it serves
	// (see convert.go). Callers read and write it the same way in either
	// shape. Any positive value may be used to read and write; only
	// Rebalance acts on the number.
	PartitionAt int64
}

func (b Board) String() string { return b.Tag + "/" + b.Name }

// Item is one versioned value written to a board.
type Item struct {
	ID    string
	Score int64
	// ReachedAt is when the score was reached; earlier wins a tie. It is
	// kept to the millisecond. The zero time (and the Unix epoch, which is
	// stored the same way) sorts before every other time.
	ReachedAt time.Time
	// Version orders the writes of one ID; only a newer version applies.
	// One version is one content: a repeat of a version (a redelivery, a
	// retry) carries what it carried the first time.
	Version int64
	// Removed takes the ID off the board at Version, leaving a tombstone.
	Removed bool
}

// Entry is one ranked item as read back.
type Entry struct {
	ID        string
	Score     int64
	ReachedAt time.Time
	// Rank is 1-based, following the board's Ties.
	Rank int
}

// UpsertResult tells what an Upsert did and where the item stands after it.
type UpsertResult struct {
	// Applied is false when the stored version was the same or newer.
	Applied bool
	// Rank is the item's rank after the call, 0 when it is not on the board.
	Rank int
	// Total is the number of items on the board after the call.
	Total int64
}

// Limits of what the engine stores exactly.
const (
	// MaxScore bounds |score|: every such integer is exact in a double.
	MaxScore = 1 << 53
	// MaxVersion bounds versions, which scripts compare as doubles.
	MaxVersion = 1 << 53
	// MaxIDLen bounds IDs in bytes.
	MaxIDLen = 512
	// MaxPartitions bounds Board.Partitions.
	MaxPartitions = 64
)

var (
	// ErrNotRanked means the ID has no score on the board.
	ErrNotRanked = errors.New("ranking: not ranked")
	// ErrInvalid means an argument is outside what the engine can store
	// exactly; the error text says which.
	ErrInvalid = errors.New("ranking: invalid argument")
	// ErrLoadSuperseded means a load was cancelled before it committed:
	// another load began, or an ID was forgotten (a rebuild from an older
	// snapshot could bring it back). Start the load again.
	ErrLoadSuperseded = errors.New("ranking: load superseded")
)

// Engine reads and writes boards. It is safe for concurrent use.
type Engine struct {
	rdb redis.UniversalClient
	// layouts caches each partitioned board's layout and sizes the
	// partitions it last read, by the board's String (see partition.go).
	layouts, sizes sync.Map
	// shapes caches the shape each auto board was last seen in, by the
	// board's String (see convert.go).
	shapes sync.Map
	// onMove, when set (by tests), hears each phase a partition move enters.
	onMove func(phase string)
}

// New returns an engine over rdb (a single node, a cluster or miniredis).
func New(rdb redis.UniversalClient) *Engine { return &Engine{rdb: rdb} }

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

func (b Board) validate() error {
	switch {
	case b.Tag == "" || strings.ContainsAny(b.Tag, "{}"):
		return invalid("board tag %q must be non-empty and free of braces", b.Tag)
	case b.Name == "" || strings.ContainsRune(b.Name, '|'):
		return invalid("board name %q must be non-empty and free of '|'", b.Name)
	case b.Order != Desc && b.Order != Asc:
		return invalid("board %s: unknown order %d", b, b.Order)
	case b.Ties != Earliest && b.Ties != Shared:
		return invalid("board %s: unknown ties %d", b, b.Ties)
	case b.Partitions < 0 || b.Partitions > MaxPartitions:
		return invalid("board %s: partitions %d outside 0..%d", b, b.Partitions, MaxPartitions)
	case b.PartitionAt < 0:
		return invalid("board %s: partition threshold %d is negative", b, b.PartitionAt)
	}
	return nil
}

func validateID(id string) error {
	if id == "" || len(id) > MaxIDLen {
		return invalid("id must be 1 to %d bytes, got %d", MaxIDLen, len(id))
	}
	return nil
}

func validateVersion(v int64) error {
	if v < 0 || v > MaxVersion {
		return invalid("version %d outside 0..2^53", v)
	}
	return nil
}

func (it Item) validate() error {
	if err := validateID(it.ID); err != nil {
		return err
	}
	if err := validateVersion(it.Version); err != nil {
		return fmt.Errorf("item %s: %w", it.ID, err)
	}
	if it.Removed {
		return nil
	}
	if it.Score > MaxScore || it.Score < -MaxScore {
		return invalid("item %s: score %d outside ±2^53", it.ID, it.Score)
	}
	if _, err := reachedMillis(it.ReachedAt); err != nil {
		return fmt.Errorf("item %s: %w", it.ID, err)
	}
	return nil
}
