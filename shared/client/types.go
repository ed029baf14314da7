package client

import "time"

// Leaderboards.

// Policy is how a leaderboard keeps a player's submissions.
type Policy string

// Policies.
const (
	// PolicyBest keeps the best score (the highest, the lowest for
	// OrderAsc).
	PolicyBest Policy = "best"
	// PolicyIncrement adds each submission's score (points per win).
	PolicyIncrement Policy = "increment"
	// PolicyLatest keeps the most recent match's score.
	PolicyLatest Policy = "latest"
)

// Order is which scores rank first.
type Order string

// Orders.
const (
	OrderDesc Order = "desc"
	OrderAsc  Order = "asc"
)

// Reset is how often a leaderboard starts a new period.
type Reset string

// Resets.
const (
	ResetNone    Reset = "none"
	ResetDaily   Reset = "daily"
	ResetWeekly  Reset = "weekly"
	ResetMonthly Reset = "monthly"
)

// TieBreak is how equal scores rank.
type TieBreak string

// Tie breaks.
const (
	// TieBreakEarliest ranks the player who reached the score first higher
	// (then by player id): ranks 1..N with no gaps.
	TieBreakEarliest TieBreak = "earliest"
	// TieBreakShared gives equal scores the same rank (1, 2, 2, 4).
	TieBreakShared TieBreak = "shared"
)

// BoardStatus is whether a leaderboard takes submissions and is listed.
type BoardStatus string

// Board statuses.
const (
	BoardActive   BoardStatus = "ACTIVE"
	BoardFrozen   BoardStatus = "FROZEN"
	BoardArchived BoardStatus = "ARCHIVED"
)

// Scope says which game, mode and region a leaderboard belongs to.
type Scope struct {
	Game   string `json:"game,omitempty"`
	Mode   string `json:"mode,omitempty"`
	Region string `json:"region,omitempty"`
}

// LeaderboardDefinition defines or updates a leaderboard
// (PUT /v1/leaderboards/{leaderboard_id}). Only Title is required; a field
// left empty takes its default (best, desc, none, earliest, ACTIVE, 100,
// UTC). Policy, Order, Reset, TieBreak and Timezone cannot change once the
// leaderboard exists (a 409 *Error).
type LeaderboardDefinition struct {
	Title    string      `json:"title"`
	Policy   Policy      `json:"policy,omitempty"`
	Order    Order       `json:"order,omitempty"`
	Reset    Reset       `json:"reset,omitempty"`
	TieBreak TieBreak    `json:"tie_break,omitempty"`
	Scope    *Scope      `json:"scope,omitempty"`
	Status   BoardStatus `json:"status,omitempty"`
	MaxN     int         `json:"max_n,omitempty"`
	Timezone string      `json:"timezone,omitempty"`
	// Regional boards keep a view per player region beside the global
	// board; fixed once the board exists.
	Regional bool `json:"regional,omitempty"`
	// Partitions spreads each period's board in Redis over that many
	// score-range partitions (1-64), for boards larger than one Redis
	// shard; fixed once the board exists.
	Partitions int `json:"partitions,omitempty"`
}

// Leaderboard is a stored definition.
type Leaderboard struct {
	LeaderboardID string      `json:"leaderboard_id"`
	Title         string      `json:"title"`
	Policy        Policy      `json:"policy"`
	Order         Order       `json:"order"`
	Reset         Reset       `json:"reset"`
	TieBreak      TieBreak    `json:"tie_break"`
	Scope         Scope       `json:"scope"`
	Status        BoardStatus `json:"status"`
	MaxN          int         `json:"max_n"`
	Timezone      string      `json:"timezone"`
	Regional      bool        `json:"regional"`
	Partitions    int         `json:"partitions,omitempty"`
	CreatedAt     time.Time   `json:"created_at"`
	UpdatedAt     time.Time   `json:"updated_at"`
	// CurrentPeriod names the period scores go to now (2026-11-21,
	// 2026-W47, 2026-11, or "all").
	CurrentPeriod string `json:"current_period"`
	// Region, Total and Degraded come with reads of the definition (Total
	// of the Region's view when one was asked for).
	Region   string `json:"region,omitempty"`
	Total    *int64 `json:"total,omitempty"`
	Degraded bool   `json:"degraded,omitempty"`

	// Created is true when the call created the leaderboard (201), false
	// when it updated one (200).
	Created bool `json:"-"`
}

