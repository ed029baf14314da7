// Package retention declares, once, every family of DynamoDB items and
// Redis keys Rally writes: how its keys look, how long it lives and what
// removes it (a TTL or expiry, an erasure, a job, a newer write in its
// place, or nothing, because it is the source of truth). The README's
// Retention table is rendered from it, and the retention tour
// (tour_test.go) proves it: every item and key a tour of every feature
// leaves belongs to exactly one family, and lives no longer than declared.
//
// A family is named by its store, its table and its key patterns: literal
// text and <placeholders>, each holding only what its name says (an id, a
// reaction kind, a period; see match.go). A new kind of item or key needs
// an entry here, or the tour fails naming it.
package retention

import (
	"time"

	"github.com/rallyhq/rally/shared/schema"
)

// Store is where a family lives.
type Store string

// Stores.
const (
	DynamoDB Store = "DynamoDB"
	Redis    Store = "Redis"
)

// Family is one kind of DynamoDB item or Redis key.
type Family struct {
	// Name says what the items are, in the product's words.
	Name  string
	Store Store
	// Table is the logical name of a DynamoDB family's table
	// (schema.Table.Name); empty for Redis.
	Table string
	// Key is the pattern of a DynamoDB item's partition key, or of a Redis
	// key; Sort is the pattern of the item's sort key, on a table that has
	// one.
	Key, Sort string
	// Where narrows a DynamoDB family to the items whose attribute holds a
	// value (or lacks the attribute): two families may share their keys.
	Where *Cond
	// TTL is how long after From an item expires by itself (the table's
	// TTL attribute, schema.TTL) or a key does (a Redis expiry); zero when
	// nothing expires it.
	TTL  time.Duration
	From string
	// Dated is true when From is a time the item names (its hour, its
	// day, its event) rather than its write: the TTL may then end sooner
	// after the write.
	Dated bool
	// Linger is, on a family with no TTL, how long the few of its keys
	// that do expire live at most (what a rebalance leaves of a partition
	// it emptied); zero when none expires.
	Linger time.Duration
	// Lifetime says how long an item with no TTL lives.
	Lifetime string
	// RemovedBy names what deletes items besides their TTL ("" when
	// nothing does).
	RemovedBy string
	// Bounded is false when the family grows with time at a steady load:
	// it keeps items nothing needs any more (a closed period, a player
	// gone quiet) and nothing removes them. A source of truth kept on
	// purpose (one item per player, edge or board) is bounded.
	Bounded bool
	// Untoured says why the retention tour cannot leave an item of the
	// family behind to be seen (it lives only in the middle of something,
	// or after a failure); empty when the tour leaves some.
	Untoured string
}

// Cond is a condition on one attribute: it holds Value, or, when Value is
// empty, the item has no such attribute.
type Cond struct{ Attr, Value string }

// day is the unit of most TTLs below.
const day = 24 * time.Hour

// Families returns every declared family: DynamoDB's in the order of
// schema.Tables(), then Redis's.
func Families() []Family {
	return append(dynamoFamilies(), redisFamilies()...)
}

