package dynamo

import (
	"fmt"
	"strings"

	"github.com/aws/aws-lambda-go/events"

	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/leaderboards"
	"github.com/rallyhq/rally/shared/schema"
	"github.com/rallyhq/rally/shared/streams"
)

// ScoreFromRecord reads a score change from a Scores stream record. ok is
// false for records that change no player's score (the period's member
// count, a ban marker). A deleted score (erasure) comes back Removed, one
// version past its last, so the board drops it and no older record brings
// it back; a banned one comes back Removed at its own version.
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
	if it.PlayerID == MetaID || strings.HasPrefix(it.PK, BanPrefix) {
		return leaderboards.Score{}, false, nil
	}
	if it.Board == "" || it.Period == "" || it.PlayerID == "" || it.Ver == 0 {
		return leaderboards.Score{}, false, fmt.Errorf("record %s is not a score", rec.Change.SequenceNumber)
	}
	s := it.score()
	switch {
	case removed:
		s.Version++
		s.Removed = true
	case it.Banned:
		// Hidden, with the version the ban gave it; an unban brings it
		// back one version on.
		s.Removed = true
	}
	return s, true, nil
}

// SubmissionFromRecord reads an accepted submission from a ScoreEvents
// stream record: every new item is one. ok is false for other records
// (items leave the table only by expiry or erasure, which are no
// submissions); an item that lacks what a submission needs is an error.
func SubmissionFromRecord(rec events.DynamoDBEventRecord) (leaderboards.Submission, bool, error) {
	image := rec.Change.NewImage
	if image == nil || rec.Change.OldImage != nil || (rec.EventName != "" && rec.EventName != "INSERT") {
		return leaderboards.Submission{}, false, nil
	}
	if attr := ddb.Missing(image, schema.AttrBoard, schema.AttrPlayerID, schema.AttrPeriod, schema.AttrScore); attr != "" {
		return leaderboards.Submission{}, false, fmt.Errorf("record %s is not a score event: no %s", rec.Change.SequenceNumber, attr)
	}
	var it eventItem
	if err := streams.Unmarshal(image, &it); err != nil {
		return leaderboards.Submission{}, false, fmt.Errorf("decode score event %s: %w", rec.Change.SequenceNumber, err)
	}
	if it.Board == "" || it.PlayerID == "" || it.Period == "" {
		return leaderboards.Submission{}, false, fmt.Errorf("record %s is not a score event: board, player_id and period are required", rec.Change.SequenceNumber)
	}
	at, err := ddb.ReadTime(it.OccurredAt)
	if err != nil {
		return leaderboards.Submission{}, false, fmt.Errorf("score event %s: occurred_at: %w", rec.Change.SequenceNumber, err)
	}
	return leaderboards.Submission{
		Board: it.Board, Period: it.Period,
		Match: leaderboards.Match{PlayerID: it.PlayerID, MatchID: it.MatchID, Score: it.Score, OccurredAt: at},
	}, true, nil
}
