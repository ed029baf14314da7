// Package schema declares Rally's DynamoDB tables once: keys, indexes,
// streams and TTL. The CDK stack, the local stack and the stores all read
// these declarations, so the deployed tables and the local ones cannot drift.
package schema

import (
	"os"
	"strings"
)

// AttrType is a DynamoDB key attribute type.
type AttrType string

// Key attribute types.
const (
	String AttrType = "S"
	Number AttrType = "N"
)

// Key is a key attribute.
type Key struct {
	Name string
	Type AttrType
}

// Projection says which attributes an index carries.
type Projection string

// Index projections.
const (
	ProjectAll      Projection = "ALL"
	ProjectKeysOnly Projection = "KEYS_ONLY"
	ProjectInclude  Projection = "INCLUDE"
)

// Index is a local or global secondary index.
type Index struct {
	Name         string
	PartitionKey Key
	SortKey      *Key
	Projection   Projection
	// NonKeyAttributes lists the projected attributes when Projection is
	// ProjectInclude.
	NonKeyAttributes []string
}

// Table is one DynamoDB table.
type Table struct {
	// Name is the logical name; the physical name comes from the
	// environment (see Names).
	Name          string
	PartitionKey  Key
	SortKey       *Key
	LocalIndexes  []Index
	GlobalIndexes []Index
	// Stream is true when the table streams NEW_AND_OLD_IMAGES to processors.
	Stream bool
	// TTLAttribute names the epoch-seconds attribute DynamoDB expires items by.
	TTLAttribute string
	// NoBackup keeps the table out of point-in-time recovery, which every
	// other table has, and out of any other backup: for a table whose
	// deletions must be final, which a restore would undo.
	NoBackup bool
	// Purpose is a one-line description, used in docs and resource descriptions.
	Purpose string
}

// EnvVar is the environment variable that carries the table's physical name.
func (t Table) EnvVar() string { return "RALLY_TABLE_" + strings.ToUpper(t.Name) }

// TTL is the attribute name used for expiry on every table that expires items.
const TTL = "expires_at"

// Key attribute names, shared by the declarations below and the stores.
const (
	AttrPK       = "pk"
	AttrSK       = "sk"
	AttrUserID   = "user_id"
	AttrEdge     = "edge"
	AttrListedAt = "listed_at"
	AttrTarget   = "target_key"
	AttrGameID   = "game_id"
	AttrBoardID  = "leaderboard_id"
	AttrPlayerID = "player_id"
	AttrMatchID  = "match_id"
	AttrRankPK   = "rank_pk"
	AttrRankSK   = "rank_sk"
	AttrLivePK   = "live_pk"
	AttrRegionPK = "region_live_pk"
	AttrLiveSK   = "live_sk"
	AttrBreaksAt = "breaks_at"
	AttrUserHash = "user_hash"
	AttrPending  = "pending"
	AttrAskedAt  = "requested_at"
	// ErasurePending is the value of pending while an erasure is pending:
	// by_pending's one partition.
	ErasurePending = "PENDING"
	// AttrPlayerKey is the player id copied onto each Scores score item
	// (never the period's meta item), keying the sparse by_player index.
	AttrPlayerKey = "player_key"
	// AttrOwner is the caller an Idempotency record belongs to, keying the
	// sparse by_owner index.
	AttrOwner = "owner"
	// AttrJobID keys the Jobs table; AttrRunning (set only while a job
	// runs) and AttrStartedAt key its sparse by_running index, AttrKind and
	// AttrStartedAt its by_kind index.
	AttrJobID     = "job_id"
	AttrRunning   = "running"
	AttrStartedAt = "started_at"
	// AttrListedID and AttrListedBy key the Players by_listed index: on a
	// reverse friend entry, the player listed and the player whose friend
	// list names them.
	AttrListedID = "listed_id"
	AttrListedBy = "listed_by"
)

// UserIDAttrs are the attributes whose value is a user id, on any table:
// logs write these as hashes (obs.WithUsers), never as they are.
var UserIDAttrs = []string{AttrUserID, AttrPlayerID, AttrPlayerKey, AttrOwner, AttrListedID, AttrListedBy}

