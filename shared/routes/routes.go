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
	// Service routes need a SigV4 signature (IAM auth).
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
	Reads  []schema.Table
	Writes []schema.Table // write implies read
	// Grants are narrower than Reads and Writes: only some DynamoDB
	// actions on a table, and optionally only some of its attributes.
	Grants []Grant
	Redis  bool
	// Secrets is true when the function signs or verifies cursors.
	Secrets bool
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
}

// Grant is a narrow use of a table: only Actions (DynamoDB API action
// names, e.g. "GetItem"), and, when Attributes is set, only on those
// attributes and the key (IAM fine-grained access: a read must name them in
// its projection).
type Grant struct {
	Table      schema.Table
	Actions    []string
	Attributes []string
}

// Tables lists every table u touches, each once: writes, reads, then
// grants.
func (u Uses) Tables() []schema.Table {
	var out []schema.Table
	all := append(append([]schema.Table{}, u.Writes...), u.Reads...)
	for _, g := range u.Grants {
		all = append(all, g.Table)
	}
	for _, t := range all {
		if !slices.ContainsFunc(out, func(o schema.Table) bool { return o.Name == t.Name }) {
			out = append(out, t)
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
	Summary  string
	Uses     Uses
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
	// Reserved is the function's reserved concurrency (every declaration
	// of one function gives the same): a flood of requests cannot take the
	// account's concurrency from it, and it cannot take more. A stream
	// shard is read by one invocation at a time, so it is sized to the
	// shards its streams may have at peak; the stack may override it
	// (README, Configuration).
	Reserved int32
}

// reactionEdges are what a reaction write touches; reactionTables add the
// Idempotency-Key records favorite-game and toggle-like keep.
var (
	reactionTables = []schema.Table{schema.Reactions, schema.Idempotency}
	reactionEdges  = []schema.Table{schema.Reactions}
)

// Favorites and likes.
var (
	FavoriteGame = Route{
		Method: "POST", Path: "/v1/favorites/{game_id}", Function: "favorite-game", Feature: Reactions, Auth: Player, Budget: FavoriteBudget,
		Summary: "Favorite a game",
		Uses:    Uses{Writes: reactionTables, Redis: true},
	}
	UnfavoriteGame = Route{
		Method: "DELETE", Path: "/v1/favorites/{game_id}", Function: "unfavorite-game", Feature: Reactions, Auth: Player, Budget: FavoriteBudget,
		Summary: "Remove a game from the caller's favorites",
		Uses:    Uses{Writes: reactionEdges, Redis: true},
	}
	ListFavorites = Route{
		Method: "GET", Path: "/v1/users/{user_id}/favorites", Function: "list-favorites", Feature: Reactions, Auth: Player, Budget: ReadBudget,
		Summary: "A user's favorite games, newest first",
		Uses:    Uses{Reads: []schema.Table{schema.Reactions, schema.Games}, Secrets: true},
	}
	FavoriteStatus = Route{
		Method: "GET", Path: "/v1/favorites/status", Function: "favorite-status", Feature: Reactions, Auth: Player, Budget: ReadBudget,
		Summary: "Whether a user has favorited each of up to 100 games",
		Uses:    Uses{Reads: []schema.Table{schema.Reactions, schema.Counters}, Redis: true},
	}
	CountFavorites = Route{
		Method: "GET", Path: "/v1/games/{game_id}/favorites/count", Function: "count-favorites", Feature: Reactions, Auth: Player, Budget: ReadBudget,
		Summary: "How many players favorite a game",
		Uses:    Uses{Reads: []schema.Table{schema.Counters}, Redis: true},
	}
	TopGames = Route{
		Method: "GET", Path: "/v1/games/top", Function: "top-games", Feature: Reactions, Auth: Player, Budget: ReadBudget,
		Summary: "Trending games by net favorites in a window",
		Uses:    Uses{Reads: []schema.Table{schema.Counters, schema.Games}, Redis: true},
	}
	PutGame = Route{
		Method: "PUT", Path: "/v1/games/{game_id}", Function: "put-game", Feature: Games, Auth: Service, Budget: ServiceBudget,
		Summary: "Set a game's metadata",
		Uses:    Uses{Writes: []schema.Table{schema.Games}},
	}
	LikePost = Route{
		Method: "PUT", Path: "/v1/posts/{post_id}/like", Function: "like-post", Feature: Reactions, Auth: Player, Budget: LikeBudget,
		Summary: "Like a post",
		Uses:    Uses{Writes: reactionEdges, Redis: true},
	}
	UnlikePost = Route{
		Method: "DELETE", Path: "/v1/posts/{post_id}/like", Function: "unlike-post", Feature: Reactions, Auth: Player, Budget: LikeBudget,
		Summary: "Remove the caller's like of a post",
		Uses:    Uses{Writes: reactionEdges, Redis: true},
	}
	ToggleLike = Route{
		Method: "POST", Path: "/v1/posts/{post_id}/like/toggle", Function: "toggle-like", Feature: Reactions, Auth: Player, Budget: LikeBudget,
		Summary: "Flip the caller's like of a post",
		Uses:    Uses{Writes: reactionTables, Redis: true},
	}
	CountLikes = Route{
		Method: "GET", Path: "/v1/posts/{post_id}/likes/count", Function: "count-likes", Feature: Reactions, Auth: Player, Budget: ReadBudget,
		Summary: "How many players like a post",
		Uses:    Uses{Reads: []schema.Table{schema.Counters}, Redis: true},
	}
)

// boardReads are what a board read touches; top lists and friends ranks
// also read Players (display names, friend lists).
var (
	boardReads = []schema.Table{schema.Leaderboards, schema.Scores, schema.Counters}
	// A ban or an unban finds every score of the player and hides or
	// restores it, in DynamoDB and Redis.
	banUses    = Uses{Reads: []schema.Table{schema.Leaderboards, schema.ScoreEvents}, Writes: []schema.Table{schema.Scores}, Redis: true}
	namedReads = []schema.Table{schema.Leaderboards, schema.Scores, schema.Players, schema.Counters}
	playerData = []schema.Table{schema.Players}
)

// Leaderboards.
var (
	PutLeaderboard = Route{
		Method: "PUT", Path: "/v1/leaderboards/{leaderboard_id}", Function: "put-leaderboard", Feature: Leaderboards, Auth: Service, Budget: ServiceBudget,
		Summary: "Define or update a leaderboard",
		Uses:    Uses{Writes: []schema.Table{schema.Leaderboards}},
	}
	ListLeaderboards = Route{
		Method: "GET", Path: "/v1/leaderboards", Function: "list-leaderboards", Feature: Leaderboards, Auth: Player, Budget: ReadBudget,
		Summary: "Leaderboards by game and status",
		Uses:    Uses{Reads: []schema.Table{schema.Leaderboards}, Secrets: true},
	}
	GetLeaderboard = Route{
		Method: "GET", Path: "/v1/leaderboards/{leaderboard_id}", Function: "get-leaderboard", Feature: Leaderboards, Auth: Player, Budget: ReadBudget,
		Summary: "A leaderboard's definition, current period and size",
		Uses:    Uses{Reads: boardReads, Redis: true},
	}
	SubmitScore = Route{
		Method: "POST", Path: "/v1/leaderboards/{leaderboard_id}/scores", Function: "submit-score", Feature: Leaderboards, Auth: Service, Budget: ServiceBudget,
		Summary: "Submit a player's match result",
		Uses: Uses{
			Reads:  []schema.Table{schema.Leaderboards, schema.Counters, schema.Players},
			Writes: []schema.Table{schema.Scores, schema.ScoreEvents},
			Redis:  true,
		},
	}
	RemovePlayerScore = Route{
		Method: "DELETE", Path: "/v1/leaderboards/{leaderboard_id}/players/{player_id}", Function: "remove-player-score", Feature: Leaderboards, Auth: Service, Budget: ServiceBudget,
		Summary: "Remove a player's score from a board",
		Uses: Uses{
			Reads:  []schema.Table{schema.Leaderboards, schema.ScoreEvents},
			Writes: []schema.Table{schema.Scores},
			Redis:  true,
		},
	}
	BanPlayer = Route{
		Method: "PUT", Path: "/v1/ops/players/{player_id}/ban", Function: "ban-player", Feature: Leaderboards, Auth: Service, Budget: ServiceBudget,
		Summary: "Ban a player from every leaderboard",
		Uses:    banUses,
	}
	UnbanPlayer = Route{
		Method: "DELETE", Path: "/v1/ops/players/{player_id}/ban", Function: "unban-player", Feature: Leaderboards, Auth: Service, Budget: ServiceBudget,
		Summary: "Lift a player's ban",
		Uses:    banUses,
	}
	LeaderboardTop = Route{
		Method: "GET", Path: "/v1/leaderboards/{leaderboard_id}/top", Function: "leaderboard-top", Feature: Leaderboards, Auth: Player, Budget: ReadBudget,
		Summary: "The best N players of a period",
		Uses:    Uses{Reads: namedReads, Redis: true},
	}
	PlayerRank = Route{
		Method: "GET", Path: "/v1/leaderboards/{leaderboard_id}/players/{player_id}/rank", Function: "player-rank", Feature: Leaderboards, Auth: Player, Budget: ReadBudget,
		Summary: "A player's rank, percentile and neighbours",
		Uses:    Uses{Reads: boardReads, Redis: true},
	}
	FriendsRank = Route{
		Method: "GET", Path: "/v1/leaderboards/{leaderboard_id}/players/{player_id}/friends-rank", Function: "friends-rank", Feature: Leaderboards, Auth: Player, Budget: ReadBudget,
		Summary: "A player's rank among their friends",
		Uses:    Uses{Reads: namedReads, Redis: true},
	}
	PutFriends = Route{
		Method: "PUT", Path: "/v1/players/{player_id}/friends", Function: "put-friends", Feature: Players, Auth: Service, Budget: ServiceBudget,
		Summary: "Replace a player's friend list",
		Uses:    Uses{Writes: playerData},
	}
	PutProfile = Route{
		Method: "PUT", Path: "/v1/players/{player_id}/profile", Function: "put-profile", Feature: Players, Auth: Service, Budget: ServiceBudget,
		Summary: "Set a player's display name, avatar and region",
		Uses:    Uses{Writes: playerData},
	}
)

// Streaks and points.
var (
	RecordActivity = Route{
		Method: "POST", Path: "/v1/activity", Function: "record-activity", Feature: Streaks, Auth: Player, Budget: ActivityBudget,
		Summary: "Record the caller's activity: points, streak and the day's totals in one transaction",
		Uses: Uses{
			Reads:  []schema.Table{schema.Players},
			Writes: []schema.Table{schema.Streaks, schema.Activity, schema.Counters},
			Redis:  true,
		},
	}
	ReportActivity = Route{
		Method: "POST", Path: "/v1/ops/activity", Function: "report-activity", Feature: Streaks, Auth: Service, Budget: ServiceBudget,
		Summary: "Record a player's match played or won, as the game server saw it: points, streak and the day's totals in one transaction",
		Uses: Uses{
			Reads:  []schema.Table{schema.Players},
			Writes: []schema.Table{schema.Streaks, schema.Activity, schema.Counters},
			Redis:  true,
		},
	}
	GetStreak = Route{
		Method: "GET", Path: "/v1/users/{user_id}/streak", Function: "get-streak", Feature: Streaks, Auth: Player, Budget: ReadBudget,
		Summary: "A player's streak as they see it today, and their points balance",
		Uses:    Uses{Reads: []schema.Table{schema.Streaks, schema.Counters}, Redis: true},
	}
	PointsHistory = Route{
		Method: "GET", Path: "/v1/users/{user_id}/points/history", Function: "points-history", Feature: Streaks, Auth: Player, Budget: ReadBudget,
		Summary: "The caller's points per day, newest first",
		Uses:    Uses{Reads: []schema.Table{schema.Streaks, schema.Activity}},
	}
	StreaksTop = Route{
		Method: "GET", Path: "/v1/streaks/top", Function: "streaks-top", Feature: Streaks, Auth: Player, Budget: ReadBudget,
		Summary: "The longest live streaks, globally or in a region",
		Uses:    Uses{Reads: []schema.Table{schema.Streaks, schema.Counters}, Redis: true},
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
		Reads:  []schema.Table{schema.Streaks},
		Writes: []schema.Table{schema.Counters},
		Redis:  true,
	},
	BatchSize:    500,
	BatchWindow:  0,
	MaxRetries:   8,
	MaxRecordAge: 6 * time.Hour,
	Tick:         time.Minute,
	Watermark:    true,
	// Streaks change once per activity: fewer partitions than Reactions
	// or Scores.
	Reserved: 25,
}

// Privacy. An HTTP API route has one authorizer, so an endpoint open to a
// player (for themselves) and to services is declared twice, with one
// function: under /v1/users for players (JWT) and under /v1/ops for
// services (IAM).
var (
	EraseUser = Route{
		Method: "DELETE", Path: "/v1/users/{user_id}", Function: "erase-user", Feature: Privacy, Auth: Player, Budget: ErasureBudget,
		Summary: "Erase the caller and everything Rally holds about them",
		Uses:    Uses{Writes: []schema.Table{schema.Erasures}},
	}
	EraseUserByService = Route{
		Method: "DELETE", Path: "/v1/ops/users/{user_id}", Function: "erase-user", Feature: Privacy, Auth: Service, Budget: ServiceBudget,
		Summary: "Erase a user and everything Rally holds about them",
		Uses:    Uses{Writes: []schema.Table{schema.Erasures}},
	}
	ErasureStatus = Route{
		Method: "GET", Path: "/v1/users/{user_id}/erasure", Function: "erasure-status", Feature: Privacy, Auth: Player, Budget: ReadBudget,
		Summary: "Whether the caller's erasure is still pending or complete",
		Uses:    Uses{Reads: []schema.Table{schema.Erasures}},
	}
	ErasureStatusByService = Route{
		Method: "GET", Path: "/v1/ops/users/{user_id}/erasure", Function: "erasure-status", Feature: Privacy, Auth: Service, Budget: ServiceBudget,
		Summary: "Whether a user's erasure is still pending or complete",
		Uses:    Uses{Reads: []schema.Table{schema.Erasures}},
	}
)

// ErasureProcessor carries out erasures: started by the Erasures stream,
// and on every tick it resumes any erasure still pending (one a crash
// interrupted, or one waiting for a processor to catch up).
var ErasureProcessor = Processor{
	Function: "erasure-processor",
	Feature:  Privacy,
	Source:   schema.Erasures,
	Summary:  "Erases users everywhere: reactions with count compensation, scores, profiles, friends, streaks, activity, idempotency records, analytics secrets, Redis",
	Uses: Uses{
		Reads: []schema.Table{schema.Leaderboards},
		Writes: []schema.Table{
			schema.Erasures, schema.Reactions, schema.Counters, schema.Idempotency, schema.Scores,
			schema.ScoreEvents, schema.Players, schema.Streaks, schema.Activity, schema.Accounts,
		},
		// It deletes a user's analytics secret and reads none.
		Grants: []Grant{{Table: schema.AnalyticsSecrets, Actions: []string{"DeleteItem"}}},
		Redis:  true,
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
			Reads:  []schema.Table{schema.Erasures},
			Writes: []schema.Table{schema.AnalyticsSecrets, schema.Counters},
			// Of Players it reads and removes only the analytics secret
			// deployments kept there before AnalyticsSecrets, moving it
			// over (analytics.Pseudonyms): never a profile or friend list.
			Grants: []Grant{{
				Table:      schema.Players,
				Actions:    []string{"GetItem", "UpdateItem"},
				Attributes: []string{schema.AttrAnalyticsSecret},
			}},
			Analytics: true,
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
		Reads:  []schema.Table{schema.Leaderboards, schema.Scores},
		Writes: []schema.Table{schema.Counters},
		Redis:  true,
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
	Uses:     Uses{Writes: []schema.Table{schema.Counters}, Redis: true},
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
		ListDeadLetters, RedriveDeadLetters, OpsHealth, StartJob, GetJob,
	)
}

// BudgetsInRedis reports whether r's budgets are kept in Redis: on every
// player route, and on the service routes that use Redis anyway. The
// others' functions have no Redis (they stay out of the VPC), so each
// instance keeps their budgets in process.
func (r Route) BudgetsInRedis() bool { return r.Auth == Player || r.Uses.Redis }

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
			rs[i].Uses.Writes = append(slices.Clone(r.Uses.Writes), schema.Accounts)
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
		ErasureProcessor, JobRunner,
	}
}

