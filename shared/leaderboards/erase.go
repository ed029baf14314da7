package leaderboards

import (
	"context"
	"fmt"
	"time"

	"github.com/rallyhq/rally/shared/clock"
)

// Eraser erases a player's scores from every board and period, and every
// submission of theirs (a part of shared/privacy's erasure job): in
// DynamoDB, where member counts follow, and in Redis. The leaderboard
// processor forgets deleted scores too; forgetting them here as well means
// a completed erasure has nothing left anywhere.
//
// The histograms are the processor's alone: each deleted score's marker is
// held before the deletion, and the part is done once the processor has
// counted every deletion and no marker names the player. A deletion
// parked meanwhile is applied by the dead-letter part, so the erasure
// never completes with a marker that a dropped record would leave behind.
type Eraser struct {
	Definitions interface {
		List(ctx context.Context) ([]Definition, error)
	}
	Scores interface {
		// ErasePlayer deletes the player's submissions on boards and their
		// scores, returning the periods that held one.
		ErasePlayer(ctx context.Context, player string, boards []string) ([]BoardPeriod, error)
		// HistogramMarks is how many histogram markers still name the
		// player.
		HistogramMarks(ctx context.Context, player string) (int, error)
	}
	Sync Sync
	// Wait bounds how long one run waits for the leaderboard processor
	// (default 10s); past it the erasure resumes on the next run.
	Wait time.Duration
}

// Name implements privacy.Part.
func (e *Eraser) Name() string { return "scores" }

// Erase implements privacy.Part: done is false while the leaderboard
// processor has not counted every deletion yet, and a later run resumes.
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
	return e.counted(ctx, player)
}

// counted waits, up to Wait, for no histogram marker to name the player.
func (e *Eraser) counted(ctx context.Context, player string) (bool, error) {
	wait := e.Wait
	if wait == 0 {
		wait = 10 * time.Second
	}
	deadline := time.Now().Add(wait)
	const pause = 50 * time.Millisecond
	for {
		n, err := e.Scores.HistogramMarks(ctx, player)
		if err != nil || n == 0 {
			return err == nil, err
		}
		if time.Now().Add(pause).After(deadline) {
			return false, nil
		}
		if err := clock.Sleep(ctx, pause); err != nil {
			return false, err
		}
	}
}
