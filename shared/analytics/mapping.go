package analytics

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/rallyhq/rally/shared/reactions"
	rdynamo "github.com/rallyhq/rally/shared/reactions/dynamo"
	"github.com/rallyhq/rally/shared/schema"
	"github.com/rallyhq/rally/shared/streams"
)

// Sources are the tables whose streams the shipper maps to events.
var Sources = []schema.Table{schema.Reactions, schema.ScoreEvents, schema.Activity}

// Sort-key prefixes of the Activity table's item kinds (see
// streaks/dynamo.EventSK, DaySK and KeySK): only evt# items are events.
const (
	activityEventPrefix = "evt#"
	activityDayPrefix   = "day#"
	activityKeyPrefix   = "idem#"
)

// idHexLen is the length of an event id: 128 bits of SHA-256, in hex.
const idHexLen = 32

// Stream operations, as DynamoDB names them in eventName.
const (
	opInsert = "INSERT"
	opModify = "MODIFY"
	opRemove = "REMOVE"
)

// SourceOf resolves the table a stream record comes from by its
// eventSourceARN (arn:aws:dynamodb:<region>:<account>:table/<physical
// name>/stream/<label>). ok is false for an ARN that names none of tables.
func SourceOf(arn string, tables schema.Names) (schema.Table, bool) {
	parts := strings.SplitN(arn, ":", 6)
	if len(parts) != 6 || parts[0] != "arn" || parts[2] != "dynamodb" {
		return schema.Table{}, false
	}
	rest, ok := strings.CutPrefix(parts[5], "table/")
	if !ok {
		return schema.Table{}, false
	}
	name, _, _ := strings.Cut(rest, "/")
	if name == "" {
		return schema.Table{}, false
	}
	for _, t := range schema.All {
		if tables.Of(t) == name {
			return t, true
		}
	}
	return schema.Table{}, false
}

// Map turns one stream record of source into an analytics event. user is
// the raw user id the event is about, still to be pseudonymised; ok is
// false for a record that is no domain event (an erasure or expiry, an
// unchanged item, a daily total). A record of a source table that cannot be
// read is an error, so the batch stops there instead of losing it.
//
// The event id is derived from the source table and the record's eventID,
// so a redelivered record yields the same event, and analysts can tell a
// repeat from a new event even if one slipped through.
func Map(source schema.Table, rec events.DynamoDBEventRecord) (ev Event, user string, ok bool, err error) {
	switch source.Name {
	case schema.Reactions.Name:
		ev, user, ok, err = mapReaction(rec)
	case schema.ScoreEvents.Name:
		ev, user, ok, err = mapScore(rec)
	case schema.Activity.Name:
		ev, user, ok, err = mapActivity(rec)
	default:
		return Event{}, "", false, fmt.Errorf("analytics: table %s is not an analytics source", source.Name)
	}
	if err != nil {
		return Event{}, "", false, fmt.Errorf("analytics: %s record %s: %w", source.Name, rec.Change.SequenceNumber, err)
	}
	if !ok {
		return Event{}, "", false, nil
	}
	if user == "" {
		return Event{}, "", false, fmt.Errorf("analytics: %s record %s: no user", source.Name, rec.Change.SequenceNumber)
	}
	if rec.EventID == "" {
		return Event{}, "", false, fmt.Errorf("analytics: %s record %s: no eventID to derive the event id from", source.Name, rec.Change.SequenceNumber)
	}
	ev.EventID = eventID(source, rec.EventID)
	ev.SchemaVersion = SchemaVersion
	if ev.OccurredAt.IsZero() {
		ev.OccurredAt = rec.Change.ApproximateCreationDateTime.Time
	}
	ev.OccurredAt = ev.OccurredAt.UTC().Truncate(time.Millisecond)
	return ev, user, true, nil
}

// eventID is the first 128 bits, in hex, of SHA-256 over the source
// table's logical name and the stream record's eventID (unique per record
// and kept on redelivery). The NUL keeps the two parts apart.
func eventID(source schema.Table, recordID string) string {
	sum := sha256.Sum256([]byte(source.Name + "\x00" + recordID))
	return hex.EncodeToString(sum[:])[:idHexLen]
}

// operation is the record's eventName, or what its images imply when a
// hand-built record has none.
func operation(rec events.DynamoDBEventRecord) string {
	if rec.EventName != "" {
		return rec.EventName
	}
	switch {
	case rec.Change.NewImage != nil && rec.Change.OldImage != nil:
		return opModify
	case rec.Change.NewImage != nil:
		return opInsert
	case rec.Change.OldImage != nil:
		return opRemove
	}
	return ""
}

