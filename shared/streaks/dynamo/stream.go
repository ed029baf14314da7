package dynamo

import (
	"fmt"
	"slices"

	"github.com/aws/aws-lambda-go/events"

	"github.com/rallyhq/rally/shared/streaks"
	"github.com/rallyhq/rally/shared/streams"
)

// StateFromRecord reads a streak change from a Streaks stream record: the
// new image, or for a deleted record (erasure) the old one marked Removed.
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