// Non-key attribute names the stores name in expressions (conditions,
// updates, projections, filters) or read from raw items. The dynamodbav
// struct tags of the item types spell them too (tags must be literals);
// these are the names everything else uses.

// Attributes several tables share.
const (
	// AttrVer is an item's version, grown by one on every write (Reactions,
	// Counters, Leaderboards, Scores) or the version a marker recorded.
	AttrVer       = "ver"
	AttrCreatedAt = "created_at"
	AttrUpdatedAt = "updated_at"
	// AttrStatus is a record's state (Leaderboards, Idempotency, Erasures);
	// status is a DynamoDB reserved word, which the expression builder's
	// name placeholders take care of.
	AttrStatus = "status"
	// AttrListGame and AttrListKey key a board in by_game: its game
	// (scope.game, absent without one) and "<status>#<leaderboard_id>".
	AttrListGame = "list_game"
	AttrListKey  = "list_key"
)

// Reactions attributes.
const (
	AttrKind     = "kind"
	AttrTargetID = "target_id"
	AttrState    = "state"
)

// The reaction fraud controls' attributes: AttrTrend says whether an
// edge's latest activation counts in trending (false for a young
// account's or a fast flipper's; an edge without it counts); AttrUntrended
// is the target key copied onto an ACTIVE edge kept out of trending,
// keying the sparse by_untrended index; AttrTrendTotal is a target's
// all-time trending total beside its count in Counters (a total item
// without it predates the controls and trends as its count).
const (
	AttrTrend     = "trend"
	AttrUntrended = "untrended_key"
	// AttrFlips are an edge's latest flips made with an Idempotency-Key
	// (a toggle remembers its keys on the edge itself).
	AttrFlips      = "flips"
	AttrTrendTotal = "trend_total"
)

// Counters attributes.
const (
	AttrCount    = "count"
	AttrDelta    = "delta"
	AttrItems    = "items"
	AttrAsOf     = "as_of"
	AttrGen      = "gen"
	AttrMarkedAt = "at"
	// AttrIntent is, on a total, the id of the intent written with it;
	// AttrEdges is, on an intent, the edges and versions it counted.
	AttrIntent = "intent"
	AttrEdges  = "edges"
	// AttrNewestChange and AttrAppliedAt are a processor's watermark: the
	// time of the newest change it applied, and when it applied it.
	AttrNewestChange = "newest_change"
	AttrAppliedAt    = "applied_at"
	// AttrBucket is, on a histogram marker, the bucket the player's score
	// is counted in.
	AttrBucket = "bucket"
)

// Idempotency attributes.
const (
	AttrPayloadHash    = "payload_hash"
	AttrToken          = "token"
	AttrLockedUntil    = "locked_until_ms"
	AttrResponseStatus = "response_status"
	AttrResponseBody   = "response_body"
)

// Leaderboards attributes. Policy, order, reset, tie-break, time zone and
// regional are immutable once a board exists.
const (
	AttrTitle    = "title"
	AttrPolicy   = "policy"
	AttrOrder    = "order"
	AttrReset    = "reset"
	AttrTieBreak = "tie_break"
	AttrScope    = "scope"
	AttrMaxN     = "max_n"
	AttrTimezone = "timezone"
	// AttrRegional is "true" on a board with regional views (absent on
	// the others).
	AttrRegional = "regional"
	// AttrPartitions is the number of Redis partitions of a partitioned
	// board (absent on the others).
	AttrPartitions = "partitions"
)

// Scores and ScoreEvents attributes.
const (
	// AttrMembers is the member count on a period's meta item.
	AttrMembers = "members"
	// AttrImportedPrefix, followed by an import job's id, names the
	// attribute of a period's meta item that holds the first line of the
	// job's last chunk counted in AttrMembers (a chunk applied again adds
	// nothing). The import removes it when it catches up.
	AttrImportedPrefix = "imported#"
	// AttrViews is, on a regional board period's meta item, the set of
	// regions that have a view in it (on a score: AttrRegion, its view).
	AttrViews = "views"
	// AttrBanned marks a banned player's score, hidden from every read:
	// out of the score index, the member count and Redis, kept for an
	// unban. AttrBannedAt dates a ban.
	AttrBanned   = "banned"
	AttrBannedAt = "banned_at"
	AttrPeriod   = "period"
	AttrBoard    = "board"
	AttrScore    = "score"
)

