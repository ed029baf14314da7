// Package routes declares every Rally endpoint and stream processor once:
// method, path, the Lambda function that serves it, who may call it, and the
// resources it touches. The CDK stack builds one Lambda, one API route and
// least-privilege grants from each declaration; the local stack serves the
// same routes with the same handlers.
package routes

import (
	"slices"
	"strings"
	"time"

	"github.com/rallyhq/rally/shared/schema"
)

// Auth says who may call a route.
type Auth int

const (
	// Player routes need a JWT; the caller is the token's "sub".
	Player Auth = iota + 1
	// Service routes need a SigV4 signature (IAM auth) of a role the
	// route admits (Route.Role).
	Service
)

func (a Auth) String() string {
	switch a {
	case Player:
		return "player"
	case Service:
		return "service"
	}
	return "unknown"
}

// Feature names the part of Rally a route or processor belongs to. Each
// function is wired with its feature alone (shared/<feature>/bind), so it
// links only what it serves; the local stack binds every feature at once.
type Feature string

// Features.
const (
	Reactions    Feature = "reactions"
	Games        Feature = "games"
	Players      Feature = "players"
	Leaderboards Feature = "leaderboards"
	Streaks      Feature = "streaks"
	Analytics    Feature = "analytics"
	Privacy      Feature = "privacy"
	Operations   Feature = "operations"
)

// Uses lists what a function touches; the CDK stack grants exactly this.
type Uses struct {
	// Calls are the DynamoDB actions the function calls, on each table
	// and on each index it reads.
	Calls []Call
	Redis bool
	// Secrets are the keys the function reads from Secrets Manager at
	// start besides the log key, which every function reads (Keys).
	Secrets []Secret
	// Analytics is true when the function sends events to the analytics
	// delivery stream (Firehose).
	Analytics bool
	// Streams are tables whose streams the function reads itself (not
	// through an event source mapping).
	Streams []schema.Table
	// Processors is true when the function needs every stream
	// processor's deployed name (RALLY_FUNCTION_<NAME>).
	Processors bool
	// Invokes is true when the function invokes the stream processors
	// (a redrive).
	Invokes bool
	// Documents is what the function does with the export documents in
	// the exports bucket (shared/exports); 0 means nothing.
	Documents Documents
	// Imports is true when the function reads import files
	// (s3:GetObject on the bucket the stack is given for them).
	Imports bool
}

// Documents is a set of things a function does with the export documents
// in the exports bucket. The CDK stack grants the S3 actions of each, on
// the documents' prefix only, and tells the function the bucket.
type Documents uint8

// What a function does with export documents.
const (
	// LinkDocuments signs links that read a document (a presigned GET:
	// the link carries the signer's permission).
	LinkDocuments Documents = 1 << iota
	// WriteDocuments writes a document's chunks, joins them into the
	// document and deletes the chunks.
	WriteDocuments
	// EraseDocuments lists a user's documents and deletes them.
	EraseDocuments
	// WriteArchive writes the closed leaderboard periods' JSON Lines, in
	// the same bucket under their own prefix (ArchivePrefix).
	WriteArchive
	// StrikeArchive reads a part of those JSON Lines and writes it again
	// without an erased player.
	StrikeArchive
)

// ArchivePrefix is where closed leaderboard periods are archived in the
// exports bucket (leaderboards.ArchivePrefix names each period's).
const ArchivePrefix = "archive/"

// Archive lists d's S3 actions on the archive's objects.
func (d Documents) Archive() []string {
	var out []string
	if d&StrikeArchive != 0 {
		out = append(out, "s3:GetObject")
	}
	if d&(WriteArchive|StrikeArchive) != 0 {
		out = append(out, "s3:PutObject")
	}
	return out
}

// S3 lists d's S3 actions on the documents' objects, and whether d lists
// the bucket, in a fixed order.
func (d Documents) S3() (objects []string, list bool) {
	if d&LinkDocuments != 0 {
		objects = append(objects, "s3:GetObject")
	}
	if d&WriteDocuments != 0 {
		objects = append(objects, "s3:PutObject", "s3:GetObject", "s3:DeleteObject", "s3:AbortMultipartUpload")
	}
	if d&EraseDocuments != 0 {
		objects = append(objects, "s3:DeleteObject")
	}
	slices.Sort(objects)
	return slices.Compact(objects), d&EraseDocuments != 0
}

// Tables lists every table u calls, each once, in the order of Calls.
func (u Uses) Tables() []schema.Table {
	var out []schema.Table
	for _, c := range u.Calls {
		if !slices.ContainsFunc(out, func(o schema.Table) bool { return o.Name == c.Table.Name }) {
			out = append(out, c.Table)
		}
	}
	return out
}

// Route is one HTTP endpoint served by one Lambda function.
type Route struct {
	Method   string
	Path     string // API Gateway syntax: /v1/favorites/{game_id}
	Function string // directory under functions/ and the Lambda's name suffix
	Feature  Feature
	Auth     Auth
	// Role is the least role that may call a service route: GameServer
	// (game servers, and operators) or Operator (operators alone). Player
	// routes declare none.
	Role    Role
	Summary string
	Uses    Uses
	// Budget is what a caller may spend on the route a minute: per player
	// on player routes (with IPBudget per source IP beside it), per
	// calling role on service routes (ServiceBudget).
	Budget Budget
}

// Key is the API Gateway route key, e.g. "POST /v1/favorites/{game_id}".
func (r Route) Key() string { return r.Method + " " + r.Path }

// Timeouts of the functions: a route must finish well inside API
// Gateway's 30 s; a processor's batch of hundreds of records has retries
// inside. Each invocation's context carries its deadline, which bounds the
// work a processor takes on beside its batch (a Redis repair).
const (
	RouteTimeout     = 10 * time.Second
	ProcessorTimeout = 60 * time.Second
)

