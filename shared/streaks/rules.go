package streaks

import (
	"slices"
	"sync"
	"time"
	_ "time/tzdata" // activity is dated in any IANA zone, whatever the host has installed
)

// DateLayout is how activity dates are written.
const DateLayout = "2006-01-02"

// Limits of the time-zone rule: at most MaxTZChanges accepted changes in
// any TZWindow; further ones are refused and recorded.
const (
	MaxTZChanges = 2
	TZWindow     = 7 * 24 * time.Hour
)

var zones sync.Map // name → *time.Location

// Zone loads an IANA zone ("" is UTC). Zones are cached: activity and
// streak reads look one up on every call.
func Zone(name string) (*time.Location, error) {
	if name == "" {
		return time.UTC, nil
	}
	if loc, ok := zones.Load(name); ok {
		return loc.(*time.Location), nil
	}
	loc, err := time.LoadLocation(name)
	if err != nil || loc.String() == "Local" {
		return nil, err
	}
	zones.Store(name, loc)
	return loc, nil
}

func zoneOrUTC(name string) *time.Location {
	if loc, err := Zone(name); err == nil && loc != nil {
		return loc
	}
	return time.UTC
}

// DateIn is the local date of t in zone.
func DateIn(t time.Time, zone string) string { return t.In(zoneOrUTC(zone)).Format(DateLayout) }

// AddDays shifts a date by n days (calendar arithmetic, no zone involved).
func AddDays(date string, n int) string {
	d, err := time.Parse(DateLayout, date)
	if err != nil {
		return ""
	}
	return d.AddDate(0, 0, n).Format(DateLayout)
}

// BreaksAt is when the streak stops being live: the start of the second
// local day after LastDate, when a whole local day has passed with no
// activity. The zero time when there is no streak.
func (s State) BreaksAt() time.Time {
	if s.LastDate == "" || s.Current == 0 {
		return time.Time{}
	}
	d, err := time.ParseInLocation(DateLayout, s.LastDate, zoneOrUTC(s.Timezone))
	if err != nil {
		return time.Time{}
	}
	return d.AddDate(0, 0, 2)
}

// LiveAt reports whether the streak still counts at now: the player was
// active today or yesterday in their zone.
func (s State) LiveAt(now time.Time) bool {
	b := s.BreaksAt()
	return !b.IsZero() && now.Before(b)
}

// View is a streak as the player sees it at a moment.
type View struct {
	Current     int64
	ActiveToday bool
	// AtRisk is true when the player was active yesterday and not yet
	// today: the streak breaks at the end of today.
	AtRisk bool
}

// ViewAt is the streak as seen at now in the player's zone: 0 after a
// missed day.
func (s State) ViewAt(now time.Time) View {
	if !s.LiveAt(now) {
		return View{}
	}
	today := DateIn(now, s.Timezone)
	active := s.LastDate >= today
	return View{Current: s.Current, ActiveToday: active, AtRisk: !active}
}

// Activity is one request to record activity.
type Activity struct {
	Type   EventType
	Source Source
	// Timezone is the zone the request reports, empty when it sent none.
	Timezone string
	At       time.Time
	// By is who reported it: the player, or a game server for them. The
	// points table says who may report each event type.
	By Reporter
}

// Outcome is what an activity did.
type Outcome struct {
	Date     string
	Points   int64
	Extended bool
	// Timezone is the zone the date was taken in.
	Timezone string
	// RejectedTimezone is a requested change the limit refused.
	RejectedTimezone string
}

// Apply records a on top of s. day holds the points already awarded on the
// activity's date (it must be the day Outcome.Date names: call DateFor
// first). It returns the next state and what happened; s is not changed.
func Apply(s State, day Day, a Activity) (State, Outcome) {
	a.At = a.At.Truncate(time.Millisecond) // what boards and indexes keep
	next := s
	next.TZChanges = recentChanges(s.TZChanges, a.At)
	zone, rejected := next.zoneFor(a)
	if zone != s.Timezone {
		if s.Timezone != "" {
			next.TZChanges = append(next.TZChanges, a.At)
		}
		next.Timezone = zone
	}
	if rejected != "" {
		next.TZRejected++
	}
	out := Outcome{Date: DateIn(a.At, zone), Timezone: zone, RejectedTimezone: rejected}
	switch {
	case s.LastDate == "" || out.Date > AddDays(s.LastDate, 1):
		next.Current, next.LastDate, next.ReachedAt = 1, out.Date, a.At
	case out.Date == AddDays(s.LastDate, 1):
		next.Current, next.LastDate, next.ReachedAt = s.Current+1, out.Date, a.At
		out.Extended = true
	}
	// Otherwise the date is the last one (or, after a move west, the one
	// before): the streak stays as it is.
	next.Longest = max(next.Longest, next.Current)
	award, _ := AwardFor(a.Type)
	out.Points = max(0, min(award.Points, award.DailyCap-day.ByType[a.Type]))
	next.TotalPoints += out.Points
	next.Version++
	next.UpdatedAt = a.At
	return next, out
}

// DateFor is the activity date a would get on top of s, without applying
// it: the store reads that day's totals before Apply.
func DateFor(s State, a Activity) string {
	zone, _ := s.zoneFor(a)
	return DateIn(a.At, zone)
}

// zoneFor decides the zone of an activity: the requested one if it is no
// change or the limit allows a change, else the stored one (and the
// requested one is returned as rejected).
func (s State) zoneFor(a Activity) (zone, rejected string) {
	if a.Timezone == "" || a.Timezone == s.Timezone {
		return s.Timezone, ""
	}
	if s.Timezone == "" || len(recentChanges(s.TZChanges, a.At)) < MaxTZChanges {
		return a.Timezone, ""
	}
	return s.Timezone, a.Timezone
}

// recentChanges keeps the changes inside the window ending at now.
func recentChanges(changes []time.Time, now time.Time) []time.Time {
	return slices.DeleteFunc(slices.Clone(changes), func(t time.Time) bool { return !t.After(now.Add(-TZWindow)) })
}

// Day returns the day's totals after one more event worth points of type t.
func (d Day) With(t EventType, points int64) Day {
	next := Day{Date: d.Date, Points: d.Points + points, Events: d.Events + 1, ByType: make(map[EventType]int64, len(d.ByType)+1)}
	for k, v := range d.ByType {
		next.ByType[k] = v
	}
	next.ByType[t] += points
	return next
}

// Before is the order of streak leaderboards: the longer streak, then the
// one reached earlier, then the user id.
func Before(a, b Entry) bool {
	if a.Streak != b.Streak {
		return a.Streak > b.Streak
	}
	if !a.ReachedAt.Equal(b.ReachedAt) {
		return a.ReachedAt.Before(b.ReachedAt)
	}
	return a.UserID < b.UserID
}
