package dynamo

import (
	"fmt"
	"slices"
	"strings"

	"github.com/aws/aws-lambda-go/events"

	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/schema"
	"github.com/rallyhq/rally/shared/streaks"
	"github.com/rallyhq/rally/shared/streams"
)

// StateFromRecord reads a streak change from a Streaks stream record: the
// new image, or for a deleted record (erasure) the old one marked Removed,
// one version past it.
// When the player moved region, PrevRegion names the board they leave;
// Regions are every region the streak was ever in. ok is false for a
// record with no image.
func StateFromRecord(rec events.DynamoDBEventRecord) (streaks.State, bool, error) {
	newImage, oldImage := rec.Change.NewImage, rec.Change.OldImage
	image := newImage
	if len(image) == 0 {
		image = oldImage
	}
	if len(image) == 0 {
		return streaks.State{}, false, nil
	}
	var it streakItem
	if err := streams.Unmarshal(image, &it); err != nil {
		return streaks.State{}, false, fmt.Errorf("decode streak record %s: %w", rec.Change.SequenceNumber, err)
	}
	if it.UserID == "" || it.Version == 0 {
		return streaks.State{}, false, fmt.Errorf("record %s is not a streak", rec.Change.SequenceNumber)
	}
	st := it.state()
	st.Regions = slices.Sorted(slices.Values(it.Regions)) // a set comes in any order
	if len(newImage) == 0 {
		// A deletion is one version past the record it deleted.
		st.Version++
		st.Removed = true
		return st, true, nil
	}
	if len(oldImage) > 0 {
		var old streakItem
		if err := streams.Unmarshal(oldImage, &old); err != nil {
			return streaks.State{}, false, fmt.Errorf("decode streak record %s (old image): %w", rec.Change.SequenceNumber, err)
		}
		if old.Region != st.Region {
			st.PrevRegion = old.Region
		}
	}
	return st, true, nil
}

// EventFromRecord reads a recorded activity from an Activity stream
// record: a new evt# item. ok is false for the day's totals and the
// idempotency records written beside it, and for evt# items that leave
// (expiry, erasure); an item of an unknown kind, or an event that lacks
// what it needs, is an error.
func EventFromRecord(rec events.DynamoDBEventRecord) (streaks.Event, bool, error) {
	image := rec.Change.NewImage
	if image == nil || rec.Change.OldImage != nil || (rec.EventName != "" && rec.EventName != "INSERT") {
		return streaks.Event{}, false, nil
	}
	var it eventItem
	if err := streams.Unmarshal(image, &it); err != nil {
		return streaks.Event{}, false, fmt.Errorf("decode activity item %s: %w", rec.Change.SequenceNumber, err)
	}
	switch {
	case strings.HasPrefix(it.SK, dayPrefix), strings.HasPrefix(it.SK, keyPrefix):
		return streaks.Event{}, false, nil
	case !strings.HasPrefix(it.SK, eventPrefix):
		return streaks.Event{}, false, fmt.Errorf("record %s: unknown Activity item kind (sk %q)", rec.Change.SequenceNumber, it.SK)
	}
	if attr := ddb.Missing(image, schema.AttrUserID, schema.AttrEventType, schema.AttrSource, schema.AttrDate, schema.AttrPoints); attr != "" {
		return streaks.Event{}, false, fmt.Errorf("record %s is not an activity event: no %s", rec.Change.SequenceNumber, attr)
	}
	if it.UserID == "" || it.EventType == "" || it.Source == "" || it.Date == "" {
		return streaks.Event{}, false, fmt.Errorf("record %s is not an activity event: user_id, event_type, source and date are required", rec.Change.SequenceNumber)
	}
	at, err := ddb.ReadTime(it.OccurredAt)
	if err != nil {
		return streaks.Event{}, false, fmt.Errorf("activity event %s: occurred_at: %w", rec.Change.SequenceNumber, err)
	}
	return streaks.Event{
		ID: it.EventID, UserID: it.UserID, Type: streaks.EventType(it.EventType), Source: streaks.Source(it.Source),
		OccurredAt: at, Date: it.Date, Points: it.Points, Timezone: it.Timezone, RejectedTimezone: it.RejectedTimezone,
		Streak: it.Streak, Region: it.Region,
	}, true, nil
}
