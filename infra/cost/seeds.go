package cost

import (
	"fmt"
	"sort"
)

// PeakShare is the share of a seed's peak rate a month is priced at when
// the seed gives no daily volume: 20 % of the peak, sustained all month.
const PeakShare = 0.2

// Route names, as the cost section measures them (infra/bench).
const (
	Favorite       = "favorite"
	Unfavorite     = "unfavorite"
	FavoriteStatus = "favorite status, 100 ids"
	FavoriteCount  = "favorite count"
	FavoritesList  = "favorites list, 50 items"
	Like           = "like"
	LikeToggle     = "like toggle"
	SubmitScore    = "submit score (service)"
	Top10          = "leaderboard top 10"
	RankK          = "player rank + 4"
	RecordActivity = "record activity"
	GetStreak      = "get streak"
)

// Load is one route's part of a seed's month: operations a second,
// sustained over the month.
type Load struct {
	Route     string
	PerSecond float64
}

// Seed is one of the product brief's seeds and the month it is priced at.
type Seed struct {
	Name string
	// Says is the seed's load as DESIGN.md states it; Basis how the
	// month was derived from it; Mix how its operations are split over
	// the routes.
	Says, Basis, Mix string
	Loads            []Load
	// Members is how many members the seed's Redis boards hold all month
	// (0: the seed states no population, and the cache's storage is not
	// priced).
	Members float64
}

// perDay is a daily volume as a rate a second.
func perDay(n float64) float64 { return n / 86400 }

// Seeds are the seeds' loads as DESIGN.md ("Cost model") lists them.
func Seeds() []Seed {
	writes000, reads000 := PeakShare*100_000, PeakShare*1_000_000
	reads003 := perDay(1e9)
	opens004 := perDay(10e6 * 2)
	return []Seed{{
		Name:  "000 favorites",
		Says:  "100k writes/s and 1M reads/s at peak",
		Basis: "no daily volume: 20% of the peak sustained (20k writes/s, 200k reads/s)",
		Mix:   "writes: half favorites, half unfavorites; reads: 50% favorite status of 100 games, 40% a game's count, 10% a favorites page of 50",
		Loads: []Load{
			{Favorite, writes000 / 2}, {Unfavorite, writes000 / 2},
			{FavoriteStatus, reads000 * 0.5}, {FavoriteCount, reads000 * 0.4}, {FavoritesList, reads000 * 0.1},
		},
	}, {
		Name:  "003 leaderboards",
		Says:  "10k score updates/s (peak) and 1B reads/day",
		Basis: "reads at their daily volume (1B/day = 11.6k/s); score updates, given only as a rate, at 20% of it sustained (2k/s)",
		Mix:   "reads: half a board's top 10, half a player's rank + 4",
		Loads: []Load{
			{SubmitScore, PeakShare * 10_000},
			{Top10, reads003 / 2}, {RankK, reads003 / 2},
		},
	}, {
		Name:    "004 streaks",
		Says:    "millions of app opens a day, taken as 10M daily actives each opening twice",
		Basis:   "daily volume: 20M opens a day",
		Mix:     "each open records a DAILY_OPEN activity and reads the player's streak",
		Loads:   []Load{{RecordActivity, opens004}, {GetStreak, opens004}},
		Members: 10e6,
	}, {
		Name:  "002 likes",
		Says:  "a million likes a second at peak",
		Basis: "no daily volume: 20% of the peak sustained (200k likes/s)",
		Mix:   "every like is a toggle",
		Loads: []Load{{LikeToggle, PeakShare * 1_000_000}},
	}}
}

// Line is one route's part of a seed's month.
type Line struct {
	Route          string
	Operations     float64
	Dollars, Floor Dollars
}

// Month is a seed's month: its lines, and the cache's storage of its
// members at the measured bytes per member (and at the floor's).
type Month struct {
	Seed                  Seed
	Lines                 []Line
	Storage, FloorStorage float64
}

// Total is the month's dollars by service, the cache's storage in Redis.
func (m Month) Total() Dollars {
	d := Dollars{Redis: m.Storage}
	for _, l := range m.Lines {
		d = d.Plus(l.Dollars)
	}
	return d
}

// FloorTotal is the month at the floor's units.
func (m Month) FloorTotal() Dollars {
	d := Dollars{Redis: m.FloorStorage}
	for _, l := range m.Lines {
		d = d.Plus(l.Floor)
	}
	return d
}

// Item is one line item of a month: a route's spend on one service (or
// the cache's storage).
type Item struct {
	What    string
	Dollars float64
}

// Biggest are the month's n largest line items, largest first.
func (m Month) Biggest(n int) []Item {
	var items []Item
	for _, l := range m.Lines {
		for _, s := range []struct {
			name string
			v    float64
		}{{"Lambda", l.Dollars.Lambda}, {"API Gateway", l.Dollars.API}, {"DynamoDB", l.Dollars.DynamoDB}, {"Redis", l.Dollars.Redis}, {"Firehose+S3", l.Dollars.Analytics}} {
			items = append(items, Item{s.name + " of " + l.Route, s.v})
		}
	}
	if m.Storage > 0 {
		items = append(items, Item{"Redis storage", m.Storage})
	}
	sort.SliceStable(items, func(i, j int) bool { return items[i].Dollars > items[j].Dollars })
	if len(items) > n {
		items = items[:n]
	}
	return items
}

// Month prices seed s's month with units (each route's measured units and
// its floor's) and the cache's bytes per member (measured and floor).
func (p Prices) Month(s Seed, units map[string][2]Units, memberBytes, floorMemberBytes float64) (Month, error) {
	m := Month{Seed: s}
	for _, l := range s.Loads {
		u, ok := units[l.Route]
		if !ok {
			return m, fmt.Errorf("cost: seed %s: no units measured for %q", s.Name, l.Route)
		}
		ops := l.PerSecond * SecondsPerMonth
		m.Lines = append(m.Lines, Line{Route: l.Route, Operations: ops, Dollars: p.Of(u[0]).Scale(ops), Floor: p.Of(u[1]).Scale(ops)})
	}
	m.Storage = p.CacheMonth(s.Members * memberBytes)
	m.FloorStorage = p.CacheMonth(s.Members * floorMemberBytes)
	return m, nil
}