// StreamRetention is how long a DynamoDB stream keeps a record; MaxParkAge
// is the oldest a record may be when its batch is parked, which leaves the
// archiver half the retention to read it back.
const (
	StreamRetention = 24 * time.Hour
	MaxParkAge      = StreamRetention / 2
)

// Processor is a Lambda fed by a table's stream through an event source
// mapping. A Lambda that reads several streams is declared once per stream,
// with the same Function: one function, one mapping per declaration.
type Processor struct {
	Function string
	Feature  Feature
	Source   schema.Table
	Summary  string
	Uses     Uses
	// BatchSize and BatchWindow trade latency for coalescing.
	BatchSize   int32
	BatchWindow time.Duration
	// MaxRetries and MaxRecordAge bound how long a failing batch blocks its
	// shard before it is sent to the dead-letter queue. MaxRecordAge is at
	// most MaxParkAge, so a parked batch's records are still in the stream
	// when the dlq-archiver reads them (shared/deadletters).
	MaxRetries   int32
	MaxRecordAge time.Duration
	// Tick is how often the processor is also invoked with no records (a
	// schedule), so it repairs Redis and refreshes snapshots even when no
	// writes arrive; 0 means never.
	Tick time.Duration
	// Watermark is true when the processor records how far it got (the
	// time of the newest change it applied, shared/freshness): the reads
	// of what it derives report it as as_of, and operations its lag.
	Watermark bool
	// Compensates says its stream's deletions (an erasure's) move what it
	// derives, so an erasure has a parked deletion applied by it before
	// scrubbing the user from the dead-letter archive.
	Compensates bool
	// Reserved is the function's reserved concurrency (every declaration
	// of one function gives the same): a flood of requests cannot take the
	// account's concurrency from it, and it cannot take more. A stream
	// shard is read by one invocation at a time, so it is sized to the
	// shards its streams may have at peak; the stack may override it
	// (README, Configuration).
	Reserved int32
}

// Calls many functions make.
var (
	// counterReads reads one item of Counters: a durable count or
	// trending snapshot, a cache's generation (cachegen), a processor's
	// watermark (freshness).
	counterReads = On(schema.Counters, GetItem)
	// edgeWrite sets one reaction edge.
	edgeWrite = On(schema.Reactions, UpdateItem)
	// idempotencyKeys claims an Idempotency-Key, stores its response, and
	// releases the claim when the request fails.
	idempotencyKeys = On(schema.Idempotency, PutItem|UpdateItem|DeleteItem)
	// boardDefinition reads one leaderboard's definition.
	boardDefinition = On(schema.Leaderboards, GetItem)
	// byScore reads a board in rank order (the Redis-less reads).
	byScore = OnIndex(schema.Scores, schema.IndexScoresByScore, Query)
	// archived reads a closed period's archive: its head and pages.
	archived = On(schema.Archives, GetItem)
)

// Favorites and likes.
var (
	FavoriteGame = Route{
		Method: "POST", Path: "/v1/favorites/{game_id}", Function: "favorite-game", Feature: Reactions, Auth: Player, Budget: FavoriteBudget,
		Summary: "Favorite a game",
		Uses:    Uses{Calls: []Call{edgeWrite, idempotencyKeys}, Redis: true},
	}
	UnfavoriteGame = Route{
		Method: "DELETE", Path: "/v1/favorites/{game_id}", Function: "unfavorite-game", Feature: Reactions, Auth: Player, Budget: FavoriteBudget,
		Summary: "Remove a game from the caller's favorites",
		Uses:    Uses{Calls: []Call{edgeWrite}, Redis: true},
	}
	ListFavorites = Route{
		Method: "GET", Path: "/v1/users/{user_id}/favorites", Function: "list-favorites", Feature: Reactions, Auth: Player, Budget: ReadBudget,
		Summary: "A user's favorite games, newest first",
		Uses:    Uses{Calls: []Call{OnIndex(schema.Reactions, schema.IndexReactionsByTime, Query), On(schema.Games, BatchGetItem)}, Secrets: []Secret{CursorKey}},
	}
	FavoriteStatus = Route{
		Method: "GET", Path: "/v1/favorites/status", Function: "favorite-status", Feature: Reactions, Auth: Player, Budget: ReadBudget,
		Summary: "Whether a user has favorited each of up to 100 games",
		Uses:    Uses{Calls: []Call{On(schema.Reactions, BatchGetItem), counterReads}, Redis: true},
	}
	CountFavorites = Route{
		Method: "GET", Path: "/v1/games/{game_id}/favorites/count", Function: "count-favorites", Feature: Reactions, Auth: Player, Budget: ReadBudget,
		Summary: "How many players favorite a game",
		Uses:    Uses{Calls: []Call{counterReads}, Redis: true},
	}
	TopGames = Route{
		Method: "GET", Path: "/v1/games/top", Function: "top-games", Feature: Reactions, Auth: Player, Budget: ReadBudget,
		Summary: "Trending games by net favorites in a window",
		Uses:    Uses{Calls: []Call{counterReads, On(schema.Games, BatchGetItem)}, Redis: true},
	}
	PutGame = Route{
		Method: "PUT", Path: "/v1/games/{game_id}", Function: "put-game", Feature: Games, Auth: Service, Role: GameServer, Budget: ServiceBudget,
		Summary: "Set a game's metadata",
		Uses:    Uses{Calls: []Call{On(schema.Games, PutItem)}},
	}
	LikePost = Route{
		Method: "PUT", Path: "/v1/posts/{post_id}/like", Function: "like-post", Feature: Reactions, Auth: Player, Budget: LikeBudget,
		Summary: "Like a post",
		Uses:    Uses{Calls: []Call{edgeWrite}, Redis: true},
	}
	UnlikePost = Route{
		Method: "DELETE", Path: "/v1/posts/{post_id}/like", Function: "unlike-post", Feature: Reactions, Auth: Player, Budget: LikeBudget,
		Summary: "Remove the caller's like of a post",
		Uses:    Uses{Calls: []Call{edgeWrite}, Redis: true},
	}
	ToggleLike = Route{
		Method: "POST", Path: "/v1/posts/{post_id}/like/toggle", Function: "toggle-like", Feature: Reactions, Auth: Player, Budget: LikeBudget,
		Summary: "Flip the caller's like of a post",
		Uses:    Uses{Calls: []Call{On(schema.Reactions, GetItem|UpdateItem)}, Redis: true},
	}
	CountLikes = Route{
		Method: "GET", Path: "/v1/posts/{post_id}/likes/count", Function: "count-likes", Feature: Reactions, Auth: Player, Budget: ReadBudget,
		Summary: "How many players like a post",
		Uses:    Uses{Calls: []Call{counterReads}, Redis: true},
	}
)