// mapReaction: an edge becoming ACTIVE (a new edge, or REMOVED → ACTIVE) is
// *.added, ACTIVE → REMOVED is *.removed. A deleted edge (erasure, expiry)
// is no player action and an unchanged edge no change.
func mapReaction(rec events.DynamoDBEventRecord) (Event, string, bool, error) {
	if operation(rec) == opRemove {
		return Event{}, "", false, nil
	}
	c, ok, err := rdynamo.ChangeFromRecord(rec)
	if err != nil || !ok || c.Delta == 0 {
		return Event{}, "", false, err
	}
	added := c.Delta > 0
	ev := Event{OccurredAt: c.At}
	target := c.Ref.TargetID
	switch c.Ref.Kind {
	case reactions.Favorite:
		ev.EventType, ev.GameID = pick(added, FavoriteAdded, FavoriteRemoved), &target
	case reactions.Like:
		ev.EventType, ev.PostID = pick(added, LikeAdded, LikeRemoved), &target
	default:
		return Event{}, "", false, fmt.Errorf("unknown reaction kind %q", c.Ref.Kind)
	}
	return ev, c.Ref.UserID, true, nil
}

func pick(cond bool, yes, no string) string {
	if cond {
		return yes
	}
	return no
}

// scoreEventItem is the part of a ScoreEvents item (leaderboards/dynamo)
// an event carries: one accepted submission.
type scoreEventItem struct {
	Board      string `dynamodbav:"board"`
	PlayerID   string `dynamodbav:"player_id"`
	Period     string `dynamodbav:"period"`
	Score      *int64 `dynamodbav:"score"`
	OccurredAt string `dynamodbav:"occurred_at"`
}

// mapScore: every new ScoreEvents item is an accepted submission; items
// only leave the table by expiry or erasure, which are no events.
func mapScore(rec events.DynamoDBEventRecord) (Event, string, bool, error) {
	if operation(rec) != opInsert {
		return Event{}, "", false, nil
	}
	var it scoreEventItem
	if err := streams.Unmarshal(rec.Change.NewImage, &it); err != nil {
		return Event{}, "", false, fmt.Errorf("decode score event: %w", err)
	}
	if it.Board == "" || it.PlayerID == "" || it.Period == "" || it.Score == nil {
		return Event{}, "", false, errors.New("not a score event: board, player_id, period and score are required")
	}
	at, err := parseTime(it.OccurredAt)
	if err != nil {
		return Event{}, "", false, err
	}
	return Event{
		EventType: ScoreSubmitted, OccurredAt: at,
		BoardID: &it.Board, Period: &it.Period, Score: it.Score,
	}, it.PlayerID, true, nil
}

// activityEventItem is the part of an Activity evt# item (streaks/dynamo)
// an event carries: one recorded activity.
type activityEventItem struct {
	UserID     string `dynamodbav:"user_id"`
	SK         string `dynamodbav:"sk"`
	EventType  string `dynamodbav:"event_type"`
	Source     string `dynamodbav:"source"`
	OccurredAt string `dynamodbav:"occurred_at"`
	Date       string `dynamodbav:"date"`
	Points     *int64 `dynamodbav:"points"`
	Streak     *int64 `dynamodbav:"streak"`
	Region     string `dynamodbav:"region"`
}

// mapActivity: a new evt# item is a recorded activity. Daily totals and
// idempotency records are bookkeeping, and evt# items only change by
// expiry or erasure.
func mapActivity(rec events.DynamoDBEventRecord) (Event, string, bool, error) {
	if operation(rec) != opInsert {
		return Event{}, "", false, nil
	}
	var it activityEventItem
	if err := streams.Unmarshal(rec.Change.NewImage, &it); err != nil {
		return Event{}, "", false, fmt.Errorf("decode activity item: %w", err)
	}
	switch {
	case strings.HasPrefix(it.SK, activityDayPrefix), strings.HasPrefix(it.SK, activityKeyPrefix):
		return Event{}, "", false, nil
	case !strings.HasPrefix(it.SK, activityEventPrefix):
		return Event{}, "", false, fmt.Errorf("unknown Activity item kind (sk %q)", it.SK)
	}
	if it.UserID == "" || it.EventType == "" || it.Source == "" || it.Date == "" || it.Points == nil {
		return Event{}, "", false, errors.New("not an activity event: user_id, event_type, source, date and points are required")
	}
	at, err := parseTime(it.OccurredAt)
	if err != nil {
		return Event{}, "", false, err
	}
	ev := Event{
		EventType: ActivityRecorded, OccurredAt: at,
		ActivityType: &it.EventType, Points: it.Points, Streak: it.Streak, Source: &it.Source, ActivityDate: &it.Date,
	}
	if it.Region != "" {
		ev.Region = &it.Region
	}
	return ev, it.UserID, true, nil
}

// parseTime reads an item's RFC 3339 time; an absent one is zero (the
// record's creation time stands in), a malformed one an error.
func parseTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("occurred_at %q: %w", s, err)
	}
	if t.Year() <= 1 {
		return time.Time{}, nil
	}
	return t, nil
}
