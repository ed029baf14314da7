package leaderboards

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/aws/aws-lambda-go/events"

	"github.com/rallyhq/rally/shared/cachegen"
	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/errs"
	"github.com/rallyhq/rally/shared/freshness"
	"github.com/rallyhq/rally/shared/jobs"
	"github.com/rallyhq/rally/shared/obs"
	"github.com/rallyhq/rally/shared/streams"
)

// Sync is the processor's view of the Redis boards.
type Sync interface {
	// Apply writes scores of one board period, versioned. A Removed score
	// (erasure) is forgotten, leaving nothing that holds the player's id.
	Apply(ctx context.Context, d Definition, period string, scores []Score) error
}

// Histograms keeps each board period's score histogram, from which a
// rank on a big board is estimated without Redis. Tally applies the
// newest change of each player's score, exactly once however often the
// stream delivers it; a Removed score leaves the histogram.
type Histograms interface {
	Tally(ctx context.Context, board, period string, scores []Score) error
}

// Processor keeps the Redis boards in line with the Scores stream. Each
// record carries the score's version, so the submit path's own write, a
// redelivered record and an older record arriving late all leave the
// newest value. When Redis cannot be written, the board periods are marked
// dirty and the cache generation bumped: readers use DynamoDB until a
// later batch or tick rebuilds them.
type Processor struct {
	Decode streams.Decoder[Score]
	// Rebuilds and Progress rebuild every board after Redis lost its data,
	// across invocations when it takes more than one.
	Rebuilds *Jobs
	Progress jobs.Positions
	Defs     Definitions
	Sync     Sync
	// Histograms, when set, are kept from the same changes; a batch whose
	// histograms cannot be written is retried whole.
	Histograms Histograms
	Gen        cachegen.Generations
	Clock      clock.Clock
	Log        *slog.Logger
	Metrics    *obs.Metrics

	// Freshness records, after each batch, the newest score change
	// applied: the as_of of board reads.
	Freshness *freshness.Recorder
}

// Process applies one stream batch (an empty one is a scheduled tick).
func (p *Processor) Process(ctx context.Context, records []events.DynamoDBEventRecord) error {
	batch := streams.Decode(records, p.Decode)
	// Each board period is written in one call, with the newest score of
	// each of its players.
	periods := map[BoardPeriod][]Score{}
	var order []BoardPeriod
	for _, s := range streams.Newest(batch.Records, Score.key, Score.version, nil) {
		bp := BoardPeriod{s.Board, s.Period}
		if _, ok := periods[bp]; !ok {
			order = append(order, bp)
		}
		periods[bp] = append(periods[bp], s)
	}
	var dirty []string
	var tallied error
	defs := WithViews(p.Defs)
	for _, bp := range order {
		d, err := defs.Get(ctx, bp.Board)
		if errs.Is(err, errs.NotFound) {
			p.Log.WarnContext(ctx, "scores of an unknown leaderboard skipped", "board", bp.Board)
			continue
		}
		if err != nil {
			return err
		}
		if err := p.Sync.Apply(ctx, d, bp.Period, periods[bp]); err != nil {
			p.Log.WarnContext(ctx, "redis board update failed; marking it dirty", "board", bp.Board, "period", bp.Period, "error", err.Error())
			dirty = append(dirty, dirtyKey(bp))
		}
		p.Metrics.Count("ScoresMirrored", len(periods[bp]), nil)
		if p.Histograms != nil && tallied == nil {
			tallied = p.Histograms.Tally(ctx, bp.Board, bp.Period, periods[bp])
		}
	}
	if len(dirty) > 0 {
		if err := p.Gen.MarkDirty(ctx, dirty, p.Clock.Now()); err != nil {
			return err
		}
	}
	if tallied != nil {
		return fmt.Errorf("score histograms: %w", tallied)
	}
	p.Freshness.Applied(ctx, batch.NewestChange(Score.changedAt))
	if err := p.Gen.Repair(ctx, cacheRepair{p}); err != nil {
		p.Log.WarnContext(ctx, "leaderboard repair incomplete", "error", err.Error())
	}
	return batch.Err()
}

func dirtyKey(bp BoardPeriod) string { return bp.Board + "#" + bp.Period }

// cacheRepair is the leaderboards scope's side of the repair protocol
// (cachegen.Tracker.Repair).
type cacheRepair struct{ p *Processor }

// Rebuild rebuilds the current and previous period of every board (older
// periods are read from DynamoDB until touched) as a rebuild job does: a
// board too big for one invocation continues where the last one left it,
// and the next board is not started over. The position is kept in Redis
// (Progress), so a Redis that loses its data again starts over.
func (r cacheRepair) Rebuild(ctx context.Context) (bool, error) {
	j := r.p.Rebuilds
	r.p.Log.InfoContext(ctx, "rebuilding leaderboards in redis")
	done, err := jobs.Continue(ctx, r.p.Progress, jobs.Spec{Kind: jobs.Rebuild, Target: jobs.Leaderboard}, j.run(j.rebuild))
	if done {
		r.p.Log.InfoContext(ctx, "leaderboards rebuilt in redis")
	}
	return done, err
}

// Refresh rebuilds the dirty board periods.
func (r cacheRepair) Refresh(ctx context.Context, keys []string) error {
	for _, key := range keys {
		board, period, ok := strings.Cut(key, "#")
		if !ok {
			continue
		}
		d, err := WithViews(r.p.Defs).Get(ctx, board)
		if errs.Is(err, errs.NotFound) {
			continue
		}
		if err != nil {
			return err
		}
		r.p.Log.InfoContext(ctx, "rebuilding leaderboard in redis", "board", d.ID, "period", period)
		if err := r.p.Rebuilds.rebuildWhole(ctx, d, period); err != nil {
			return err
		}
	}
	return nil
}