// Banning and unbanning find every score of the player (by the
// by_player index and by the periods of their matches) and hide or restore
// each with its member count, in DynamoDB and Redis.
var (
	scoresOfAPlayer = []Call{
		On(schema.Leaderboards, Scan), OnIndex(schema.Scores, schema.IndexScoresByPlayer, Query), On(schema.ScoreEvents, Query),
	}
	banCalls   = append([]Call{On(schema.Scores, GetItem|UpdateItem)}, scoresOfAPlayer...)
	unbanCalls = append([]Call{On(schema.Scores, GetItem|UpdateItem|DeleteItem)}, scoresOfAPlayer...)
)

// Leaderboards.
var (
	PutLeaderboard = Route{
		Method: "PUT", Path: "/v1/leaderboards/{leaderboard_id}", Function: "put-leaderboard", Feature: Leaderboards, Auth: Service, Role: GameServer, Budget: ServiceBudget,
		Summary: "Define or update a leaderboard",
		Uses:    Uses{Calls: []Call{On(schema.Leaderboards, UpdateItem)}},
	}
	ListLeaderboards = Route{
		Method: "GET", Path: "/v1/leaderboards", Function: "list-leaderboards", Feature: Leaderboards, Auth: Player, Budget: ReadBudget,
		Summary: "Leaderboards by game and status",
		// A listing queries an index: by_game with game=, by_status without.
		Uses: Uses{Calls: []Call{
			OnIndex(schema.Leaderboards, schema.IndexBoardsByGame, Query), OnIndex(schema.Leaderboards, schema.IndexBoardsByStatus, Query),
		}, Secrets: []Secret{CursorKey}},
	}
	GetLeaderboard = Route{
		Method: "GET", Path: "/v1/leaderboards/{leaderboard_id}", Function: "get-leaderboard", Feature: Leaderboards, Auth: Player, Budget: ReadBudget,
		Summary: "A leaderboard's definition, current period and size",
		Uses:    Uses{Calls: []Call{boardDefinition, On(schema.Scores, GetItem), counterReads}, Redis: true},
	}
	SubmitScore = Route{
		Method: "POST", Path: "/v1/leaderboards/{leaderboard_id}/scores", Function: "submit-score", Feature: Leaderboards, Auth: Service, Role: GameServer, Budget: ServiceBudget,
		Summary: "Submit a player's match result",
		Uses: Uses{
			Calls: []Call{
				boardDefinition, counterReads, On(schema.Players, BatchGetItem), On(schema.ScoreEvents, PutItem),
				// An unchanged score is checked, a regional score leaving
				// its region's view deleted from it.
				On(schema.Scores, GetItem|ConditionCheckItem|PutItem|UpdateItem|DeleteItem),
			},
			Redis: true,
		},
	}
	RemovePlayerScore = Route{
		Method: "DELETE", Path: "/v1/leaderboards/{leaderboard_id}/players/{player_id}", Function: "remove-player-score", Feature: Leaderboards, Auth: Service, Role: Operator, Budget: ServiceBudget,
		Summary: "Remove a player's score from a board",
		Uses: Uses{
			Calls: []Call{
				boardDefinition, OnIndex(schema.Scores, schema.IndexScoresByPlayer, Query), On(schema.ScoreEvents, Query),
				// The score and its view deleted, each with its member count.
				On(schema.Scores, GetItem|DeleteItem|UpdateItem),
			},
			Redis: true,
		},
	}
	BanPlayer = Route{
		Method: "PUT", Path: "/v1/ops/players/{player_id}/ban", Function: "ban-player", Feature: Leaderboards, Auth: Service, Role: Operator, Budget: ServiceBudget,
		Summary: "Ban a player from every leaderboard",
		Uses:    Uses{Calls: banCalls, Redis: true},
	}
	UnbanPlayer = Route{
		Method: "DELETE", Path: "/v1/ops/players/{player_id}/ban", Function: "unban-player", Feature: Leaderboards, Auth: Service, Role: Operator, Budget: ServiceBudget,
		Summary: "Lift a player's ban",
		Uses:    Uses{Calls: unbanCalls, Redis: true},
	}
	LeaderboardTop = Route{
		Method: "GET", Path: "/v1/leaderboards/{leaderboard_id}/top", Function: "leaderboard-top", Feature: Leaderboards, Auth: Player, Budget: ReadBudget,
		Summary: "The best N players of a period",
		Uses:    Uses{Calls: []Call{boardDefinition, On(schema.Scores, GetItem), byScore, On(schema.Players, BatchGetItem), counterReads, archived}, Redis: true},
	}
	PlayerRank = Route{
		Method: "GET", Path: "/v1/leaderboards/{leaderboard_id}/players/{player_id}/rank", Function: "player-rank", Feature: Leaderboards, Auth: Player, Budget: ReadBudget,
		Summary: "A player's rank, percentile and neighbours",
		// Without Redis, a big board's rank comes from its score histogram (Counters).
		// An archived period's rank: the page that holds the score, found
		// by a query.
		Uses: Uses{Calls: []Call{boardDefinition, On(schema.Scores, GetItem|BatchGetItem), byScore, On(schema.Counters, GetItem|Query), On(schema.Archives, GetItem|Query)}, Redis: true},
	}
	FriendsRank = Route{
		Method: "GET", Path: "/v1/leaderboards/{leaderboard_id}/players/{player_id}/friends-rank", Function: "friends-rank", Feature: Leaderboards, Auth: Player, Budget: ReadBudget,
		Summary: "A player's rank among their friends",
		Uses:    Uses{Calls: []Call{boardDefinition, On(schema.Scores, BatchGetItem), On(schema.Players, GetItem), counterReads, archived}, Redis: true},
	}
	PutFriends = Route{
		Method: "PUT", Path: "/v1/players/{player_id}/friends", Function: "put-friends", Feature: Players, Auth: Service, Role: GameServer, Budget: ServiceBudget,
		Summary: "Replace a player's friend list",
		// The list and its reverse entries change in one transaction,
		// conditioned on the list read (players/dynamo editFriends).
		Uses: Uses{Calls: []Call{On(schema.Players, GetItem|UpdateItem|PutItem|DeleteItem|ConditionCheckItem)}},
	}
	PutProfile = Route{
		Method: "PUT", Path: "/v1/players/{player_id}/profile", Function: "put-profile", Feature: Players, Auth: Service, Role: GameServer, Budget: ServiceBudget,
		Summary: "Set a player's display name, avatar and region",
		Uses:    Uses{Calls: []Call{On(schema.Players, UpdateItem)}},
	}
)

