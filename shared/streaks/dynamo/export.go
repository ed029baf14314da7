package dynamo

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/schema"
)

// A player's streak, activity and points in their export (shared/exports
// Parts).

// ExportedStreak is a player's streak record in their export, as stored:
// the current streak as of the last activity date (a read after a missed
// day shows 0; the record keeps the run it ended).
type ExportedStreak struct {
	CurrentStreak    int64       `json:"current_streak"`
	LongestStreak    int64       `json:"longest_streak"`
	LastActivityDate string      `json:"last_activity_date"`
	Timezone         string      `json:"timezone"`
	Region           string      `json:"region,omitempty"`
	TotalPoints      int64       `json:"total_points"`
	TimezoneChanges  []time.Time `json:"timezone_changes"`
	TimezoneRefused  int64       `json:"timezone_changes_refused"`
	UpdatedAt        time.Time   `json:"updated_at"`
}

// StreakExport is a player's streak record (an exports.Single).
type StreakExport struct{ Store *Store }

// Name implements exports.Part.
func (StreakExport) Name() string { return "streak" }

// Single implements exports.Single.
func (StreakExport) Single() {}

// Export implements exports.Part.
func (e StreakExport) Export(ctx context.Context, user, _ string, _ int) ([]any, string, error) {
	st, ok, err := e.Store.Get(ctx, user)
	if err != nil || !ok {
		return nil, "", err
	}
	changes := st.TZChanges
	if changes == nil {
		changes = []time.Time{}
	}
	return []any{ExportedStreak{
		CurrentStreak: st.Current, LongestStreak: st.Longest, LastActivityDate: st.LastDate, Timezone: st.Timezone,
		Region: st.Region, TotalPoints: st.TotalPoints, TimezoneChanges: changes, TimezoneRefused: st.TZRejected,
		UpdatedAt: st.UpdatedAt,
	}}, "", nil
}

// ExportedActivity is one recorded activity in a player's export.
type ExportedActivity struct {
	EventID          string    `json:"event_id"`
	EventType        string    `json:"event_type"`
	Source           string    `json:"source"`
	OccurredAt       time.Time `json:"occurred_at"`
	Date             string    `json:"date"`
	Points           int64     `json:"points"`
	Timezone         string    `json:"timezone"`
	RejectedTimezone string    `json:"rejected_timezone,omitempty"`
	Streak           int64     `json:"streak"`
	Region           string    `json:"region,omitempty"`
}

// ActivityExport is a player's points event log, oldest first (an
// exports.Part): what the Activity table keeps of it (90 days).
type ActivityExport struct{ Store *Store }

// Name implements exports.Part.
func (ActivityExport) Name() string { return "activity" }

// Export implements exports.Part; the cursor is the last event's sort key.
func (e ActivityExport) Export(ctx context.Context, user, cursor string, limit int) ([]any, string, error) {
	return e.Store.exportPage(ctx, user, eventPrefix, cursor, limit, func(raw map[string]types.AttributeValue) (any, error) {
		var it eventItem
		if err := attributevalue.UnmarshalMap(raw, &it); err != nil {
			return nil, err
		}
		return ExportedActivity{
			EventID: it.EventID, EventType: it.EventType, Source: it.Source, OccurredAt: ddb.ParseTime(it.OccurredAt),
			Date: it.Date, Points: it.Points, Timezone: it.Timezone, RejectedTimezone: it.RejectedTimezone,
			Streak: it.Streak, Region: it.Region,
		}, nil
	})
}

// ExportedDay is a player's points on one local date in their export.
type ExportedDay struct {
	Date   string           `json:"date"`
	Points int64            `json:"points"`
	Events int64            `json:"events"`
	ByType map[string]int64 `json:"by_type"`
}

// PointsExport is a player's daily points totals, oldest date first (an
// exports.Part).
type PointsExport struct{ Store *Store }

// Name implements exports.Part.
func (PointsExport) Name() string { return "points" }

// Export implements exports.Part; the cursor is the last day's sort key.
func (e PointsExport) Export(ctx context.Context, user, cursor string, limit int) ([]any, string, error) {
	return e.Store.exportPage(ctx, user, dayPrefix, cursor, limit, func(raw map[string]types.AttributeValue) (any, error) {
		var it dayItem
		if err := attributevalue.UnmarshalMap(raw, &it); err != nil {
			return nil, err
		}
		byType := it.ByType
		if byType == nil {
			byType = map[string]int64{}
		}
		return ExportedDay{Date: it.Date, Points: it.Points, Events: it.Events, ByType: byType}, nil
	})
}

// exportPage reads a page of user's Activity items whose sort key starts
// with prefix, after the sort key cursor.
func (s *Store) exportPage(ctx context.Context, user, prefix, cursor string, limit int, decode func(map[string]types.AttributeValue) (any, error)) ([]any, string, error) {
	in := ddb.QueryInput(s.Activity, ddb.MustBuild(expression.NewBuilder().WithKeyCondition(
		expression.Key(schema.AttrUserID).Equal(expression.Value(user)).
			And(expression.Key(schema.AttrSK).BeginsWith(prefix)))))
	in.ConsistentRead, in.Limit = aws.Bool(true), aws.Int32(int32(limit))
	if cursor != "" {
		if !strings.HasPrefix(cursor, prefix) {
			return nil, "", fmt.Errorf("export %s items: cursor %q is not one of them", prefix, cursor)
		}
		in.ExclusiveStartKey = activityKey(user, cursor)
	}
	out, err := s.DB.Query(ctx, in)
	if err != nil {
		return nil, "", unavailable(err, "export "+prefix+" items")
	}
	items := make([]any, 0, len(out.Items))
	last := ""
	for _, raw := range out.Items {
		v, err := decode(raw)
		if err != nil {
			return nil, "", fmt.Errorf("export %s items: decode one: %w", prefix, err)
		}
		items = append(items, v)
		if sk, ok := raw[schema.AttrSK].(*types.AttributeValueMemberS); ok {
			last = sk.Value
		}
	}
	if len(out.LastEvaluatedKey) == 0 {
		last = ""
	}
	return items, last, nil
}