// Players attributes.
const (
	AttrDisplayName = "display_name"
	AttrAvatarURL   = "avatar_url"
	AttrRegion      = "region"
	AttrFriendIDs   = "friend_ids"
	// AttrFriendsIndexed marks a player whose friend list has its reverse
	// entries (every list written since the by_listed index exists, and
	// every older one the friends recompute has indexed).
	AttrFriendsIndexed = "friends_indexed"
	// AttrAnalyticsSecret is a player's analytics secret: an
	// AnalyticsSecrets item's, and (before that table existed) a Players
	// item's, which the analytics shipper moves over (see analytics.SecretAttr).
	AttrAnalyticsSecret = "analytics_secret"
	// PlayersListedPrefix begins the key of a reverse friend entry,
	// "listed#<friend>#<player>": player lists friend.
	PlayersListedPrefix = "listed#"
)

// Streaks attributes.
const (
	// AttrStreakVersion is the streak's version, which guards every commit.
	AttrStreakVersion = "version"
	// AttrRegions is the set of every region a streak was ever in.
	AttrRegions = "regions"
)

// Activity attributes (of the evt# items the analytics shipper reads).
const (
	AttrEventType = "event_type"
	AttrSource    = "source"
	AttrDate      = "date"
	AttrPoints    = "points"
)

// Erasures attributes.
const (
	AttrErasureID   = "erasure_id"
	AttrCompletedAt = "completed_at"
	AttrLeaseUntil  = "lease_until"
)

// Index names.
const (
	IndexReactionsByTime    = "by_time"
	IndexReactionsByTarget  = "by_target"
	IndexReactionsUntrended = "by_untrended"
	IndexScoresByScore      = "by_score"
	IndexStreaksLive        = "by_streak"
	IndexStreaksRegion      = "by_region_streak"
	IndexErasuresPending    = "by_pending"
	IndexScoresByPlayer     = "by_player"
	IndexIdempotencyByOwner = "by_owner"
	IndexJobsRunning        = "by_running"
	IndexJobsByKind         = "by_kind"
	IndexExportsPending     = "by_pending"
	IndexBoardsByGame       = "by_game"
	IndexBoardsByStatus     = "by_status"
	IndexPlayersByListed    = "by_listed"
)

// Reactions holds user→target edges (favorites of games, likes of posts).
// by_time is sparse (listed_at exists only while a favorite is ACTIVE;
// likes are never listed) so a newest-first list needs no filter;
// by_target is sparse the same way so a target's ACTIVE edges can be
// counted when rebuilding counters, those kept out of trending under a
// key of their own (untrended#{kind}#{target}) so its all-time trending
// total can be counted too. by_untrended holds only edges kept out of
// trending before that split, until their next change.
var Reactions = Table{
	Name:         "Reactions",
	PartitionKey: Key{AttrUserID, String},
	SortKey:      &Key{AttrEdge, String},
	LocalIndexes: []Index{{
		Name:         IndexReactionsByTime,
		PartitionKey: Key{AttrUserID, String},
		SortKey:      &Key{AttrListedAt, String},
		Projection:   ProjectAll,
	}},
	GlobalIndexes: []Index{{
		Name:         IndexReactionsByTarget,
		PartitionKey: Key{AttrTarget, String},
		SortKey:      &Key{AttrUserID, String},
		Projection:   ProjectKeysOnly,
	}, {
		Name:         IndexReactionsUntrended,
		PartitionKey: Key{AttrUntrended, String},
		SortKey:      &Key{AttrUserID, String},
		Projection:   ProjectKeysOnly,
	}},
	Stream:  true,
	Purpose: "favorite and like edges (user → target), the source of truth for reactions",
}

// Counters holds durable counts, trending buckets, the counter processor's
// applied-version markers and intents, stored top-N snapshots, cache dirty markers,
// analytics shipped markers, the counter versions pending erasures wait
// for and the processors' freshness watermarks.
var Counters = Table{
	Name:         "Counters",
	PartitionKey: Key{AttrPK, String},
	SortKey:      &Key{AttrSK, String},
	TTLAttribute: TTL,
	Purpose:      "durable counts, trending buckets, dedupe markers and top-N snapshots",
}