// activityCalls are what recording an activity calls: the player's
// region, their streak, the day and the event (a retry's stored answer),
// and the cache's dirty keys when Redis missed the write.
var activityCalls = []Call{
	On(schema.Players, BatchGetItem), On(schema.Streaks, GetItem|UpdateItem), On(schema.Activity, GetItem|PutItem),
	On(schema.Counters, UpdateItem|BatchWriteItem),
}

// Streaks and points.
var (
	RecordActivity = Route{
		Method: "POST", Path: "/v1/activity", Function: "record-activity", Feature: Streaks, Auth: Player, Budget: ActivityBudget,
		Summary: "Record the caller's activity: points, streak and the day's totals in one transaction",
		Uses:    Uses{Calls: activityCalls, Redis: true},
	}
	// Match activity is a game route despite its /ops prefix: game
	// servers report what their players did.
	ReportActivity = Route{
		Method: "POST", Path: "/v1/ops/activity", Function: "report-activity", Feature: Streaks, Auth: Service, Role: GameServer, Budget: ServiceBudget,
		Summary: "Record a player's match played or won, as the game server saw it: points, streak and the day's totals in one transaction",
		Uses:    Uses{Calls: activityCalls, Redis: true},
	}
	GetStreak = Route{
		Method: "GET", Path: "/v1/users/{user_id}/streak", Function: "get-streak", Feature: Streaks, Auth: Player, Budget: ReadBudget,
		Summary: "A player's streak as they see it today, and their points balance",
		Uses:    Uses{Calls: []Call{On(schema.Streaks, GetItem), counterReads}, Redis: true},
	}
	PointsHistory = Route{
		Method: "GET", Path: "/v1/users/{user_id}/points/history", Function: "points-history", Feature: Streaks, Auth: Player, Budget: ReadBudget,
		Summary: "The caller's points per day, newest first",
		Uses:    Uses{Calls: []Call{On(schema.Streaks, GetItem), On(schema.Activity, Query)}},
	}
	StreaksTop = Route{
		Method: "GET", Path: "/v1/streaks/top", Function: "streaks-top", Feature: Streaks, Auth: Player, Budget: ReadBudget,
		Summary: "The longest live streaks, globally or in a region",
		Uses: Uses{Calls: []Call{
			OnIndex(schema.Streaks, schema.IndexStreaksLive, Query), OnIndex(schema.Streaks, schema.IndexStreaksRegion, Query), counterReads,
		}, Redis: true},
	}
)

// StreakProcessor mirrors the Streaks stream into the streak cache and the
// live-streak boards.
var StreakProcessor = Processor{
	Function: "streak-processor",
	Feature:  Streaks,
	Source:   schema.Streaks,
	Summary:  "Keeps the streak cache and live-streak boards, takes broken streaks off, repairs what Redis lost",
	Uses: Uses{
		Calls: []Call{
			On(schema.Streaks, GetItem|BatchGetItem), OnIndex(schema.Streaks, schema.IndexStreaksLive, Query),
			On(schema.Counters, GetItem|Query|UpdateItem|DeleteItem|BatchWriteItem),
		},
		Redis: true,
	},
	BatchSize:    500,
	BatchWindow:  0,
	MaxRetries:   8,
	MaxRecordAge: 6 * time.Hour,
	Tick:         time.Minute,
	Watermark:    true,
	Compensates:  true,
	// Streaks change once per activity: fewer partitions than Reactions
	// or Scores.
	Reserved: 25,
}

// Privacy. An HTTP API route has one authorizer, so an endpoint open to a
// player (for themselves) and to operators is declared twice, with one
// function: under /v1/users for players (JWT) and under /v1/ops for the
// operator role (IAM).
var (
	EraseUser = Route{
		Method: "DELETE", Path: "/v1/users/{user_id}", Function: "erase-user", Feature: Privacy, Auth: Player, Budget: ErasureBudget,
		Summary: "Erase the caller and everything Rally holds about them",
		Uses:    Uses{Calls: []Call{On(schema.Erasures, PutItem|GetItem)}, Secrets: []Secret{ErasureKey}},
	}
	EraseUserByService = Route{
		Method: "DELETE", Path: "/v1/ops/users/{user_id}", Function: "erase-user", Feature: Privacy, Auth: Service, Role: Operator, Budget: ServiceBudget,
		Summary: "Erase a user and everything Rally holds about them",
		Uses:    Uses{Calls: []Call{On(schema.Erasures, PutItem|GetItem)}, Secrets: []Secret{ErasureKey}},
	}
	ErasureStatus = Route{
		Method: "GET", Path: "/v1/users/{user_id}/erasure", Function: "erasure-status", Feature: Privacy, Auth: Player, Budget: ReadBudget,
		Summary: "Whether the caller's erasure is still pending or complete",
		Uses:    Uses{Calls: []Call{On(schema.Erasures, GetItem)}, Secrets: []Secret{ErasureKey}},
	}
	ErasureStatusByService = Route{
		Method: "GET", Path: "/v1/ops/users/{user_id}/erasure", Function: "erasure-status", Feature: Privacy, Auth: Service, Role: Operator, Budget: ServiceBudget,
		Summary: "Whether a user's erasure is still pending or complete",
		Uses:    Uses{Calls: []Call{On(schema.Erasures, GetItem)}, Secrets: []Secret{ErasureKey}},
	}
)

