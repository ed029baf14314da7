package dynamo

import (
	"context"

	"github.com/rallyhq/rally/shared/leaderboards"
)

// ScoreItem is a Scores item as the store writes it (benchmark seeds).
var ScoreItem = itemOf

// PutHistogram writes a board period's whole histogram (benchmark seeds:
// the counts Tally would have reached, without a million transactions).
func (s *Scores) PutHistogram(ctx context.Context, board, period string, h Histogram) error {
	groups := map[int]bool{}
	for b := range h.Counts {
		groups[group(b)] = true
	}
	return s.putGroups(ctx, board, period, h, groups)
}

// Marker reads the version and bucket a board period's histogram counts
// for a player; ok is false when it counts none.
func (s *Scores) Marker(ctx context.Context, board, period, player string) (ver int64, bucket int, ok bool, err error) {
	got, err := s.markers(ctx, board, period, []leaderboards.Score{{PlayerID: player}})
	m, ok := got[player]
	return m.Ver, m.Bucket, ok, err
}
