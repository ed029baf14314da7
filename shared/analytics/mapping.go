package analytics

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/rallyhq/rally/shared/leaderboards"
	"github.com/rallyhq/rally/shared/reactions"
	"github.com/rallyhq/rally/shared/schema"
	"github.com/rallyhq/rally/shared/streaks"
	"github.com/rallyhq/rally/shared/streams"
)

// Sources are the tables whose streams the shipper maps to events.
func Sources() []schema.Table {
	return []schema.Table{schema.Reactions, schema.ScoreEvents, schema.Activity}
}

// idHexLen is the length of an event id: 128 bits of SHA-256, in hex.
const idHexLen = 32

// Decoders read the records of each source with the decoder of the store
// that writes its items (reactions/dynamo, leaderboards/dynamo,
// streaks/dynamo): whoever writes an item owns reading it back.
type Decoders struct {
	Reactions   streams.Decoder[reactions.Change]
	Submissions streams.Decoder[leaderboards.Submission]
	Activity    streams.Decoder[streaks.Event]
}

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
	for _, t := range schema.Tables() {
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
func (d Decoders) Map(source schema.Table, rec events.DynamoDBEventRecord) (ev Event, user string, ok bool, err error) {
	switch source.Name {
	case schema.Reactions.Name:
		ev, user, ok, err = reactionEvent(d.Reactions(rec))
	case schema.ScoreEvents.Name:
		ev, user, ok, err = submissionEvent(d.Submissions(rec))
	case schema.Activity.Name:
		ev, user, ok, err = activityEvent(d.Activity(rec))
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

// reactionEvent: an edge becoming ACTIVE (a new edge, or REMOVED → ACTIVE)
// is *.added, ACTIVE → REMOVED is *.removed. A deleted edge (erasure,
// expiry) is no player action and an unchanged edge no change.
func reactionEvent(c reactions.Change, ok bool, err error) (Event, string, bool, error) {
	if err != nil || !ok || c.Deleted || c.Delta == 0 {
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

// submissionEvent: every accepted submission is a score.submitted event
// with the board, period, score and the match's own time.
func submissionEvent(s leaderboards.Submission, ok bool, err error) (Event, string, bool, error) {
	if err != nil || !ok {
		return Event{}, "", false, err
	}
	return Event{
		EventType: ScoreSubmitted, OccurredAt: s.OccurredAt,
		BoardID: &s.Board, Period: &s.Period, Score: &s.Score,
	}, s.PlayerID, true, nil
}

// activityEvent: every recorded activity is an activity.recorded event.
func activityEvent(e streaks.Event, ok bool, err error) (Event, string, bool, error) {
	if err != nil || !ok {
		return Event{}, "", false, err
	}
	activity, source := string(e.Type), string(e.Source)
	ev := Event{
		EventType: ActivityRecorded, OccurredAt: e.OccurredAt,
		ActivityType: &activity, Points: &e.Points, Streak: &e.Streak, Source: &source, ActivityDate: &e.Date,
	}
	if e.Region != "" {
		ev.Region = &e.Region
	}
	return ev, e.UserID, true, nil
}