// A user's own data (exports). Asking reads the user's erasure record (an
// erasing user is refused, and an erased one unless Rally saw them since:
// their first-seen time) and their pending export (asked again, it is the
// answer); the export processor writes the document.
var (
	// A request looks the user's erasure up, and a new export's documents
	// are kept under the user's erasure hash.
	exportRequest = Uses{Calls: []Call{On(schema.Erasures, GetItem), On(schema.Accounts, GetItem), On(schema.Exports, Query|PutItem)}, Secrets: []Secret{ErasureKey}}
	exportStatus  = Uses{Calls: []Call{On(schema.Exports, GetItem)}, Documents: LinkDocuments}

	ExportUser = Route{
		Method: "POST", Path: "/v1/users/{user_id}/export", Function: "export-user", Feature: Privacy, Auth: Player, Budget: ExportBudget,
		Summary: "Export everything Rally holds about the caller, as one JSON document",
		Uses:    exportRequest,
	}
	// ExportUserByService is operator-only (DESIGN, Roles).
	ExportUserByService = Route{
		Method: "POST", Path: "/v1/ops/users/{user_id}/export", Function: "export-user", Feature: Privacy, Auth: Service, Role: Operator, Budget: ServiceBudget,
		Summary: "Export everything Rally holds about a user, as one JSON document",
		Uses:    exportRequest,
	}
	ExportStatus = Route{
		Method: "GET", Path: "/v1/users/{user_id}/exports/{export_id}", Function: "export-status", Feature: Privacy, Auth: Player, Budget: ReadBudget,
		Summary: "Whether the caller's export is ready, and a link to its document",
		Uses:    exportStatus,
	}
	// ExportStatusByService is operator-only (DESIGN, Roles).
	ExportStatusByService = Route{
		Method: "GET", Path: "/v1/ops/users/{user_id}/exports/{export_id}", Function: "export-status", Feature: Privacy, Auth: Service, Role: Operator, Budget: ServiceBudget,
		Summary: "Whether a user's export is ready, and a link to its document",
		Uses:    exportStatus,
	}
)

// ExportProcessor writes exports: started by the Exports stream, it
// continues each export after every checkpoint it leaves (the stream
// hands it the record again), and its tick resumes any export a crash or
// a failure left. It reads every feature's items of the user.
var ExportProcessor = Processor{
	Function: "export-processor",
	Feature:  Privacy,
	Source:   schema.Exports,
	Summary:  "Writes each user's export, a part per feature, across invocations: checkpointed, leased, resumed on a schedule",
	Uses: Uses{
		Calls: []Call{
			On(schema.Exports, GetItem|UpdateItem), OnIndex(schema.Exports, schema.IndexExportsPending, Query),
			// An erased or erasing user's export is abandoned; the
			// erasure record itself is a part of the document.
			On(schema.Erasures, GetItem),
			On(schema.Accounts, GetItem),
			On(schema.Players, GetItem),
			On(schema.Reactions, Query),
			On(schema.Leaderboards, Scan), OnIndex(schema.Scores, schema.IndexScoresByPlayer, Query), On(schema.Scores, BatchGetItem),
			On(schema.ScoreEvents, Query),
			On(schema.Streaks, GetItem), On(schema.Activity, Query),
		},
		Documents: WriteDocuments,
		// It looks the user's erasure up by its hash.
		Secrets: []Secret{ErasureKey},
	},
	BatchSize:    10,
	BatchWindow:  0,
	MaxRetries:   3,
	MaxRecordAge: 6 * time.Hour,
	Tick:         time.Minute,
	// Exports are rare, each leased to one run: a burst waits its turn
	// rather than take the read capacity the game needs.
	Reserved: 5,
}