// ScoreSubmission is a player's match result
// (POST /v1/leaderboards/{leaderboard_id}/scores). MatchID makes it
// idempotent: a match already submitted for the player changes nothing
// and answers Applied false, so the client retries it freely.
type ScoreSubmission struct {
	PlayerID string `json:"player_id"`
	MatchID  string `json:"match_id"`
	// Score is an integer with |score| ≤ 2^53.
	Score int64 `json:"score"`
	// OccurredAt picks the period (default now); it may not be in the
	// future.
	OccurredAt time.Time `json:"occurred_at,omitzero"`
}

// ScoreResult is the player's score after a submission.
type ScoreResult struct {
	PlayerID      string `json:"player_id"`
	Score         int64  `json:"score"`
	PreviousScore *int64 `json:"previous_score"`
	// Applied is false when the match had already been submitted: the
	// first submission's effect stands (also after a retry whose first
	// attempt's answer was lost).
	Applied bool   `json:"applied"`
	Period  string `json:"period"`
	// Rank is nil when the cache could not tell it.
	Rank *int `json:"rank"`
}

// Players.

// ProfileUpdate sets a player's profile
// (PUT /v1/players/{player_id}/profile), shown on leaderboards.
type ProfileUpdate struct {
	DisplayName string `json:"display_name"`
	AvatarURL   string `json:"avatar_url,omitempty"`
	// Region places the player on regional boards from their next
	// submission.
	Region string `json:"region,omitempty"`
}

// Profile is a stored profile.
type Profile struct {
	PlayerID    string    `json:"player_id"`
	DisplayName string    `json:"display_name"`
	AvatarURL   *string   `json:"avatar_url"`
	Region      *string   `json:"region"`
	UpdatedAt   time.Time `json:"updated_at"`
}

// Friends is a player's stored friend list, deduplicated and without the
// player.
type Friends struct {
	PlayerID  string   `json:"player_id"`
	FriendIDs []string `json:"friend_ids"`
}

// friendsUpdate is the body of PUT /v1/players/{player_id}/friends.
type friendsUpdate struct {
	FriendIDs []string `json:"friend_ids"`
}

// Games.

// GameUpdate sets a game's metadata (PUT /v1/games/{game_id}), used to
// enrich favorites lists and trending.
type GameUpdate struct {
	Title        string `json:"title"`
	ThumbnailURL string `json:"thumbnail_url,omitempty"`
}

// Game is a game's stored metadata.
type Game struct {
	GameID       string    `json:"game_id"`
	Title        string    `json:"title"`
	ThumbnailURL *string   `json:"thumbnail_url"`
	UpdatedAt    time.Time `json:"updated_at"`
}

// Streaks and points.

// EventType is what a game server reports a player did.
type EventType string

// The event types game servers report; players report the others
// themselves.
const (
	MatchPlayed EventType = "MATCH_PLAYED"
	MatchWon    EventType = "MATCH_WON"
)

// Source is where the player played.
type Source string

// Sources.
const (
	SourceMobileApp Source = "mobile_app"
	SourceWeb       Source = "web"
	SourceConsole   Source = "console"
)

// ActivityReport is a player's match played or won, as the game server
// saw it (POST /v1/ops/activity).
type ActivityReport struct {
	UserID    string    `json:"user_id"`
	EventType EventType `json:"event_type"`
	Source    Source    `json:"source"`
	// Timezone is the player's IANA zone (at most 2 changes in any 7 days
	// take effect); empty keeps the one Rally has.
	Timezone string `json:"timezone,omitempty"`
}

// ActivityReceipt is the player's state after the activity.
type ActivityReceipt struct {
	EventID        string `json:"event_id"`
	PointsAwarded  int64  `json:"points_awarded"`
	TotalPoints    int64  `json:"total_points"`
	CurrentStreak  int64  `json:"current_streak"`
	LongestStreak  int64  `json:"longest_streak"`
	StreakExtended bool   `json:"streak_extended"`
	// ActivityDate is the date of the activity in the player's time zone
	// (2026-11-24).
	ActivityDate string `json:"activity_date"`

	// Replayed is true when the Idempotency-Key had been used already:
	// this is the first call's receipt, and nothing was recorded again.
	Replayed bool `json:"-"`
}

