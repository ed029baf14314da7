// Package streakmodel is the streak rules of DESIGN.md written out plainly,
// for tests to check the streak rules, stores, caches and routes against:
// an activity is dated in the player's IANA zone; on the same date the
// streak is unchanged, on the next date it grows by one, later it restarts
// at 1; a streak is live while its last date is today or yesterday in the
// player's zone; streak boards rank live streaks, the longer first, then
// the one reached earlier, then the user id. It shares no code with
// package streaks, so a bug there cannot hide in what a test expects.
package streakmodel

import (
	"strings"
	"time"
	_ "time/tzdata" // any IANA zone, whatever the host has installed
)

// Date is the calendar date of t in zone ("" is UTC), as YYYY-MM-DD.
func Date(t time.Time, zone string) string {
	loc := time.UTC
	if zone != "" {
		var err error
		if loc, err = time.LoadLocation(zone); err != nil {
			panic("streakmodel: zone " + zone + ": " + err.Error())
		}
	}
	return t.In(loc).Format(time.DateOnly)
}

// AddDays is the date n calendar days after date (before, for n < 0).
func AddDays(date string, n int) string {
	d, err := time.Parse(time.DateOnly, date)
	if err != nil {
		panic("streakmodel: date " + date + ": " + err.Error())
	}
	y, m, day := d.Date()
	return time.Date(y, m, day+n, 12, 0, 0, 0, time.UTC).Format(time.DateOnly)
}

// Streak is one player's streak as the rules make it.
type Streak struct {
	Current, Longest int64
	// Last is the date of the latest activity that moved the streak,
	// empty before the first.
	Last string
	// ReachedAt is when Current was reached: the activity that grew or
	// restarted the streak.
	ReachedAt time.Time
}

// Play records an activity at at, dated in zone, and reports whether it
// grew the streak.
func (s *Streak) Play(at time.Time, zone string) (grown bool) {
	date := Date(at, zone)
	switch {
	case s.Last == "" || date > AddDays(s.Last, 1): // the first, or a day was missed
		s.Current, s.Last, s.ReachedAt = 1, date, at
	case date == AddDays(s.Last, 1):
		s.Current, s.Last, s.ReachedAt, grown = s.Current+1, date, at, true
	}
	s.Longest = max(s.Longest, s.Current)
	return grown
}

// Live reports whether a streak whose last date is last counts at now for
// a player in zone: they were active today or yesterday, in their zone.
func Live(last, zone string, now time.Time) bool {
	return last != "" && last >= AddDays(Date(now, zone), -1)
}

// Ahead reports whether a streak (length, reached at, user) ranks ahead of
// another on a streak board.
func Ahead(aStreak int64, aReached time.Time, aUser string, bStreak int64, bReached time.Time, bUser string) bool {
	if aStreak != bStreak {
		return aStreak > bStreak
	}
	if !aReached.Equal(bReached) {
		return aReached.Before(bReached)
	}
	return strings.Compare(aUser, bUser) < 0
}
