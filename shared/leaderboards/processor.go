package leaderboards

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/rallyhq/rally/shared/cachegen"
	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/errs"
	"github.com/rallyhq/rally/shared/obs"
	"github.com/rallyhq/rally/shared/streams"
)

// Sync is the processor's view of the Redis boards.
type Sync interface {
	// Apply writes scores of one board period, versioned. A Removed score
	// (erasure) is forgotten, leaving nothing that holds the player's id.
	Apply(ctx context.Context, d Definition, period string, scores []Score) error
	Rebuild(ctx context.Context, d Definition, period string, expected int64, scan func(fn func([]Score) error) error) error
}

// Processor keeps the Redis boards in line with the Scores stream. Each
// record carries the score's version, so the submit path's own write, a
// redelivered record and an older record arriving late all leave the
// newest value. When Redis cannot be written, the board periods are marked
// dirty and the cache generation bumped: readers use DynamoDB until a
// later batch or tick rebuilds them.
type Processor struct {
	Decode  func(events.DynamoDBEventRecord) (Score, bool, error)
	Defs    Definitions
	Scores  Scores
	Sync    Sync
	Gen     *cachegen.Tracker
	Clock   clock.Clock
	Log     *slog.Logger
	Metrics *obs.Metrics
	// RepairBudget bounds the time one invocation spends rebuilding
	// boards (default 20s).
	RepairBudget time.Duration
}

type boardPeriod struct{ board, period string }

// Process applies one stream batch (an empty one is a scheduled tick).
func (p *Processor) Process(ctx context.Context, records []events.DynamoDBEventRecord) error {
	latest := map[boardPeriod]map[string]Score{}
	var order []boardPeriod
	var decodeErr error
	failedAt := -1
	for i, rec := range records {
		s, ok, err := p.Decode(rec)
		if err != nil {
			decodeErr, failedAt = err, i
			break
		}
		if !ok {
			continue
		}
		bp := boardPeriod{s.Board, s.Period}
		if latest[bp] == nil {
			latest[bp] = map[string]Score{}
			order = append(order, bp)
		}
		// A deletion (erasure) comes one version past the score it deleted,
		// so it is kept over every record of that score.
		if cur, seen := latest[bp][s.PlayerID]; !seen || cur.Version < s.Version {
			latest[bp][s.PlayerID] = s
		}
	}
	var dirty []string
	for _, bp := range order {
		d, err := p.Defs.Get(ctx, bp.board)
		if errs.Is(err, errs.NotFound) {
			p.Log.WarnContext(ctx, "scores of an unknown leaderboard skipped", "board", bp.board)
			continue
		}
		if err != nil {
			return err
		}
		scores := make([]Score, 0, len(latest[bp]))
		for _, s := range latest[bp] {
			scores = append(scores, s)
		}
		if err := p.Sync.Apply(ctx, d, bp.period, scores); err != nil {
			p.Log.WarnContext(ctx, "redis board update failed; marking it dirty", "board", bp.board, "period", bp.period, "error", err.Error())
			dirty = append(dirty, dirtyKey(bp.board, bp.period))
		}
		p.Metrics.Count("ScoresMirrored", len(scores), nil)
	}
	if len(dirty) > 0 {
		if err := p.Gen.MarkDirty(ctx, dirty, p.Clock.Now()); err != nil {
			return err
		}
	}
	p.repair(ctx)
	if decodeErr != nil {
		return &streams.PartialError{From: failedAt, Err: decodeErr}
	}
	return nil
}

func dirtyKey(board, period string) string { return board + "#" + period }

// repair rebuilds what the cache generation says Redis may have wrong:
// the dirty board periods, or — when Redis lost its data — the current and
// previous period of every board. Failures wait for the next batch or tick.
func (p *Processor) repair(ctx context.Context) {
	st, err := p.Gen.State(ctx)
	if err != nil || st.Fresh() {
		return
	}
	budget := p.RepairBudget
	if budget == 0 {
		budget = 20 * time.Second
	}
	deadline := time.Now().Add(budget)
	if !st.MirrorKnown {
		err = p.rebuildAll(ctx, deadline)
	}
	if err == nil {
		err = p.rebuildDirty(ctx, deadline)
	}
	if err == nil && time.Now().Before(deadline) {
		err = p.Gen.Advance(ctx, st.Durable)
	}
	if err != nil {
		p.Log.WarnContext(ctx, "leaderboard repair incomplete", "error", err.Error())
	}
}

func (p *Processor) rebuildAll(ctx context.Context, deadline time.Time) error {
	defs, err := p.Defs.List(ctx)
	if err != nil {
		return err
	}
	now := p.Clock.Now()
	for _, d := range defs {
		for _, period := range []string{d.PeriodAt(now), d.PreviousPeriod(now)} {
			if time.Now().After(deadline) {
				return errs.New(errs.Unavailable, "rebuild budget spent")
			}
			if err := p.rebuild(ctx, d, period); err != nil {
				return err
			}
			if d.Reset == Never {
				break
			}
		}
	}
	return nil
}

func (p *Processor) rebuildDirty(ctx context.Context, deadline time.Time) error {
	for time.Now().Before(deadline) {
		markers, err := p.Gen.Dirty(ctx, 25)
		if err != nil || len(markers) == 0 {
			return err
		}
		for _, m := range markers {
			board, period, ok := strings.Cut(m.Key, "#")
			if !ok {
				continue
			}
			d, err := p.Defs.Get(ctx, board)
			if errs.Is(err, errs.NotFound) {
				continue
			}
			if err != nil {
				return err
			}
			if err := p.rebuild(ctx, d, period); err != nil {
				return err
			}
		}
		if err := p.Gen.Clear(ctx, markers); err != nil {
			return err
		}
	}
	return errs.New(errs.Unavailable, "rebuild budget spent")
}

func (p *Processor) rebuild(ctx context.Context, d Definition, period string) error {
	members, err := p.Scores.Members(ctx, d.ID, period)
	if err != nil {
		return err
	}
	p.Log.InfoContext(ctx, "rebuilding leaderboard in redis", "board", d.ID, "period", period, "members", members)
	return p.Sync.Rebuild(ctx, d, period, members, func(fn func([]Score) error) error {
		return p.Scores.Scan(ctx, d.ID, period, fn)
	})
}