// ErasureProcessor carries out erasures: started by the Erasures stream,
// and on every tick it resumes any erasure still pending (one a crash
// interrupted, or one waiting for a processor to catch up).
var ErasureProcessor = Processor{
	Function: "erasure-processor",
	Feature:  Privacy,
	Source:   schema.Erasures,
	Summary:  "Erases users everywhere: reactions with count compensation, scores, profiles, friends, streaks, activity, idempotency records, analytics secrets, exports, Redis",
	Uses: Uses{
		Calls: []Call{
			On(schema.Erasures, GetItem|UpdateItem), OnIndex(schema.Erasures, schema.IndexErasuresPending, Query),
			On(schema.Reactions, Query|DeleteItem),
			// Besides its own records, it holds the markers of the edges
			// it deletes and finishes a count intent the counter
			// processor left (its markers; what it moved marked dirty in
			// Redis's generation, UpdateItem).
			On(schema.Counters, BatchGetItem|Query|PutItem|UpdateItem|DeleteItem|BatchWriteItem),
			On(schema.Idempotency, BatchWriteItem), OnIndex(schema.Idempotency, schema.IndexIdempotencyByOwner, Query),
			On(schema.Leaderboards, Scan),
			On(schema.Scores, GetItem|UpdateItem|DeleteItem), OnIndex(schema.Scores, schema.IndexScoresByPlayer, Query),
			// A closed period's archive: the page that holds the user, struck.
			On(schema.Archives, GetItem|Query|PutItem|UpdateItem|DeleteItem),
			On(schema.ScoreEvents, Query|BatchWriteItem),
			// Whose lists name the user: the reverse entries' index, each
			// list edited with its entry in one transaction.
			On(schema.Players, GetItem|UpdateItem|DeleteItem|ConditionCheckItem|BatchWriteItem),
			OnIndex(schema.Players, schema.IndexPlayersByListed, Query),
			On(schema.Streaks, GetItem|BatchWriteItem), On(schema.Activity, Query|BatchWriteItem),
			On(schema.Accounts, DeleteItem),
			// It deletes a user's analytics secret and reads none.
			On(schema.AnalyticsSecrets, DeleteItem),
			// It scrubs the user from parked batches (under their lease),
			// having their parked deletions applied first (Invokes).
			On(schema.DeadLetters, Query|GetItem|PutItem|UpdateItem|DeleteItem|BatchWriteItem),
			// A user's exports: their records and documents.
			On(schema.Exports, Query|BatchWriteItem),
		},
		Redis:      true,
		Processors: true,
		Invokes:    true,
		// It deletes a user's export documents and strikes them from the
		// closed periods' JSON Lines.
		Documents: EraseDocuments | StrikeArchive,
		// It waits on the counter processor under the user's erasure hash.
		Secrets: []Secret{ErasureKey},
	},
	BatchSize:    10,
	BatchWindow:  0,
	MaxRetries:   3,
	MaxRecordAge: 6 * time.Hour,
	Tick:         time.Minute,
	// Erasures are rare and each is leased to one run.
	Reserved: 5,
}

// analyticsShipper reads one stream for the analytics shipper.
func analyticsShipper(source schema.Table) Processor {
	return Processor{
		Function: "analytics-shipper",
		Feature:  Analytics,
		Source:   source,
		Summary:  "Maps domain changes to versioned analytics events and ships them to Firehose, each once",
		Uses: Uses{
			Calls: []Call{
				On(schema.AnalyticsSecrets, BatchGetItem|GetItem|PutItem),
				// A secret is stored only while its user is not erased.
				On(schema.Erasures, ConditionCheckItem),
				// Which events it shipped.
				On(schema.Counters, BatchGetItem|BatchWriteItem),
				// Of Players it reads and removes only the analytics
				// secret deployments kept there before AnalyticsSecrets,
				// moving it over (analytics.Pseudonyms): never a profile
				// or friend list. A batch's new players are looked up
				// 100 a call.
				{Table: schema.Players, Actions: BatchGetItem | GetItem | UpdateItem, Attributes: []string{schema.AttrAnalyticsSecret}},
			},
			Analytics: true,
			// The erasure check looks the user's record up by its hash.
			Secrets: []Secret{ErasureKey},
		},
		// Firehose buffers anyway; large batches mean fewer PutRecordBatch calls.
		BatchSize:    1000,
		BatchWindow:  5 * time.Second,
		MaxRetries:   10,
		MaxRecordAge: 6 * time.Hour,
		// One invocation per shard of three streams; analytics may lag
		// behind a peak (Firehose buffers minutes anyway).
		Reserved: 50,
	}
}

// The analytics shipper reads the Reactions, ScoreEvents and Activity
// streams (Reactions' second reader, after the counter processor).
// AnalyticsShipper is its Reactions mapping, and names the function.
var (
	AnalyticsShipper     = analyticsShipper(schema.Reactions)
	AnalyticsScoreEvents = analyticsShipper(schema.ScoreEvents)
	AnalyticsActivity    = analyticsShipper(schema.Activity)
)

// LeaderboardProcessor mirrors the Scores stream into the ranking engine.
var LeaderboardProcessor = Processor{
	Function: "leaderboard-processor",
	Feature:  Leaderboards,
	Source:   schema.Scores,
	Summary:  "Applies score changes to Redis boards, versioned, and repairs boards Redis lost",
	Uses: Uses{
		Calls: []Call{
			On(schema.Leaderboards, GetItem|Scan), On(schema.Scores, GetItem|Query),
			// The score histograms: markers read in batches, moved in
			// transactions with the bucket counts.
			On(schema.Counters, GetItem|BatchGetItem|Query|PutItem|UpdateItem|DeleteItem|BatchWriteItem),
		},
		Redis: true,
	},
	// Submissions already write Redis; the stream makes it certain, with
	// no batching window so the repair is never held back. (Windows are
	// whole seconds.)
	BatchSize:    500,
	BatchWindow:  0,
	MaxRetries:   8,
	MaxRecordAge: 6 * time.Hour,
	Tick:         time.Minute,
	Watermark:    true,
	Compensates:  true,
	// Scores take a write per submission: one of the two busiest streams.
	Reserved: 50,
}

// CounterProcessor keeps counts, trending windows and membership caches from
// the Reactions stream.
var CounterProcessor = Processor{
	Function: "counter-processor",
	Feature:  Reactions,
	Source:   schema.Reactions,
	Summary:  "Coalesces reaction changes into counts and trending buckets, exactly once",
	Uses: Uses{
		Calls: []Call{On(schema.Counters, GetItem|BatchGetItem|Query|Scan|PutItem|UpdateItem|DeleteItem|BatchWriteItem)},
		Redis: true,
	},
	// No batching window: Lambda takes whole seconds, and a one-second
	// window alone would put a count's write → visible p95 past 300 ms.
	// Each batch still collapses a hot target's changes into one write of
	// its count (Counts.Apply), so a hot game's count item is written at
	// most once per batch, a few times a second per shard.
	BatchSize:    500,
	BatchWindow:  0,
	MaxRetries:   8,
	MaxRecordAge: 6 * time.Hour,
	Tick:         time.Minute,
	Compensates:  true,
	Watermark:    true,
	// Reactions take a write per favorite and like: one of the two
	// busiest streams.
	Reserved: 50,
}

