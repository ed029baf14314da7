package leaderboards

import (
	"fmt"
	"sort"
	"time"

	"github.com/rallyhq/rally/shared/errs"
)

// MaxScore bounds |score| and every total: scores stay exact in a double,
// which is how Redis sorted sets hold them.
const MaxScore = 1 << 53

// Before reports whether a ranks ahead of b on a board with order o: the
// better score, then the earlier time it was reached, then the smaller
// player id. It is a total order; every read path ranks by it.
func Before(o Order, a, b Entry) bool {
	if a.Score != b.Score {
		if o == Asc {
			return a.Score < b.Score
		}
		return a.Score > b.Score
	}
	ta, tb := a.ReachedAt.UnixMilli(), b.ReachedAt.UnixMilli()
	if ta != tb {
		return ta < tb
	}
	return a.PlayerID < b.PlayerID
}

// Rank sorts entries by Before and numbers them: 1..N under Earliest; under
// Shared, equal scores share the rank of the first of them (1, 2, 2, 4).
// offset is the number of entries ranked ahead of the first one given, and
// better counts, for Shared, those ahead with a strictly better score than
// the first given (so a window of a board ranks like the whole board).
func Rank(o Order, t TieBreak, entries []Entry, offset, better int) {
	sort.Slice(entries, func(i, j int) bool { return Before(o, entries[i], entries[j]) })
	for i := range entries {
		switch {
		case t != Shared:
			entries[i].Rank = offset + i + 1
		case i == 0:
			entries[i].Rank = better + 1
		case entries[i].Score == entries[i-1].Score:
			entries[i].Rank = entries[i-1].Rank
		default:
			entries[i].Rank = offset + i + 1
		}
	}
}

// Percentile is the share of the board's players ranked behind the
// player, in percent with two decimals: 0 for the last, close to 100 for the
// first of a big board.
func Percentile(rank int, total int64) float64 {
	if total <= 0 || rank <= 0 {
		return 0
	}
	behind := float64(total - int64(rank))
	if behind < 0 {
		behind = 0
	}
	return float64(int64(behind/float64(total)*10000+0.5)) / 100
}

// Apply decides the next score under d's policy when match m arrives on
// top of current (nil when the player has none). A Best submission that is
// not better changes nothing; Latest keeps the most recent match by
// occurrence time, so a late-arriving older match does not overwrite a
// newer one; Increment adds, refusing a total beyond MaxScore.
func Apply(d Definition, current *Score, m Match) (Score, bool, error) {
	next := Score{PlayerID: m.PlayerID, Score: m.Score, ReachedAt: m.OccurredAt, LastMatchID: m.MatchID}
	if current == nil {
		return next, true, nil
	}
	cur := *current
	switch d.Policy {
	case Best:
		better := m.Score > cur.Score
		if d.Order == Asc {
			better = m.Score < cur.Score
		}
		if !better {
			return cur, false, nil
		}
	case Latest:
		if m.OccurredAt.Before(cur.ReachedAt) {
			return cur, false, nil
		}
	case Increment:
		sum := cur.Score + m.Score
		if sum > MaxScore || sum < -MaxScore {
			return cur, false, errs.New(errs.Conflict, "the total would exceed ±2^53")
		}
		next.Score = sum
		if m.Score == 0 {
			// Adding nothing does not move the time the score was reached.
			return cur, false, nil
		}
		if m.OccurredAt.Before(cur.ReachedAt) {
			// A late-arriving older match adds its points but cannot make
			// the total look reached earlier than it was.
			next.ReachedAt = cur.ReachedAt
		}
	default:
		return cur, false, fmt.Errorf("leaderboards: unknown policy %q", d.Policy)
	}
	return next, true, nil
}

// entryOf turns a score into an unranked entry.
func entryOf(s Score) Entry {
	return Entry{PlayerID: s.PlayerID, Score: s.Score, ReachedAt: s.ReachedAt}
}

// truncMillis keeps times to the millisecond, the precision every store
// and cache keeps them at.
func truncMillis(t time.Time) time.Time { return t.UTC().Truncate(time.Millisecond) }
