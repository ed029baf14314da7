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
		// PlayerScores returns every score the player has on boards.
		PlayerScores(ctx context.Context, player string, boards []string) ([]Score, error)
	}
	Sync Sync
	// Archive holds closed periods' final standings, which the player
	// is struck from before their scores go (a score names the page that
	// holds them); nil when none are kept.
	Archive interface {
		Head(ctx context.Context, board, period string) (ArchiveHead, bool, error)
		PageOf(ctx context.Context, d Definition, period string, s Score) (int, bool, error)
		Strike(ctx context.Context, d Definition, period string, n int, s Score) (bool, error)
	}
	// Documents holds the archive's JSON Lines, whose part that names
	// the player is rewritten without them; nil when none are kept.
	Documents ArchiveDocuments
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
	if err := e.strike(ctx, byID, player, ids); err != nil {
		return false, err
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

// strike takes the player out of every archived period that holds them.
// It runs before their scores are deleted, and again on a resumed
// erasure, where it finds nothing left to strike.
func (e *Eraser) strike(ctx context.Context, byID map[string]Definition, player string, boards []string) error {
	if e.Archive == nil {
		return nil
	}
	scores, err := e.Scores.PlayerScores(ctx, player, boards)
	if err != nil {
		return err
	}
	for _, sc := range scores {
		d, ok := resolve(byID, sc.Board)
		if !ok || d.Reset == Never {
			continue
		}
		head, archived, err := e.Archive.Head(ctx, sc.Board, sc.Period)
		if err != nil || !archived {
			if err != nil {
				return err
			}
			continue
		}
		page, found, err := e.Archive.PageOf(ctx, d, sc.Period, sc)
		if err != nil {
			return err
		}
		if !found {
			continue
		}
		// The part first: the page struck, a resumed erasure still finds
		// the page by the score and rewrites the part.
		if e.Documents != nil {
			if err := strikePart(ctx, e.Documents, PartKey(sc.Board, sc.Period, head.Part(page)), player); err != nil {
				return err
			}
		}
		if _, err := e.Archive.Strike(ctx, d, sc.Period, page, sc); err != nil {
			return err
		}
	}
	return nil
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