func dynamoFamilies() []Family {
	return []Family{
		// Reactions
		{Name: "reaction edge", Store: DynamoDB, Table: schema.Reactions.Name, Key: "<user>", Sort: "<kind>#<target>",
			Lifetime: "kept: the source of truth (an edge taken back stays, REMOVED)", RemovedBy: "the user's erasure", Bounded: true},

		// Counters
		{Name: "reaction count", Store: DynamoDB, Table: schema.Counters.Name, Key: "<kind>#<target>", Sort: schema.CountersTotalSK,
			Lifetime: "kept: one per target, updated in place", Bounded: true},
		{Name: "hourly trending bucket", Store: DynamoDB, Table: schema.Counters.Name, Key: "<kind>#<target>", Sort: "h#<hour>",
			TTL: 49 * time.Hour, From: "the hour's start", Dated: true, Bounded: true},
		{Name: "daily trending bucket", Store: DynamoDB, Table: schema.Counters.Name, Key: "<kind>#<target>", Sort: "d#<day>",
			TTL: 9 * day, From: "the day's start", Dated: true, Bounded: true},
		{Name: "counter marker of an edge counted active", Store: DynamoDB, Table: schema.Counters.Name,
			Key: schema.CountersAppliedPrefix + "<user>", Sort: "<kind>#<target>", Where: &Cond{schema.AttrState, "ACTIVE"},
			Lifetime: "as long as the edge counts: its state is part of the count", RemovedBy: "the count of the edge's deletion (erasure); recompute", Bounded: true},
		{Name: "counter marker of an edge counted inactive", Store: DynamoDB, Table: schema.Counters.Name,
			Key: schema.CountersAppliedPrefix + "<user>", Sort: "<kind>#<target>", Where: &Cond{schema.AttrState, "REMOVED"},
			TTL: 32 * day, From: "its last write", RemovedBy: "the count of the edge's deletion (erasure); recompute", Bounded: true},
		{Name: "counter intent", Store: DynamoDB, Table: schema.Counters.Name, Key: schema.CountersIntentPrefix + "<id>", Sort: schema.CountersIntentSK,
			Lifetime: "until the markers it lists are written", RemovedBy: "the counter processor, or whoever next touches its targets", Bounded: true,
			Untoured: "it lives only between a counter transaction and its markers"},
		{Name: "trending snapshot", Store: DynamoDB, Table: schema.Counters.Name, Key: schema.CountersSnapshotPrefix + "<kind>", Sort: "<window>",
			Lifetime: "one per kind and window, rewritten in place", Bounded: true},
		{Name: "cache generation", Store: DynamoDB, Table: schema.Counters.Name, Key: schema.CountersCachePrefix + "<scope>", Sort: schema.CountersGenSK,
			Lifetime: "one per scope, bumped in place", Bounded: true,
			Untoured: "it is written only when a Redis write fails"},
		{Name: "dirty cache key", Store: DynamoDB, Table: schema.Counters.Name, Key: schema.CountersCachePrefix + "<scope>" + schema.CountersDirtySuffix, Sort: "<redis key>",
			Lifetime: "until the key is repaired", RemovedBy: "the processor's repair, or a rebuild", Bounded: true,
			Untoured: "it is written only when a Redis write fails"},
		{Name: "analytics shipped marker", Store: DynamoDB, Table: schema.Counters.Name, Key: schema.CountersShipPrefix + "<event>", Sort: schema.CountersShipSK,
			TTL: 2 * day, From: "shipping", Bounded: true},
		{Name: "counter version an erasure awaits", Store: DynamoDB, Table: schema.Counters.Name, Key: schema.CountersErasurePrefix + "<hash>", Sort: "<kind>#<target>",
			TTL: 7 * day, From: "the erasure's start", RemovedBy: "the erasure, once the versions are counted", Bounded: true,
			Untoured: "it lives only while an erasure waits for the counter processor"},
		{Name: "processor watermark", Store: DynamoDB, Table: schema.Counters.Name, Key: schema.CountersWatermarkPrefix + "<processor>", Sort: schema.CountersWatermarkSK,
			Lifetime: "one per processor, moved forward in place", Bounded: true},
		{Name: "score histogram slice", Store: DynamoDB, Table: schema.Counters.Name, Key: schema.CountersHistogramPrefix + "<board>#<period>", Sort: "<group>",
			Lifetime: "every period's, closed ones included, until its counts are all zero", RemovedBy: "the last score leaving it (erasure, removal); recompute"},
		{Name: "score histogram marker", Store: DynamoDB, Table: schema.Counters.Name, Key: schema.CountersHistogramMarkPrefix + "<player>", Sort: "<board>#<period>",
			Lifetime: "one per player and period played, closed periods included", RemovedBy: "the player's score leaving (erasure, removal); recompute"},

		// Idempotency
		{Name: "Idempotency-Key record", Store: DynamoDB, Table: schema.Idempotency.Name, Key: "<function>#<caller>#<key>",
			TTL: day, From: "the request", RemovedBy: "the caller's erasure", Bounded: true},

		// Games, Leaderboards
		{Name: "game", Store: DynamoDB, Table: schema.Games.Name, Key: "<game>",
			Lifetime: "kept: the game server's metadata, rewritten in place", Bounded: true},
		{Name: "leaderboard definition", Store: DynamoDB, Table: schema.Leaderboards.Name, Key: "<board>",
			Lifetime: "kept: one per board", Bounded: true},

		// Scores
		{Name: "score", Store: DynamoDB, Table: schema.Scores.Name, Key: "<board>#<period>", Sort: "<player>",
			Lifetime: "every period's, closed ones included: a closed period's archive finds a player's page from it", RemovedBy: "the player's erasure; removal by an operator; a regional view's when its player moves"},
		{Name: "period member count", Store: DynamoDB, Table: schema.Scores.Name, Key: "<board>#<period>", Sort: "#meta",
			Lifetime: "one per period, closed ones included (with the time it closed)"},
		{Name: "ban", Store: DynamoDB, Table: schema.Scores.Name, Key: "#ban#<player>", Sort: "<player>",
			Lifetime: "while the player is banned", RemovedBy: "the unban; the player's erasure", Bounded: true},

		// ScoreEvents
		{Name: "score submission", Store: DynamoDB, Table: schema.ScoreEvents.Name, Key: "<board>#<player>", Sort: "<match>",
			TTL: 90 * day, From: "the submission", RemovedBy: "the player's erasure", Bounded: true},

		// Players, AnalyticsSecrets, Streaks
		{Name: "player profile and friends", Store: DynamoDB, Table: schema.Players.Name, Key: "<player>",
			Lifetime: "kept: the source of truth", RemovedBy: "the player's erasure", Bounded: true},
		{Name: "reverse friend entry", Store: DynamoDB, Table: schema.Players.Name, Key: schema.PlayersListedPrefix + "<player>#<player>",
			Lifetime: "kept while the list names the friend", RemovedBy: "a friend-list PUT that drops the friend; either player's erasure", Bounded: true},
		{Name: "analytics secret", Store: DynamoDB, Table: schema.AnalyticsSecrets.Name, Key: "<user>",
			Lifetime: "kept: the user's pseudonym in the export", RemovedBy: "the user's erasure", Bounded: true},
		{Name: "streak", Store: DynamoDB, Table: schema.Streaks.Name, Key: "<user>",
			Lifetime: "kept: the source of truth", RemovedBy: "the user's erasure", Bounded: true},

		// Activity
		{Name: "points event", Store: DynamoDB, Table: schema.Activity.Name, Key: "<user>", Sort: "evt#<millis>#<event>",
			TTL: 90 * day, From: "the event", Dated: true, RemovedBy: "the user's erasure", Bounded: true},
		{Name: "daily points total", Store: DynamoDB, Table: schema.Activity.Name, Key: "<user>", Sort: "day#<date>",
			TTL: 95 * day, From: "the date", Dated: true, RemovedBy: "the user's erasure", Bounded: true},
		{Name: "activity Idempotency-Key record", Store: DynamoDB, Table: schema.Activity.Name, Key: "<user>", Sort: "idem#<key>",
			TTL: day, From: "the report", RemovedBy: "the user's erasure", Bounded: true},

		// Erasures
		{Name: "erasure record", Store: DynamoDB, Table: schema.Erasures.Name, Key: "<hash>",
			Lifetime: "kept: the hashed record that the user was erased", Bounded: true},

		// DeadLetters
		{Name: "parked batch", Store: DynamoDB, Table: schema.DeadLetters.Name, Key: "dlq#<function>", Sort: "<time>#<batch>",
			TTL: 30 * day, From: "archiving", RemovedBy: "a redrive that applies it", Bounded: true},
		{Name: "parked batch's records", Store: DynamoDB, Table: schema.DeadLetters.Name, Key: "batch#<batch>", Sort: "<chunk>",
			TTL: 30 * day, From: "archiving", RemovedBy: "a redrive that applies them; the erasure of a user they name", Bounded: true},
		{Name: "parked batch's user index", Store: DynamoDB, Table: schema.DeadLetters.Name, Key: "user#<hash>", Sort: "<function>#<batch>",
			TTL: 30 * day, From: "archiving", RemovedBy: "a redrive that applies the batch; the user's erasure", Bounded: true},

		// Jobs
		{Name: "running job", Store: DynamoDB, Table: schema.Jobs.Name, Key: "<job>", Where: &Cond{schema.AttrRunning, "1"},
			Lifetime: "until it finishes (then a finished job)", Bounded: true,
			Untoured: "a job runs only until the tour awaits its end"},
		{Name: "finished job", Store: DynamoDB, Table: schema.Jobs.Name, Key: "<job>", Where: &Cond{schema.AttrRunning, ""},
			TTL: 30 * day, From: "finishing", Bounded: true},

		// Accounts, Exports
		{Name: "account first seen", Store: DynamoDB, Table: schema.Accounts.Name, Key: "<player>",
			Lifetime: "kept: written once", RemovedBy: "the player's erasure", Bounded: true},
		{Name: "data export", Store: DynamoDB, Table: schema.Exports.Name, Key: "<user>", Sort: "<export>",
			TTL: 3 * day, From: "the request, then from the document's readiness", RemovedBy: "the user's erasure", Bounded: true},

		// Archives
		{Name: "archived period head", Store: DynamoDB, Table: schema.Archives.Name, Key: "<board>#<period>", Sort: schema.ArchiveHeadSK,
			Lifetime: "kept: a closed period's size and when it closed, one per board period", Bounded: true},
		{Name: "archived page", Store: DynamoDB, Table: schema.Archives.Name, Key: "<board>#<period>", Sort: schema.ArchivePagePrefix + "<page>",
			Lifetime: "kept: a closed period's final standings, 100 entries a page", RemovedBy: "a player's entry: their erasure", Bounded: true},
		{Name: "archived page pointer", Store: DynamoDB, Table: schema.Archives.Name, Key: "<board>#<period>", Sort: schema.ArchiveKeyPrefix + "<rank key>",
			Lifetime: "kept: one per archived page", Bounded: true},
	}
}

