package dynamo

import (
	"fmt"

	"github.com/aws/aws-lambda-go/events"

	"github.com/rallyhq/rally/shared/leaderboards"
	"github.com/rallyhq/rally/shared/streams"
)

// ScoreFromRecord reads a player's new score from a Scores stream record.
// ok is false for records that set no score: the period's member count and
// deletions (a deleted score has no new image).
func ScoreFromRecord(rec events.DynamoDBEventRecord) (leaderboards.Score, bool, error) {
	if rec.Change.NewImage == nil {
		return leaderboards.Score{}, false, nil
	}
	var it scoreItem
	if err := streams.Unmarshal(rec.Change.NewImage, &it); err != nil {
		return leaderboards.Score{}, false, fmt.Errorf("decode score record %s: %w", rec.Change.SequenceNumber, err)
	}
	if it.PlayerID == MetaID {
		return leaderboards.Score{}, false, nil
	}
	if it.Board == "" || it.Period == "" || it.PlayerID == "" || it.Ver == 0 {
		return leaderboards.Score{}, false, fmt.Errorf("record %s is not a score", rec.Change.SequenceNumber)
	}
	return it.score(), true, nil
}