// All lists every HTTP route.
func All() []Route {
	return withEdge(
		FavoriteGame, UnfavoriteGame, ListFavorites, FavoriteStatus, CountFavorites, TopGames, PutGame,
		LikePost, UnlikePost, ToggleLike, CountLikes,
		PutLeaderboard, ListLeaderboards, GetLeaderboard, SubmitScore, RemovePlayerScore, BanPlayer, UnbanPlayer, LeaderboardTop, PlayerRank, FriendsRank, PutFriends, PutProfile,
		RecordActivity, ReportActivity, GetStreak, PointsHistory, StreaksTop,
		EraseUser, EraseUserByService, ErasureStatus, ErasureStatusByService,
		ExportUser, ExportUserByService, ExportStatus, ExportStatusByService,
		ListDeadLetters, RedriveDeadLetters, OpsHealth, StartJob, GetJob,
	)
}

// BudgetsInRedis reports whether r's budgets are kept in Redis: on every
// player route, and on the service routes that use Redis anyway. The
// others' functions have no Redis (they stay out of the VPC), so each
// instance keeps their budgets in process.
func (r Route) BudgetsInRedis() bool { return r.Auth == Player || r.Uses.Redis }

// EdgeCalls are what the edge of every player route calls: it reads a
// player's first-seen time and records it (shared/accounts).
var EdgeCalls = []Call{On(schema.Accounts, GetItem|UpdateItem)}

// withEdge adds to player routes what every function's edge uses before
// the route's own work (shared/app's gate): Redis, where the budgets are
// kept, and the Accounts table, where first-seen times are read and
// recorded. A service route that uses no Redis otherwise stays out of the
// VPC: its budget is kept in process by each instance, under the API
// stage's throttle.
func withEdge(rs ...Route) []Route {
	for i, r := range rs {
		if !r.BudgetsInRedis() {
			continue
		}
		rs[i].Uses.Redis = true
		if r.Auth == Player {
			rs[i].Uses.Calls = append(slices.Clone(r.Uses.Calls), EdgeCalls...)
		}
	}
	return rs
}

// Watermarked lists the processors that record a watermark.
func Watermarked() []Processor {
	var out []Processor
	for _, p := range Processors() {
		if p.Watermark {
			out = append(out, p)
		}
	}
	return out
}

// Processors lists every stream processor.
func Processors() []Processor {
	return []Processor{
		CounterProcessor, LeaderboardProcessor, StreakProcessor,
		AnalyticsShipper, AnalyticsScoreEvents, AnalyticsActivity,
		ErasureProcessor, JobRunner, ExportProcessor,
	}
}

// Operations: what an operating team calls, with service credentials.
var (
	ListDeadLetters = Route{
		Method: "GET", Path: "/v1/ops/dlq", Function: "list-dead-letters", Feature: Operations, Auth: Service, Role: Operator, Budget: ServiceBudget,
		Summary: "The batches stream processors parked, archived with their records",
		Uses:    Uses{Calls: []Call{On(schema.DeadLetters, Query)}},
	}
	RedriveDeadLetters = Route{
		Method: "POST", Path: "/v1/ops/dlq/redrive", Function: "redrive-dead-letters", Feature: Operations, Auth: Service, Role: Operator, Budget: ServiceBudget,
		Summary: "Replay parked batches through their processors; remove what applied",
		// A batch that fails again keeps its rest archived (PutItem); a
		// batch is leased while it is redriven (UpdateItem), and an erased
		// user's records are dropped (Erasures, by the user's erasure
		// hash).
		Uses: Uses{Calls: []Call{
			On(schema.DeadLetters, Query|GetItem|PutItem|UpdateItem|DeleteItem|BatchWriteItem), On(schema.Erasures, BatchGetItem),
		}, Processors: true, Invokes: true, Secrets: []Secret{ErasureKey}},
	}
)

// Jobs and health.
var (
	OpsHealth = Route{
		Method: "GET", Path: "/v1/ops/health", Function: "ops-health", Feature: Operations, Auth: Service, Role: Operator, Budget: ServiceBudget,
		Summary: "Whether Redis and DynamoDB answer, how far behind each processor is, parked batches, running jobs, pending erasures and the last reconcile",
		Uses: Uses{
			Calls: []Call{
				counterReads, On(schema.DeadLetters, Query), On(schema.Jobs, GetItem),
				OnIndex(schema.Jobs, schema.IndexJobsRunning, Query), OnIndex(schema.Jobs, schema.IndexJobsByKind, Query),
				OnIndex(schema.Erasures, schema.IndexErasuresPending, Query),
			},
			Redis: true,
		},
	}
	StartJob = Route{
		Method: "POST", Path: "/v1/ops/jobs", Function: "start-job", Feature: Operations, Auth: Service, Role: Operator, Budget: ServiceBudget,
		Summary: "Start a rebuild, reconcile or recompute job",
		Uses:    Uses{Calls: []Call{boardDefinition, On(schema.Jobs, PutItem)}},
	}
	GetJob = Route{
		Method: "GET", Path: "/v1/ops/jobs/{job_id}", Function: "get-job", Feature: Operations, Auth: Service, Role: Operator, Budget: ServiceBudget,
		Summary: "A job's state, progress and findings",
		Uses:    Uses{Calls: []Call{On(schema.Jobs, GetItem)}},
	}
)