// Operations: what an operating team calls, with service credentials.
var (
	ListDeadLetters = Route{
		Method: "GET", Path: "/v1/ops/dlq", Function: "list-dead-letters", Feature: Operations, Auth: Service, Budget: ServiceBudget,
		Summary: "The batches stream processors parked, archived with their records",
		Uses:    Uses{Reads: []schema.Table{schema.DeadLetters}},
	}
	RedriveDeadLetters = Route{
		Method: "POST", Path: "/v1/ops/dlq/redrive", Function: "redrive-dead-letters", Feature: Operations, Auth: Service, Budget: ServiceBudget,
		Summary: "Replay parked batches through their processors; remove what applied",
		Uses:    Uses{Writes: []schema.Table{schema.DeadLetters}, Processors: true, Invokes: true},
	}
)

// Jobs and health.
var (
	OpsHealth = Route{
		Method: "GET", Path: "/v1/ops/health", Function: "ops-health", Feature: Operations, Auth: Service, Budget: ServiceBudget,
		Summary: "Whether Redis and DynamoDB answer, how far behind each processor is, parked batches, running jobs, pending erasures and the last reconcile",
		Uses: Uses{
			Reads: []schema.Table{schema.Counters, schema.DeadLetters, schema.Jobs, schema.Erasures},
			Redis: true,
		},
	}
	StartJob = Route{
		Method: "POST", Path: "/v1/ops/jobs", Function: "start-job", Feature: Operations, Auth: Service, Budget: ServiceBudget,
		Summary: "Start a rebuild, reconcile or recompute job",
		Uses:    Uses{Reads: []schema.Table{schema.Leaderboards}, Writes: []schema.Table{schema.Jobs}},
	}
	GetJob = Route{
		Method: "GET", Path: "/v1/ops/jobs/{job_id}", Function: "get-job", Feature: Operations, Auth: Service, Budget: ServiceBudget,
		Summary: "A job's state, progress and findings",
		Uses:    Uses{Reads: []schema.Table{schema.Jobs}},
	}
)