// Key prefixes and fixed sort keys of the Counters table's item families.
// Each family is written and read by one package; declaring the keys here
// keeps the families from colliding. By pk and sk:
//
//	{kind}#{target}              total              a reaction target's durable count: count, trend_total, ver, updated_at (reactions/dynamo)
//	{kind}#{target}              {span}#{start}     a trending bucket, span h or d (reactions.Span): delta, ver, updated_at, expires_at
//	applied#{user}               {kind}#{target}    the edge version the counter processor last counted: ver, expires_at
//	intent#{id}                  intent             the edges one counter transaction counted, until their markers are written (then deleted): edges, moved
//	snapshot#trending#{kind}     {window}           a stored top-N for reads without Redis: items, as_of
//	cache#{scope}                gen                the generation Redis must reach to be trusted: gen (cachegen)
//	cache#{scope}#dirty          {redis key}        a key whose Redis value may be wrong: at
//	ship#{event id}              ship               an event the analytics shipper delivered: expires_at (analytics)
//	erasure#{user hash}          {kind}#{target}    a counter version a pending erasure waits for: ver, expires_at (privacy)
//	watermark#{processor}        watermark          how far a stream processor got: newest_change, applied_at (freshness)
//	hist#{board}#{period}        {group}            one slice of a board period's score histogram: a count per bucket, attributes b000…b127 (leaderboards/dynamo)
//	histmark#{player}            {board}#{period}   the score version and bucket the histogram counts for the player: ver, bucket (leaderboards/dynamo)
//
// A total also names the last intent written with it (intent). No reaction
// kind (reactions.Kind) is applied, intent, snapshot, cache, ship, erasure,
// watermark, hist or histmark, so a target's partition never falls in
// another family.
const (
	CountersTotalSK        = "total"
	CountersAppliedPrefix  = "applied#"
	CountersIntentPrefix   = "intent#"
	CountersIntentSK       = "intent"
	CountersSnapshotPrefix = "snapshot#trending#"
	CountersCachePrefix    = "cache#"
	CountersGenSK          = "gen"
	CountersDirtySuffix    = "#dirty"
	CountersShipPrefix     = "ship#"
	CountersShipSK         = "ship"
	CountersErasurePrefix  = "erasure#"
	// CountersWatermarkPrefix keys a processor's watermark by its function
	// name (routes.Processor.Function).
	CountersWatermarkPrefix = "watermark#"
	CountersWatermarkSK     = "watermark"
	// CountersHistogramPrefix keys a board period's score histogram;
	// CountersHistogramMarkPrefix a player's histogram markers, one per
	// board period they are counted in (a player's partition, so the
	// processor's marker writes spread like the players).
	CountersHistogramPrefix     = "hist#"
	CountersHistogramMarkPrefix = "histmark#"
)

// Idempotency holds HTTP idempotency records keyed by route, caller and key.
// by_owner lists a caller's records, so erasing a user finds them without a
// scan; it is sparse (records without a caller carry no owner).
var Idempotency = Table{
	Name:         "Idempotency",
	PartitionKey: Key{AttrPK, String},
	GlobalIndexes: []Index{{
		Name:         IndexIdempotencyByOwner,
		PartitionKey: Key{AttrOwner, String},
		Projection:   ProjectKeysOnly,
	}},
	TTLAttribute: TTL,
	Purpose:      "Idempotency-Key records: status, payload hash, stored response",
}

// Games holds game metadata used to enrich favorites lists and top games.
var Games = Table{
	Name:         "Games",
	PartitionKey: Key{AttrGameID, String},
	Purpose:      "game metadata (title, thumbnail) for enrichment",
}