// JobRunner runs the operations jobs: the Jobs stream hands it each job
// when asked for and after each checkpoint, and its tick resumes jobs a
// crash left, and starts the scheduled reconcile.
var JobRunner = Processor{
	Function: "job-runner",
	Feature:  Operations,
	Source:   schema.Jobs,
	Summary:  "Runs rebuild, reconcile, recompute and import jobs across invocations, checkpointed and leased; starts the daily reconcile",
	Uses: Uses{
		Calls: []Call{
			// Its own jobs, and the last reconcile for the schedule.
			On(schema.Jobs, GetItem|PutItem|UpdateItem),
			OnIndex(schema.Jobs, schema.IndexJobsRunning, Query), OnIndex(schema.Jobs, schema.IndexJobsByKind, Query),
			OnIndex(schema.Reactions, schema.IndexReactionsByTarget, Query|Scan), OnIndex(schema.Reactions, schema.IndexReactionsUntrended, Query),
			// A recompute sets every edge's counter marker to its state
			// (it reads every edge, and the edges of stale markers).
			On(schema.Reactions, Scan|BatchGetItem),
			// A recompute rewrites score histograms and their markers,
			// and the counter markers.
			On(schema.Counters, BatchGetItem|Query|Scan|PutItem|UpdateItem|DeleteItem|BatchWriteItem),
			// Its schedule keys boards defined before by_game in it.
			On(schema.Leaderboards, GetItem|Scan|UpdateItem), On(schema.Scores, GetItem|Query|UpdateItem),
			// An import reads a chunk's scores, matches and bans in
			// batches and writes their new state in batches.
			On(schema.Scores, BatchGetItem|BatchWriteItem), On(schema.ScoreEvents, BatchGetItem|BatchWriteItem),
			On(schema.Reactions, BatchWriteItem), On(schema.Streaks, BatchWriteItem),
			On(schema.Streaks, BatchGetItem|Scan|UpdateItem), OnIndex(schema.Streaks, schema.IndexStreaksLive, Query),
			// A close marks its period closed, walks the score index and
			// writes the archive's pages and head.
			OnIndex(schema.Scores, schema.IndexScoresByScore, Query), On(schema.Archives, GetItem|PutItem|BatchWriteItem),
			// A friends recompute writes the reverse entries of the lists
			// older than them.
			On(schema.Players, Scan|PutItem|UpdateItem|ConditionCheckItem),
		},
		Redis: true,
		// An import reads its file from the import bucket.
		Imports: true,
		// A close writes its period's JSON Lines.
		Documents: WriteArchive,
	},
	// One job per invocation is the usual case: a job's records come one
	// checkpoint at a time.
	BatchSize:    10,
	BatchWindow:  0,
	MaxRetries:   4,
	MaxRecordAge: time.Hour,
	Tick:         time.Minute,
	// Jobs are few, each leased to one runner.
	Reserved: 5,
}

// Consumer is a Lambda fed by SQS queues.
type Consumer struct {
	Function string
	Feature  Feature
	Summary  string
	Uses     Uses
	// Reserved is the function's reserved concurrency, as a processor's.
	Reserved int32
}

// DlqArchiver archives every batch a processor parks: it is fed by every
// processor's dead-letter queue, whose messages say only where the batch
// was, and reads the records from the stream while it still holds them.
var DlqArchiver = Consumer{
	Function: "dlq-archiver",
	Feature:  Operations,
	Summary:  "Archives each parked stream batch with its records, read from the stream while it holds them",
	Uses: Uses{
		// It leaves out the records of users erased since they were
		// written (Erasures), and indexes each batch by the erasure hash
		// of the users it names.
		Calls:      []Call{On(schema.DeadLetters, Query|PutItem|BatchWriteItem), On(schema.Erasures, BatchGetItem)},
		Streams:    streamTables(),
		Processors: true,
		Secrets:    []Secret{ErasureKey},
	},
	// Parked batches are rare; a message it cannot take now waits in its
	// queue.
	Reserved: 10,
}

// Consumers lists every queue consumer.
func Consumers() []Consumer { return []Consumer{DlqArchiver} }

func streamTables() []schema.Table {
	var out []schema.Table
	for _, t := range schema.Tables() {
		if t.Stream {
			out = append(out, t)
		}
	}
	return out
}

// UsesOf is what the function named function uses, over every declaration
// that names it (a route twice, a processor once per stream); ok is false
// for an undeclared name.
func UsesOf(function string) (u Uses, ok bool) {
	add := func(v Uses) {
		ok = true
		u.Calls = MergeCalls(append(u.Calls, v.Calls...))
		u.Streams = append(u.Streams, v.Streams...)
		u.Redis = u.Redis || v.Redis
		u.Secrets = MergeSecrets(u.Secrets, v.Secrets)
		u.Analytics = u.Analytics || v.Analytics
		u.Processors = u.Processors || v.Processors
		u.Invokes = u.Invokes || v.Invokes
		u.Documents |= v.Documents
		u.Imports = u.Imports || v.Imports
	}
	for _, r := range All() {
		if r.Function == function {
			add(r.Uses)
		}
	}
	for _, p := range Processors() {
		if p.Function == function {
			add(p.Uses)
		}
	}
	for _, c := range Consumers() {
		if c.Function == function {
			add(c.Uses)
		}
	}
	return u, ok
}

// FunctionEnvVar is the environment variable that carries the deployed
// name of function (RALLY_FUNCTION_COUNTER_PROCESSOR).
func FunctionEnvVar(function string) string {
	return "RALLY_FUNCTION_" + strings.ToUpper(strings.ReplaceAll(function, "-", "_"))
}

// Functions returns the name of every Lambda function, routes then
// processors, each once.
func Functions() []string {
	var names []string
	for _, r := range All() {
		if !slices.Contains(names, r.Function) {
			names = append(names, r.Function)
		}
	}
	for _, p := range Processors() {
		if !slices.Contains(names, p.Function) {
			names = append(names, p.Function)
		}
	}
	for _, c := range Consumers() {
		names = append(names, c.Function)
	}
	return names
}

// Camel spells a function name in CamelCase (favorite-game → FavoriteGame):
// the name of its declaration here, and of its constructs and outputs in
// the CDK stack.
func Camel(function string) string {
	var b strings.Builder
	for _, part := range strings.FieldsFunc(function, func(r rune) bool { return r == '-' || r == '_' }) {
		b.WriteString(strings.ToUpper(part[:1]) + part[1:])
	}
	return b.String()
}