// JobRunner runs the operations jobs: the Jobs stream hands it each job
// when asked for and after each checkpoint, and its tick resumes jobs a
// crash left, and starts the scheduled reconcile.
var JobRunner = Processor{
	Function: "job-runner",
	Feature:  Operations,
	Source:   schema.Jobs,
	Summary:  "Runs rebuild, reconcile and recompute jobs across invocations, checkpointed and leased; starts the daily reconcile",
	Uses: Uses{
		Reads:  []schema.Table{schema.Reactions, schema.Leaderboards},
		Writes: []schema.Table{schema.Jobs, schema.Counters, schema.Scores, schema.Streaks},
		Redis:  true,
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
		Writes:     []schema.Table{schema.DeadLetters},
		Streams:    streamTables(),
		Processors: true,
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
		u.Reads = append(u.Reads, v.Reads...)
		u.Writes = append(u.Writes, v.Writes...)
		u.Grants = append(u.Grants, v.Grants...)
		u.Streams = append(u.Streams, v.Streams...)
		u.Redis = u.Redis || v.Redis
		u.Secrets = u.Secrets || v.Secrets
		u.Analytics = u.Analytics || v.Analytics
		u.Processors = u.Processors || v.Processors
		u.Invokes = u.Invokes || v.Invokes
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