// Leaderboards holds leaderboard definitions.
var Leaderboards = Table{
	Name:         "Leaderboards",
	PartitionKey: Key{AttrBoardID, String},
	// GET /v1/leaderboards queries one of them: by_game (sparse: boards
	// with a game) by game and status, by_status by status. A listing
	// reads only the boards it returns.
	GlobalIndexes: []Index{{
		Name:         IndexBoardsByGame,
		PartitionKey: Key{AttrListGame, String},
		SortKey:      &Key{AttrListKey, String},
		Projection:   ProjectAll,
	}, {
		Name:         IndexBoardsByStatus,
		PartitionKey: Key{AttrStatus, String},
		SortKey:      &Key{AttrBoardID, String},
		Projection:   ProjectAll,
	}},
	Purpose: "leaderboard definitions: policy, order, reset, tie-break, time zone, status",
}

// Scores holds each player's current score per board and period, plus a
// per-period meta item (sk "#meta") counting members. by_score orders a
// period's scores best first, spread over a few write shards so a busy
// board does not hot-spot one index partition; Redis-less reads rank by
// counting in it. by_player lists every board period a player has a score
// in, for erasure; it is sparse because only score items carry player_key.
var Scores = Table{
	Name:         "Scores",
	PartitionKey: Key{AttrPK, String},
	SortKey:      &Key{AttrPlayerID, String},
	GlobalIndexes: []Index{{
		Name:         IndexScoresByScore,
		PartitionKey: Key{AttrRankPK, String},
		SortKey:      &Key{AttrRankSK, String},
		Projection:   ProjectKeysOnly,
	}, {
		Name:         IndexScoresByPlayer,
		PartitionKey: Key{AttrPlayerKey, String},
		SortKey:      &Key{AttrPK, String},
		Projection:   ProjectKeysOnly,
	}},
	Stream:  true,
	Purpose: "current score per player per board and period, the source of truth for leaderboards",
}

// ScoreEvents holds every accepted submission, keyed by match id so a
// repeated match id is recognised.
var ScoreEvents = Table{
	Name:         "ScoreEvents",
	PartitionKey: Key{AttrPK, String},
	SortKey:      &Key{AttrMatchID, String},
	Stream:       true,
	TTLAttribute: TTL,
	Purpose:      "append-only score submissions, idempotent by match id",
}

// Players holds profiles (display names for boards) and friend lists, and
// one reverse entry per (player, friend) pair of every list, written in the
// same transaction as the list: the sparse by_listed index, keyed by the
// friend, finds whose lists name a player without a scan (an erasure).
var Players = Table{
	Name:         "Players",
	PartitionKey: Key{AttrPlayerID, String},
	GlobalIndexes: []Index{{
		Name:         IndexPlayersByListed,
		PartitionKey: Key{AttrListedID, String},
		SortKey:      &Key{AttrListedBy, String},
		Projection:   ProjectKeysOnly,
	}},
	Purpose: "player profiles, friend lists and their reverse entries",
}

// AnalyticsSecrets holds each user's analytics secret, the HMAC key of the
// pseudonymous id their exported events carry. It is a table of its own so
// that only the functions that need it can read it (the analytics shipper,
// which creates secrets, and the erasure processor, which deletes them):
// whoever reads a secret can tie the user's exported events back to them.
//
// It has no backup: erasing a user deletes their secret, which is what
// makes their exported events anonymous (crypto-shredding), and that must
// be final. With point-in-time recovery the secret could be restored for
// 35 days after the erasure, and the events tied back to the user. A
// secret lost with the table only gives its user a new pseudonym.
var AnalyticsSecrets = Table{
	Name:         "AnalyticsSecrets",
	PartitionKey: Key{AttrUserID, String},
	NoBackup:     true,
	Purpose:      "per-user analytics secrets (pseudonymous ids in the export), deleted on erasure; never backed up",
}

// Streaks holds each player's streak, points balance and time-zone
// history. Its two sparse indexes order live-candidate streaks (by the date
// of the last activity, write-sharded) longest first, globally and per
// region, for Redis-less streak leaderboards and rebuilds.
var Streaks = Table{
	Name:         "Streaks",
	PartitionKey: Key{AttrUserID, String},
	GlobalIndexes: []Index{{
		Name:             IndexStreaksLive,
		PartitionKey:     Key{AttrLivePK, String},
		SortKey:          &Key{AttrLiveSK, String},
		Projection:       ProjectInclude,
		NonKeyAttributes: []string{AttrBreaksAt},
	}, {
		Name:             IndexStreaksRegion,
		PartitionKey:     Key{AttrRegionPK, String},
		SortKey:          &Key{AttrLiveSK, String},
		Projection:       ProjectInclude,
		NonKeyAttributes: []string{AttrBreaksAt},
	}},
	Stream:  true,
	Purpose: "streaks and points balances, the source of truth for streaks",
}

