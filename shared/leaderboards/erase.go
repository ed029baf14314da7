package leaderboards

import (
	"context"
	"fmt"
)

// Eraser erases a player's scores from every board and period, and every
// submission of theirs (a part of shared/privacy's erasure job): in
// DynamoDB, where member counts follow, and in Redis. The leaderboard
// processor forgets deleted scores too; forgetting them here as well means
// a completed erasure has nothing left anywhere.
type Eraser struct {
	Definitions interface {
		List(ctx context.Context) ([]Definition, error)
	}
	Scores interface {
		// ErasePlayer deletes the player's submissions on boards and their
		// scores, returning the periods that held one.
		ErasePlayer(ctx context.Context, player string, boards []string) ([]BoardPeriod, error)
	}
	Sync Sync
}

// Name implements privacy.Part.
func (e *Eraser) Name() string { return "scores" }

// Erase implements privacy.Part.
func (e *Eraser) Erase(ctx context.Context, player string) (done bool, err error) {
	defs, err := e.Definitions.List(ctx)
	if err != nil {
		return false, err
	}
	byID := make(map[string]Definition, len(defs))
	ids := make([]string, 0, len(defs))
	for _, d := range defs {
		byID[d.ID] = d
		ids = append(ids, d.ID)
	}
	periods, err := e.Scores.ErasePlayer(ctx, player, ids)
	if err != nil {
		return false, err
	}
	for _, bp := range periods {
		d, ok := resolve(byID, bp.Board)
		if !ok {
			continue
		}
		// A Removed score is how the processor forgets an erased player;
		// the erasure takes the same way.
		if err := e.Sync.Apply(ctx, d, bp.Period, []Score{{PlayerID: player, Removed: true}}); err != nil {
			return false, fmt.Errorf("forget a score in redis: %w", err)
		}
	}
	return true, nil
}
