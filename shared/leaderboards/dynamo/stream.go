package dynamo

import (
	"fmt"

	"github.com/aws/aws-lambda-go/events"

	"github.com/rallyhq/rally/shared/leaderboards"
	"github.com/rallyhq/rally/shared/streams"
)

// ScoreFromRecord reads a score change from a Scores stream record. ok is
// false for records that change no player's score (the period's member
// count). A deleted score (erasure) comes back Removed, one version past
// its last, so the board drops it and no older record brings it back.
func ScoreFromRecord(rec events.DynamoDBEventRecord) (leaderboards.Score, bool, error) {
	image, removed := rec.Change.NewImage, false
	if image == nil {
		image, removed = rec.Change.OldImage, true
	}
	if image == nil {
		return leaderboards.Score{}, false, nil
	}
	var it scoreItem
	if err := streams.Unmarshal(image, &it); err != nil {
		return leaderboards.Score{}, false, fmt.Errorf("decode score record %s: %w", rec.Change.SequenceNumber, err)
	}
	if it.PlayerID == MetaID {
		return leaderboards.Score{}, false, nil
	}
	if it.Board == "" || it.Period == "" || it.PlayerID == "" || it.Ver == 0 {
		return leaderboards.Score{}, false, fmt.Errorf("record %s is not a score", rec.Change.SequenceNumber)
	}
	s := it.score()
	if removed {
		s.Version++
		s.Removed = true
	}
	return s, true, nil
}
