package dynamo

import (
	"fmt"

	"github.com/aws/aws-lambda-go/events"

	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/reactions"
	"github.com/rallyhq/rally/shared/streams"
)

// ChangeFromRecord reads an edge transition from a Reactions stream record.
// ok is false for records that change no edge's state.
func ChangeFromRecord(rec events.DynamoDBEventRecord) (reactions.Change, bool, error) {
	var before, after *edgeItem
	if rec.Change.OldImage != nil {
		before = &edgeItem{}
		if err := streams.Unmarshal(rec.Change.OldImage, before); err != nil {
			return reactions.Change{}, false, fmt.Errorf("decode old image %s: %w", rec.Change.SequenceNumber, err)
		}
	}
	if rec.Change.NewImage != nil {
		after = &edgeItem{}
		if err := streams.Unmarshal(rec.Change.NewImage, after); err != nil {
			return reactions.Change{}, false, fmt.Errorf("decode new image %s: %w", rec.Change.SequenceNumber, err)
		}
	}
	was := before != nil && before.State == string(reactions.Active)
	is := after != nil && after.State == string(reactions.Active)
	c := reactions.Change{Active: is}
	switch {
	case after != nil:
		if before != nil && before.Ver == after.Ver {
			return reactions.Change{}, false, nil
		}
		c.Ref = after.edge().Ref
		c.Version = after.Ver
		c.At = ddb.ParseTime(after.UpdatedAt)
	case before != nil:
		// The edge was deleted (erasure): its end counts as one more change,
		// dated when the edge last changed, so an ACTIVE edge's -1 lands in
		// the trending buckets its +1 went to, as if it had never been.
		c.Ref = before.edge().Ref
		c.Version = before.Ver + 1
		c.At = ddb.ParseTime(before.UpdatedAt)
		if c.At.IsZero() {
			c.At = rec.Change.ApproximateCreationDateTime.UTC()
		}
		c.Deleted = true
	default:
		return reactions.Change{}, false, nil
	}
	if c.Ref.UserID == "" || c.Ref.TargetID == "" || c.Ref.Kind == "" {
		return reactions.Change{}, false, fmt.Errorf("record %s is not a reaction edge", rec.Change.SequenceNumber)
	}
	// An activation moves trending as it was written; an end (a
	// deactivation, a deletion) as the activation it ends was.
	switch {
	case is && !was:
		c.Delta, c.Trend = 1, after.trends()
	case was && !is:
		c.Delta, c.Trend = -1, before.trends()
	case after != nil:
		c.Trend = after.trends()
	default:
		c.Trend = before.trends()
	}
	if is {
		c.Since = ddb.ParseTime(after.CreatedAt)
		if c.Since.IsZero() {
			c.Since = c.At
		}
	}
	return c, true, nil
}