// Privacy.

// ErasureStatus is how far an erasure is.
type ErasureStatus string

// Erasure statuses.
const (
	ErasurePending   ErasureStatus = "PENDING"
	ErasureCompleted ErasureStatus = "COMPLETED"
)

// Erasure is a request to erase a user and everything Rally holds about
// them.
type Erasure struct {
	ErasureID   string        `json:"erasure_id"`
	Status      ErasureStatus `json:"status"`
	RequestedAt time.Time     `json:"requested_at"`
	CompletedAt *time.Time    `json:"completed_at"`
}

// ExportStatus is how far an export is.
type ExportStatus string

// Export statuses.
const (
	ExportPending ExportStatus = "PENDING"
	ExportReady   ExportStatus = "READY"
)

// Export is a request for everything Rally holds about a user, as one
// JSON document.
type Export struct {
	ExportID    string       `json:"export_id"`
	Status      ExportStatus `json:"status"`
	RequestedAt time.Time    `json:"requested_at"`
	ReadyAt     *time.Time   `json:"ready_at"`
	// URL reads the document (a presigned link) until ExpiresAt, once
	// the export is READY.
	URL       *string    `json:"url"`
	ExpiresAt *time.Time `json:"expires_at"`
}

// Operations.

// Health is what GET /v1/ops/health reports.
type Health struct {
	Redis           RedisHealth       `json:"redis"`
	DynamoDB        DynamoDBHealth    `json:"dynamodb"`
	Processors      []ProcessorHealth `json:"processors"`
	JobsRunning     int               `json:"jobs_running"`
	PendingErasures int               `json:"pending_erasures"`
	// LastReconcile is nil before the first reconcile.
	LastReconcile *ReconcileSummary `json:"last_reconcile"`
}

// RedisHealth says whether Redis answers, and whether every feature's
// cache holds what DynamoDB holds.
type RedisHealth struct {
	Reachable bool `json:"reachable"`
	Trusted   bool `json:"trusted"`
}

// DynamoDBHealth says whether DynamoDB answers.
type DynamoDBHealth struct {
	Reachable bool `json:"reachable"`
}

// ProcessorHealth is how far behind a stream processor is.
type ProcessorHealth struct {
	Name string `json:"name"`
	// LagSeconds is how long the newest change it applied waited in the
	// stream; nil when not known.
	LagSeconds *float64 `json:"lag_seconds"`
	// DLQDepth counts its parked batches.
	DLQDepth int `json:"dlq_depth"`
}

// ReconcileSummary is the latest reconcile job.
type ReconcileSummary struct {
	JobID      string     `json:"job_id"`
	State      JobState   `json:"state"`
	Checked    int64      `json:"checked"`
	Drifted    int64      `json:"drifted"`
	Repaired   int64      `json:"repaired"`
	StartedAt  time.Time  `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at"`
}

// JobKind is what a job does.
type JobKind string

// Job kinds.
const (
	// JobRebuild rebuilds Redis from DynamoDB.
	JobRebuild JobKind = "rebuild"
	// JobReconcile compares every derived value with its truth, reports
	// drift and repairs it.
	JobReconcile JobKind = "reconcile"
	// JobRecompute recomputes derived DynamoDB state from its truth: the
	// disaster-recovery path.
	JobRecompute JobKind = "recompute"
	// JobImport loads a JSON Lines file (JobRequest.Source) as if each
	// line had been submitted through the API (docs/IMPORT.md).
	JobImport JobKind = "import"
	// JobClose archives one ended period of a periodic leaderboard
	// (TargetLeaderboard, LeaderboardID and Period); the schedule starts
	// one for every period, and asking again for a closed one changes
	// nothing.
	JobClose JobKind = "close"
)

// JobTarget is the derived state a job works on.
type JobTarget string

// Job targets.
const (
	TargetCounters    JobTarget = "counters"
	TargetTrending    JobTarget = "trending"
	TargetLeaderboard JobTarget = "leaderboard"
	TargetStreaks     JobTarget = "streaks"
	// TargetFriends indexes friend lists written before their reverse
	// entries (recompute only).
	TargetFriends JobTarget = "friends"
	TargetAll     JobTarget = "all"
)

// JobState is where a job is in its life.
type JobState string