// Activity holds, per player, the points event log (evt#…, kept 90 days),
// daily totals (day#YYYY-MM-DD) and activity idempotency records
// (idem#key), written in one transaction with the player's Streaks item.
var Activity = Table{
	Name:         "Activity",
	PartitionKey: Key{AttrUserID, String},
	SortKey:      &Key{AttrSK, String},
	Stream:       true,
	TTLAttribute: TTL,
	Purpose:      "points events, daily totals and activity idempotency records",
}

// Erasures holds one record per erased user, keyed by a hash of the user id:
// the erasure id, its status and times. While an erasure is PENDING the
// record also holds the user id (the job needs it) and the sparse by_pending
// index lists it, so a scheduled run finishes erasures a crash interrupted;
// completing drops both, and the hash is all that stays.
var Erasures = Table{
	Name:         "Erasures",
	PartitionKey: Key{AttrUserHash, String},
	GlobalIndexes: []Index{{
		Name:         IndexErasuresPending,
		PartitionKey: Key{AttrPending, String},
		SortKey:      &Key{AttrAskedAt, String},
		Projection:   ProjectKeysOnly,
	}},
	Stream:  true,
	Purpose: "erasure requests and their hashed audit records",
}

// DeadLetters archives every batch a stream processor parked, with its
// records, the moment it is parked: a stream keeps records 24 hours, and
// an on-failure destination receives only where the batch was. Per batch,
// one summary item (pk dlq#{function}, sk {archived_at}#{id}) and its
// records in gzip'd JSON chunks (pk batch#{id}, sk {chunk}), so a batch of
// a thousand records stays under DynamoDB's item size. A redrive replays
// the records from here and removes the batch.
var DeadLetters = Table{
	Name:         "DeadLetters",
	PartitionKey: Key{AttrPK, String},
	SortKey:      &Key{AttrSK, String},
	TTLAttribute: TTL,
	Purpose:      "parked stream batches with their records, for redrive after the stream's retention",
}

// Jobs holds the operations jobs (rebuild, reconcile, recompute), one item
// each: what was asked, its state and progress, what it found, and the
// runner's checkpoint and lease, so a job outlives any one invocation. Its
// stream starts a job the moment it is asked for and continues it after
// each checkpoint. by_running is sparse (running exists only while a job
// runs): the jobs a scheduled run resumes, and the oldest one's age.
// by_kind finds the newest job of a kind (the last reconcile). Finished
// jobs expire after a while.
var Jobs = Table{
	Name:         "Jobs",
	PartitionKey: Key{AttrJobID, String},
	GlobalIndexes: []Index{{
		Name:         IndexJobsRunning,
		PartitionKey: Key{AttrRunning, String},
		SortKey:      &Key{AttrStartedAt, String},
		Projection:   ProjectKeysOnly,
	}, {
		Name:         IndexJobsByKind,
		PartitionKey: Key{AttrKind, String},
		SortKey:      &Key{AttrStartedAt, String},
		Projection:   ProjectKeysOnly,
	}},
	Stream:       true,
	TTLAttribute: TTL,
	Purpose:      "operations jobs (rebuild, reconcile, recompute) with their progress, findings, checkpoint and lease",
}

// Accounts records when Rally first saw each player (AttrFirstSeen): an
// account younger than a threshold gets half the budgets and its reactions
// stay out of trending (shared/accounts). Erasure deletes the item.
var Accounts = Table{
	Name:         "Accounts",
	PartitionKey: Key{AttrPlayerID, String},
	Purpose:      "when Rally first saw each player, for the young-account fraud controls",
}

// AttrFirstSeen is when Rally first saw a player (an Accounts attribute).
const AttrFirstSeen = "first_seen"

