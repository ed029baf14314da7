package streaks

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rallyhq/rally/shared/api"
	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/errs"
	"github.com/rallyhq/rally/shared/imports"
	"github.com/rallyhq/rally/shared/jobs"
)

// LineStreak is the line type of streaks in an import file.
const LineStreak = "streak"

// StreakLine is an import file's streak line: a player's streak as the
// service they come from left it. total_points, when absent, keeps the
// points the player has.
type StreakLine struct {
	Type             string  `json:"type"`
	UserID           *string `json:"user_id"`
	CurrentStreak    *int64  `json:"current_streak"`
	LongestStreak    *int64  `json:"longest_streak"`
	LastActivityDate *string `json:"last_activity_date"`
	Timezone         *string `json:"timezone"`
	TotalPoints      *int64  `json:"total_points,omitempty"`
}

// StreakImports is what an import needs of the Streaks table: a chunk's
// streaks read in batches, their new state written in batches. The
// writes are not conditional: activity the player reports at the same
// moment may be overwritten (see docs/IMPORT.md).
type StreakImports interface {
	Held(ctx context.Context, users []string) (map[string]State, error)
	Import(ctx context.Context, states []State) error
}

// Importer loads an import file's streak lines: each sets the player's
// streak (as of its last activity date, in its time zone), its version
// moved on as an activity would; a line that leaves the streak as it is
// writes nothing, so a file runs twice to the same streaks. The streak
// boards follow from the Streaks stream (the streak processor), as for
// activity through the API.
type Importer struct {
	Streaks StreakImports
	Clock   clock.Clock
}

var _ imports.Importer = (*Importer)(nil)

// Name implements imports.Importer.
func (*Importer) Name() string { return "streaks" }

// Types implements imports.Importer.
func (*Importer) Types() []string { return []string{LineStreak} }

// Import implements imports.Importer. Of lines naming one player in a
// chunk, the last wins.
func (im *Importer) Import(ctx context.Context, b imports.Batch) ([]imports.Rejection, []string, error) {
	var rejected []imports.Rejection
	lines := map[string]StreakLine{}
	var users []string
	for _, l := range b.Lines {
		in, err := decodeStreak(l, b.At)
		if err != nil {
			rejected = append(rejected, imports.Rejection{Line: l.No, Reason: err.Error()})
			continue
		}
		if _, ok := lines[*in.UserID]; !ok {
			users = append(users, *in.UserID)
		}
		lines[*in.UserID] = in
	}
	if len(users) == 0 {
		return rejected, nil, nil
	}
	held, err := im.Streaks.Held(ctx, users)
	if err != nil {
		return nil, nil, err
	}
	now := clock.Now(im.Clock).UTC().Truncate(time.Millisecond)
	var states []State
	for _, user := range users {
		in, cur := lines[user], held[user]
		next := cur
		next.UserID, next.Current, next.Longest, next.LastDate, next.Timezone = user, *in.CurrentStreak, *in.LongestStreak, *in.LastActivityDate, *in.Timezone
		if in.TotalPoints != nil {
			next.TotalPoints = *in.TotalPoints
		}
		if next.Current == cur.Current && next.Longest == cur.Longest && next.LastDate == cur.LastDate &&
			next.Timezone == cur.Timezone && next.TotalPoints == cur.TotalPoints && cur.Version > 0 {
			continue
		}
		// The streak was reached on its last activity date: at its start,
		// in the player's zone.
		day, _ := time.ParseInLocation(DateLayout, next.LastDate, zoneOrUTC(next.Timezone))
		next.ReachedAt, next.UpdatedAt, next.Version = day.UTC(), now, cur.Version+1
		states = append(states, next)
	}
	if err := im.Streaks.Import(ctx, states); err != nil {
		return nil, nil, err
	}
	return rejected, nil, nil
}

// decodeStreak validates a streak line.
func decodeStreak(l imports.Line, start time.Time) (StreakLine, error) {
	var in StreakLine
	if err := api.DecodeJSON(l.Raw, &in); err != nil {
		return in, lineError(err)
	}
	var f errs.Fields
	if in.UserID == nil {
		f.Add("user_id", "is required")
	} else {
		api.CheckID(&f, "user_id", *in.UserID)
	}
	switch {
	case in.CurrentStreak == nil || *in.CurrentStreak < 0:
		f.Add("current_streak", "is required: a whole number of days, 0 or more")
	case in.LongestStreak == nil || *in.LongestStreak < *in.CurrentStreak:
		f.Add("longest_streak", "is required: at least current_streak")
	}
	if in.Timezone == nil {
		f.Add("timezone", "is required (an IANA zone, UTC for none)")
	} else if loc, err := Zone(*in.Timezone); err != nil || loc == nil {
		f.Add("timezone", "must be an IANA zone")
	}
	if in.LastActivityDate == nil {
		f.Add("last_activity_date", "is required (YYYY-MM-DD)")
	} else if d, err := time.Parse(DateLayout, *in.LastActivityDate); err != nil || d.After(start.Add(48*time.Hour)) {
		f.Add("last_activity_date", "must be a date (YYYY-MM-DD), not in the future")
	}
	if in.TotalPoints != nil && *in.TotalPoints < 0 {
		f.Add("total_points", "must be 0 or more")
	}
	return in, lineError(f.Err())
}

// lineError is what a rejected line's example says of err.
func lineError(err error) error {
	var e *errs.Error
	if errors.As(err, &e) {
		return fmt.Errorf("%s", e.Detail)
	}
	return err
}

// CatchUp implements imports.Importer: nothing to do, the streak
// processor ranks imported streaks from the stream like any other.
func (*Importer) CatchUp(context.Context, []string, *jobs.Work) error { return nil }