// Job states.
const (
	JobRunning JobState = "RUNNING"
	JobDone    JobState = "DONE"
	JobFailed  JobState = "FAILED"
)

// JobRequest starts a job (POST /v1/ops/jobs).
type JobRequest struct {
	Kind JobKind `json:"kind"`
	// Target is required, except for an import.
	Target JobTarget `json:"target,omitempty"`
	// LeaderboardID limits a TargetLeaderboard job to one leaderboard.
	LeaderboardID string `json:"id,omitempty"`
	// Period limits it to one period of that leaderboard.
	Period string `json:"period,omitempty"`
	// Source is the file an import reads: s3://bucket/key, or on the
	// local stack file:///absolute/path.
	Source string `json:"source,omitempty"`
}

// JobStarted is the answer to starting a job.
type JobStarted struct {
	JobID string   `json:"job_id"`
	State JobState `json:"state"`
}

// Job is a job's state, progress and findings.
type Job struct {
	JobID         string    `json:"job_id"`
	Kind          JobKind   `json:"kind"`
	Target        JobTarget `json:"target,omitempty"`
	LeaderboardID string    `json:"id,omitempty"`
	Period        string    `json:"period,omitempty"`
	Source        string    `json:"source,omitempty"`
	State         JobState  `json:"state"`
	Progress      Progress  `json:"progress"`
	// Checked counts values compared (or rewritten), Drifted those found
	// off their truth, Repaired those put right.
	Checked  int64 `json:"checked"`
	Drifted  int64 `json:"drifted"`
	Repaired int64 `json:"repaired"`
	// Rejected counts the lines an import refused.
	Rejected int64 `json:"rejected"`
	// Examples are some drifted values ("kind: what"), or an import's
	// rejected lines ("rejected: line N: why").
	Examples []string `json:"examples"`
	Error    string   `json:"error,omitempty"`
	// Runs counts the invocations that worked on the job.
	Runs       int        `json:"runs"`
	StartedAt  time.Time  `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at"`
}

// Progress is how far the step under way is; Total is 0 when not known up
// front.
type Progress struct {
	Done  int64 `json:"done"`
	Total int64 `json:"total"`
}

// ParkReason is why a processor gave up on a batch.
type ParkReason string

// Park reasons.
const (
	RetryAttemptsExhausted   ParkReason = "RetryAttemptsExhausted"
	MaximumRecordAgeExceeded ParkReason = "MaximumRecordAgeExceeded"
)

// ParkedBatch is a stream batch a processor parked, archived with its
// records.
type ParkedBatch struct {
	BatchID   string `json:"batch_id"`
	Processor string `json:"processor"`
	// Source is the table whose stream the batch came from.
	Source              string     `json:"source"`
	Records             int        `json:"records"`
	FirstSequenceNumber string     `json:"first_sequence_number"`
	LastSequenceNumber  string     `json:"last_sequence_number"`
	Reason              ParkReason `json:"reason"`
	// Error is why the last redrive did not apply the batch.
	Error           string    `json:"error,omitempty"`
	ParkedAt        time.Time `json:"parked_at"`
	ArchivedAt      time.Time `json:"archived_at"`
	RedriveAttempts int       `json:"redrive_attempts"`
}

// deadLetters is the body of GET /v1/ops/dlq.
type deadLetters struct {
	Batches []ParkedBatch `json:"batches"`
}

// RedriveRequest says which parked batches to replay: every processor's
// when empty, one processor's, or one batch of it.
type RedriveRequest struct {
	Processor string `json:"processor,omitempty"`
	BatchID   string `json:"batch_id,omitempty"`
}

// RedriveResult is what a redrive did with one batch.
type RedriveResult struct {
	Processor string `json:"processor"`
	BatchID   string `json:"batch_id"`
	Records   int    `json:"records"`
	// Applied counts the records the processor applied; a batch applied
	// whole is removed from the archive.
	Applied int    `json:"applied"`
	Error   string `json:"error,omitempty"`
}

// redriven is the body of POST /v1/ops/dlq/redrive's answer.
type redriven struct {
	Results []RedriveResult `json:"results"`
}

// Ban is a player's ban from every leaderboard.
type Ban struct {
	PlayerID string `json:"player_id"`
	Banned   bool   `json:"banned"`
	// BannedAt is when the ban began; nil once it is lifted.
	BannedAt *time.Time `json:"banned_at"`
}
