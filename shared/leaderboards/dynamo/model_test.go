package dynamo_test

import (
	"cmp"
	"slices"
	"strings"

	"github.com/rallyhq/rally/shared/leaderboards"
	"github.com/rallyhq/rally/shared/leaderboards/dynamo"
)

// rankedByHand is the board DESIGN.md describes, written out without the
// leaderboards package's rules, so the stores are checked against the
// specification rather than against the code they share with it: the
// better score first (higher under desc, lower under asc), then the
// earlier time it was reached (kept to the millisecond), then the smaller
// player id. Under earliest the ranks are 1..N; under shared a player's
// rank is one more than the number of players with a strictly better
// score (1, 2, 2, 4).
func rankedByHand(o leaderboards.Order, tb leaderboards.TieBreak, entries []leaderboards.Entry) []leaderboards.Entry {
	better := func(a, b int64) bool { // a is a strictly better score than b
		if o == leaderboards.Asc {
			return a < b
		}
		return a > b
	}
	out := slices.Clone(entries)
	slices.SortFunc(out, func(a, b leaderboards.Entry) int {
		switch {
		case better(a.Score, b.Score):
			return -1
		case better(b.Score, a.Score):
			return 1
		case a.ReachedAt.UnixMilli() != b.ReachedAt.UnixMilli():
			return cmp.Compare(a.ReachedAt.UnixMilli(), b.ReachedAt.UnixMilli())
		}
		return strings.Compare(a.PlayerID, b.PlayerID)
	})
	// ahead counts, per score, the players with a strictly better one.
	ahead := map[int64]int{}
	for i, e := range out {
		if _, seen := ahead[e.Score]; !seen {
			ahead[e.Score] = i
		}
	}
	for i := range out {
		out[i].Rank = i + 1
		if tb == leaderboards.Shared {
			out[i].Rank = ahead[out[i].Score] + 1
		}
	}
	return out
}

// bucketByHand is a score's histogram bucket as the histogram's stored
// format describes it (see histogram.go and the README), written out
// again: buckets are numbered by magnitude, the sign mirroring them.
// Magnitudes below 256 are buckets 0..255 of their own; from there each
// doubling of the magnitude [2^k, 2^(k+1)) is cut into 128 equal buckets,
// numbered on from 256 (k=8 holds buckets 256..383, k=9 384..511, ...).
// The numbers are stored (markers, histogram items), so they are pinned
// here rather than read from the code.
func bucketByHand(score int64) int {
	mag := score
	if mag < 0 {
		mag = -mag
	}
	b := int(mag)
	if mag >= 256 {
		k := 8
		for mag >= int64(1)<<(k+1) {
			k++
		}
		width := int64(1) << (k - 7)
		b = 256 + (k-8)*128 + int((mag-int64(1)<<k)/width)
	}
	if score < 0 {
		return -b
	}
	return b
}

// histogramByHand counts the scores per bucket.
func histogramByHand(scores map[string]leaderboards.Score) dynamo.Histogram {
	h := dynamo.Histogram{Counts: map[int]int64{}}
	for _, s := range scores {
		h.Counts[bucketByHand(s.Score)]++
		h.Total++
	}
	return h
}