func redisFamilies() []Family {
	return []Family{
		// shared/reactions/mirror
		{Name: "cached edge states", Store: Redis, Key: "rally:rx:<user>",
			TTL: day, From: "the last write", RemovedBy: "the user's erasure", Bounded: true},
		{Name: "cached reaction count", Store: Redis, Key: "rally:count:<kind>:<target>",
			TTL: 7 * day, From: "the last write", Bounded: true},
		{Name: "reaction flips this hour", Store: Redis, Key: "rally:flips:<user>",
			TTL: 2 * time.Hour, From: "the last change", RemovedBy: "the user's erasure", Bounded: true},
		{Name: "all-time trending board", Store: Redis, Key: "rank:{trend:<kind>}:all|<board key>",
			Lifetime: "one per kind, a member per target, like the counts", Bounded: true},
		{Name: "hourly trending board", Store: Redis, Key: "rank:{trend:<kind>}:h:<hour>|<board key>",
			TTL: 26 * time.Hour, From: "the hour's start", Dated: true, Bounded: true},
		{Name: "daily trending board", Store: Redis, Key: "rank:{trend:<kind>}:d:<day>|<board key>",
			TTL: 8 * day, From: "the day's start", Dated: true, Bounded: true},
		{Name: "summed trending window", Store: Redis, Key: "rank:{trend:<kind>}:w<window>:<bucket>|<board key>",
			TTL: 10 * time.Second, From: "the sum", Bounded: true},

		// shared/leaderboards/mirror
		{Name: "leaderboard period board", Store: Redis, Key: "rank:{lb:<board>#<period>}:scores|<board key>",
			Lifetime: "the current period's and the previous one's: a period's close sets its keys to expire once the next period is one period old, at most 32 days later (an all-time board's are kept)", Linger: 32 * day,
			RemovedBy: "the period's close (an expiry), or the schedule once the expiry has passed by the service's clock; a player's entry: their erasure, removal or ban", Bounded: true},
		{Name: "leaderboard period board partition", Store: Redis, Key: "rank:{lb:<board>#<period>~<partition>}:scores|<board key>",
			Lifetime: "as the period board's (expiring at most 32 days after the close); a partition a rebalance empties keeps its meta 1 day", Linger: 32 * day,
			RemovedBy: "the period's close (an expiry), or the schedule once the expiry has passed by the service's clock; a player's entry: their erasure, removal or ban; a rebalance, the partitions it empties", Bounded: true},

		// shared/streaks/mirror
		{Name: "cached streak", Store: Redis, Key: "rally:streak:<user>",
			TTL: 8 * day, From: "the last write", RemovedBy: "the user's erasure", Bounded: true},
		{Name: "global live-streak board", Store: Redis, Key: "rank:{streaks:global}:live|<board key>",
			Lifetime: "one board; an entry while its streak is live", RemovedBy: "an entry: the streak breaking (the sweep), the user's erasure", Bounded: true},
		{Name: "regional live-streak board", Store: Redis, Key: "rank:{streaks:r:<region>}:live|<board key>",
			Lifetime: "one board per region; an entry while its streak is live", RemovedBy: "an entry: the streak breaking (the sweep), the user's erasure", Bounded: true},
		{Name: "streak deadlines", Store: Redis, Key: "rally:streaks:deadlines",
			Lifetime: "one sorted set; a member until its deadline", RemovedBy: "a member: the streak processor's sweep, the user's erasure", Bounded: true},
		{Name: "streak board regions", Store: Redis, Key: "rally:streaks:regions",
			Lifetime: "one set, a member per region", Bounded: true},

		// shared/freshness/mirror, shared/cachegen
		{Name: "processor watermark", Store: Redis, Key: "rally:watermark:<processor>",
			Lifetime: "one per processor, moved forward in place", Bounded: true},
		{Name: "cache generation", Store: Redis, Key: "rally:gen:<scope>",
			Lifetime: "one per scope, advanced in place", Bounded: true},
		{Name: "rebuild position", Store: Redis, Key: "rally:rebuild:<scope>",
			Lifetime: "while a rebuild of Redis runs", RemovedBy: "the rebuild's end", Bounded: true,
			Untoured: "it lives only while a rebuild is under way"},

		// shared/ratelimit, shared/accounts
		{Name: "rate-limit budget", Store: Redis, Key: "rate:rally:<budget>:<subject>",
			TTL: time.Minute, From: "the last request, at most", RemovedBy: "the player's erasure", Bounded: true},
		{Name: "cached first seen", Store: Redis, Key: "rally:seen:<player>",
			Lifetime: "no expiry: a key for every player ever seen (the Accounts item is the copy)", RemovedBy: "the player's erasure"},
	}
}
