// Package analytics exports every domain event for analysts: the analytics
// shipper maps stream records (Reactions, ScoreEvents, Activity) to
// versioned events, pseudonymises the user with a per-user secret, and
// sends them to Firehose, which writes Parquet to S3 partitioned by event
// type, date and hour, catalogued in Glue for Athena. The local stack
// writes the same files under .local/analytics/.
package analytics

import "time"

// SchemaVersion is the version of the event schema below; it grows when a
// column changes meaning, and every event carries it.
const SchemaVersion = 1

// Event types.
const (
	FavoriteAdded    = "favorite.added"
	FavoriteRemoved  = "favorite.removed"
	LikeAdded        = "like.added"
	LikeRemoved      = "like.removed"
	ScoreSubmitted   = "score.submitted"
	ActivityRecorded = "activity.recorded"
)

// EventTypes lists every event type (the Glue partition projection's enum).
func EventTypes() []string {
	return []string{FavoriteAdded, FavoriteRemoved, LikeAdded, LikeRemoved, ScoreSubmitted, ActivityRecorded}
}

// Table is the Glue table (and the local query view) analysts query.
const Table = "rally_events"

// Prefix is where events live in the bucket (and under .local/analytics/).
const Prefix = "events/"

// Event is one exported domain event. EventType, Date and Hour are the
// partition keys: they are in the S3 path, not in the Parquet columns.
// Optional fields are nil when an event type has no such field.
type Event struct {
	EventID       string    `json:"event_id" parquet:"event_id"`
	EventType     string    `json:"event_type" parquet:"-"`
	SchemaVersion int32     `json:"schema_version" parquet:"schema_version"`
	OccurredAt    time.Time `json:"occurred_at" parquet:"occurred_at,timestamp(millisecond)"`
	UserPID       string    `json:"user_pid" parquet:"user_pid"`
	GameID        *string   `json:"game_id" parquet:"game_id,optional"`
	PostID        *string   `json:"post_id" parquet:"post_id,optional"`
	BoardID       *string   `json:"board_id" parquet:"board_id,optional"`
	Period        *string   `json:"period" parquet:"period,optional"`
	Score         *int64    `json:"score" parquet:"score,optional"`
	ActivityType  *string   `json:"activity_type" parquet:"activity_type,optional"`
	Points        *int64    `json:"points" parquet:"points,optional"`
	Streak        *int64    `json:"streak" parquet:"streak,optional"`
	Source        *string   `json:"source" parquet:"source,optional"`
	ActivityDate  *string   `json:"activity_date" parquet:"activity_date,optional"`
	Region        *string   `json:"region" parquet:"region,optional"`
}

// Column is one column of the Glue table.
type Column struct {
	Name    string
	Type    string // Glue / Hive type
	Comment string
}

// Columns are the Parquet columns, in file order; they must match Event.
func Columns() []Column {
	return []Column{
		{"event_id", "string", "deterministic id: the same stream record always yields the same id"},
		{"schema_version", "int", "version of this schema"},
		{"occurred_at", "timestamp", "when the event happened (UTC, milliseconds)"},
		{"user_pid", "string", "pseudonymous user id: HMAC-SHA256 of the user id under a per-user secret, erased with the user"},
		{"game_id", "string", "favorite.*: the game"},
		{"post_id", "string", "like.*: the post"},
		{"board_id", "string", "score.submitted: the leaderboard"},
		{"period", "string", "score.submitted: the board period (2026-11-21, 2026-W47, 2026-11, all)"},
		{"score", "bigint", "score.submitted: the submitted score"},
		{"activity_type", "string", "activity.recorded: DAILY_OPEN, MATCH_PLAYED, MATCH_WON, LEVEL_COMPLETED, SOCIAL_SHARE"},
		{"points", "bigint", "activity.recorded: points awarded (0 over the daily cap)"},
		{"streak", "bigint", "activity.recorded: the player's streak after the activity"},
		{"source", "string", "activity.recorded: mobile_app, web, console"},
		{"activity_date", "string", "activity.recorded: the date in the player's time zone"},
		{"region", "string", "activity.recorded: the player's region, when set"},
	}
}

// PartitionKeys are the Hive partitions of the S3 layout
// events/event_type=…/dt=YYYY-MM-DD/hour=HH/ (UTC of occurred_at).
func PartitionKeys() []Column {
	return []Column{
		{"event_type", "string", "favorite.added, favorite.removed, like.added, like.removed, score.submitted, activity.recorded"},
		{"dt", "string", "UTC date of occurred_at, YYYY-MM-DD"},
		{"hour", "string", "UTC hour of occurred_at, 00-23"},
	}
}

// PartitionPath is the S3 key prefix (below Prefix) of an event's partition.
func PartitionPath(e Event) string {
	t := e.OccurredAt.UTC()
	return "event_type=" + e.EventType + "/dt=" + t.Format("2006-01-02") + "/hour=" + t.Format("15") + "/"
}