// Exports holds a user's data exports (GDPR access and portability), one
// item each under the user's partition: its status, the document's object
// key, when it expires (AttrTTL, so DynamoDB drops it with its document),
// and while it is pending the export processor's checkpoint and lease.
// Keyed by the user, an erasure finds every export of theirs with one
// query. by_pending is sparse (pending, schema.ErasurePending's value,
// exists only while the export is pending): the exports a scheduled run
// resumes after a crash, oldest first.
var Exports = Table{
	Name:         "Exports",
	PartitionKey: Key{AttrUserID, String},
	SortKey:      &Key{AttrExportID, String},
	GlobalIndexes: []Index{{
		Name:         IndexExportsPending,
		PartitionKey: Key{AttrPending, String},
		SortKey:      &Key{AttrAskedAt, String},
		Projection:   ProjectKeysOnly,
	}},
	Stream:       true,
	TTLAttribute: TTL,
	Purpose:      "a user's data exports: status, document, expiry, and the export processor's checkpoint and lease",
}

// Exports attributes besides the shared ones (status, requested_at,
// pending, lease_until, expires_at).
const (
	AttrExportID = "export_id"
	// AttrObject is the export document's key in the exports bucket.
	AttrObject  = "object"
	AttrReadyAt = "ready_at"
	// The checkpoint: the part under way, its cursor, whether its opening
	// is written and how many of its items, the chunks written so far,
	// and when a failed run may be retried.
	AttrPart     = "part"
	AttrCursor   = "cursor"
	AttrOpened   = "opened"
	AttrWritten  = "written"
	AttrChunks   = "chunks"
	AttrRetryAt  = "retry_at"
	AttrFailures = "failures"
	AttrLeasedBy = "leased_by"
)

// Archives holds the final standings of closed board periods (the close
// job writes them once, exactly, when a period ends): under each board
// period's partition ({board}#{period}, as in Scores) a head item
// (ArchiveHeadSK: the total, the number of pages, when it closed), the
// pages of the final order (ArchivePagePrefix + page number, ArchivePage
// entries each) and, per page, a pointer keyed by the rank key of its
// first entry (ArchiveKeyPrefix + rank key), so a player's page is found
// from their score with one query. Reads of an archived period are
// served from here. No stream: nothing derives from it.
var Archives = Table{
	Name:         "Archives",
	PartitionKey: Key{AttrPK, String},
	SortKey:      &Key{AttrSK, String},
	Purpose:      "the final standings of closed leaderboard periods, in pages, for reads of past periods",
}

// Archives sort keys and attributes.
const (
	ArchiveHeadSK     = "head"
	ArchivePagePrefix = "page#"
	ArchiveKeyPrefix  = "key#"
	// ArchivePage is how many entries an archive page holds.
	ArchivePage = 100
	// AttrEntries is an archive page's entries; AttrPage a pointer's page
	// number; AttrPages and AttrTotal the head's page count and members.
	AttrEntries  = "entries"
	AttrPage     = "page"
	AttrPages    = "pages"
	AttrTotal    = "total"
	AttrClosedAt = "closed_at"
)

// Tables lists every table Rally owns.
func Tables() []Table {
	return []Table{Reactions, Counters, Idempotency, Games, Leaderboards, Scores, ScoreEvents, Players, AnalyticsSecrets, Streaks, Activity, Erasures, DeadLetters, Jobs, Accounts, Exports, Archives}
}

// ByName returns the declared table with the given logical name.
func ByName(name string) (Table, bool) {
	for _, t := range Tables() {
		if t.Name == name {
			return t, true
		}
	}
	return Table{}, false
}

// Names resolves logical table names to physical ones.
type Names map[string]string

// NamesFromEnv reads each table's physical name from its environment
// variable, defaulting to prefix+logical name (the local stack's naming).
func NamesFromEnv(prefix string) Names {
	n := Names{}
	for _, t := range Tables() {
		if v := os.Getenv(t.EnvVar()); v != "" {
			n[t.Name] = v
		} else {
			n[t.Name] = prefix + t.Name
		}
	}
	return n
}

// Of returns the physical name of t.
func (n Names) Of(t Table) string {
	if v, ok := n[t.Name]; ok {
		return v
	}
	return t.Name
}
