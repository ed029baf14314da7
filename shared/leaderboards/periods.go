package leaderboards

import (
	"fmt"
	"regexp"
	"strconv"
	"time"
	_ "time/tzdata" // periods must be cut in any IANA zone, whatever the host has installed

	"github.com/rallyhq/rally/shared/errs"
)

// AllTime is the only period of a board that never resets.
const AllTime = "all"

// Location returns the board's time zone.
func (d Definition) Location() *time.Location {
	loc, err := time.LoadLocation(d.Timezone)
	if err != nil {
		return time.UTC
	}
	return loc
}

// PeriodAt names the period that holds t in the board's time zone:
// 2026-11-21 (daily), 2026-W47 (weekly, ISO weeks), 2026-11 (monthly) or
// "all".
func (d Definition) PeriodAt(t time.Time) string {
	local := t.In(d.Location())
	switch d.Reset {
	case Daily:
		return local.Format("2006-01-02")
	case Weekly:
		y, w := local.ISOWeek()
		return fmt.Sprintf("%04d-W%02d", y, w)
	case Monthly:
		return local.Format("2006-01")
	}
	return AllTime
}

var (
	dailyPeriod   = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}$`)
	weeklyPeriod  = regexp.MustCompile(`^(\d{4})-W(\d{2})$`)
	monthlyPeriod = regexp.MustCompile(`^\d{4}-\d{2}$`)
)

// CheckPeriod validates a period name for the board's reset.
func (d Definition) CheckPeriod(p string) error {
	bad := func(format string) error {
		return errs.Field("period", "must name a period of this board: "+format)
	}
	switch d.Reset {
	case Daily:
		if _, err := time.Parse("2006-01-02", p); err != nil || !dailyPeriod.MatchString(p) {
			return bad("YYYY-MM-DD")
		}
	case Weekly:
		m := weeklyPeriod.FindStringSubmatch(p)
		if m == nil {
			return bad("YYYY-Www")
		}
		year, _ := strconv.Atoi(m[1])
		week, _ := strconv.Atoi(m[2])
		// The last ISO week of a year is the one holding 28 December.
		_, last := time.Date(year, 12, 28, 0, 0, 0, 0, time.UTC).ISOWeek()
		if week < 1 || week > last {
			return bad("YYYY-Www with an existing week")
		}
	case Monthly:
		if _, err := time.Parse("2006-01", p); err != nil || !monthlyPeriod.MatchString(p) {
			return bad("YYYY-MM")
		}
	default:
		if p != AllTime {
			return bad(`"all" (this board never resets)`)
		}
	}
	return nil
}

// PreviousPeriod names the period before the one holding t (AllTime for
// boards that never reset).
func (d Definition) PreviousPeriod(t time.Time) string {
	local := t.In(d.Location())
	switch d.Reset {
	case Daily:
		return d.PeriodAt(local.AddDate(0, 0, -1))
	case Weekly:
		return d.PeriodAt(local.AddDate(0, 0, -7))
	case Monthly:
		first := time.Date(local.Year(), local.Month(), 1, 12, 0, 0, 0, local.Location())
		return d.PeriodAt(first.AddDate(0, -1, 0))
	}
	return AllTime
}

// PeriodStart is when period p of the board begins, in its time zone (the
// zero time for AllTime or a name that is not one of its periods).
func (d Definition) PeriodStart(p string) time.Time {
	loc := d.Location()
	switch d.Reset {
	case Daily:
		t, err := time.ParseInLocation("2006-01-02", p, loc)
		if err == nil {
			return t
		}
	case Weekly:
		m := weeklyPeriod.FindStringSubmatch(p)
		if m == nil {
			break
		}
		year, _ := strconv.Atoi(m[1])
		week, _ := strconv.Atoi(m[2])
		// ISO week 1 holds 4 January; weeks start on Monday.
		jan4 := time.Date(year, 1, 4, 0, 0, 0, 0, loc)
		monday := jan4.AddDate(0, 0, -((int(jan4.Weekday()) + 6) % 7))
		return monday.AddDate(0, 0, 7*(week-1))
	case Monthly:
		t, err := time.ParseInLocation("2006-01", p, loc)
		if err == nil {
			return t
		}
	}
	return time.Time{}
}

// PeriodEnd is when period p ends: the start of the next one.
func (d Definition) PeriodEnd(p string) time.Time {
	start := d.PeriodStart(p)
	switch d.Reset {
	case Daily:
		return start.AddDate(0, 0, 1)
	case Weekly:
		return start.AddDate(0, 0, 7)
	case Monthly:
		return start.AddDate(0, 1, 0)
	}
	return time.Time{}
}
