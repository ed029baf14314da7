package streaks

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"

	"github.com/aws/aws-lambda-go/events"

	"github.com/rallyhq/rally/shared/cachegen"
	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/freshness"
	"github.com/rallyhq/rally/shared/jobs"
	"github.com/rallyhq/rally/shared/obs"
	"github.com/rallyhq/rally/shared/streams"
)

// Processor keeps the streak cache and the live-streak boards in line with
// the Streaks stream. Records carry the streak's version, so the handler's
// write-through, redelivered records and late older ones leave the newest
// state. Scheduled ticks (empty batches) take broken streaks off the
// boards and rebuild them when Redis lost data or a write.
type Processor struct {
	Decode  streams.Decoder[State]
	Store   Store
	Cache   Cache
	Gen     cachegen.Generations
	Clock   clock.Clock
	Log     *slog.Logger
	Metrics *obs.Metrics

	// Freshness records, after each batch, the newest streak change
	// applied: the as_of of streak boards.
	Freshness *freshness.Recorder

	// Rebuilds and Progress rebuild the boards after Redis lost data, as
	// the rebuild job does: a rebuild longer than one invocation
	// continues from its position, kept in Redis.
	Rebuilds *Jobs
	Progress jobs.Positions
}

// Process applies one stream batch (an empty one is a scheduled tick).
func (p *Processor) Process(ctx context.Context, records []events.DynamoDBEventRecord) error {
	batch := streams.Decode(records, p.Decode)
	states := streams.Newest(batch.Records, State.key, State.version, carryMoves)
	now := p.Clock.Now()
	if len(states) > 0 {
		if err := p.Cache.Put(ctx, states...); err != nil {
			p.Log.WarnContext(ctx, "streak mirror update failed; marking streaks dirty", "states", len(states), "error", err.Error())
			if err := p.Gen.MarkDirty(ctx, dirtyKeys(states...), now); err != nil {
				return err
			}
		}
		p.Metrics.Count("StreaksMirrored", len(states), nil)
		p.Freshness.Applied(ctx, batch.NewestChange(State.changedAt))
	}
	if swept, err := p.Cache.Sweep(ctx, now); err != nil {
		p.Log.WarnContext(ctx, "streak sweep failed", "error", err.Error())
	} else if swept > 0 {
		p.Metrics.Count("StreaksBroken", swept, nil)
	}
	if err := p.Gen.Repair(ctx, &cacheRepair{p: p}); err != nil {
		p.Log.WarnContext(ctx, "streak repair incomplete", "error", err.Error())
	}
	return batch.Err()
}

// carryMoves keeps, in the newest state of a player in a batch, the boards
// the older ones were on: an erasure clears every board the batch's
// changes touched, and after two moves in one batch the board leaves the
// first region too.
func carryMoves(older, newer State) State {
	switch {
	case newer.Removed:
		newer.Regions = slices.Concat(newer.Regions, older.Regions, []string{older.Region, older.PrevRegion})
	case newer.PrevRegion == "" && older.Region != newer.Region:
		newer.PrevRegion = older.Region
	}
	return newer
}

// cacheRepair is the streaks scope's side of the repair protocol
// (cachegen.Tracker.Repair). Whatever Redis may have wrong, the boards
// are rebuilt from DynamoDB's live streaks, once per repair: a lost write
// may have been a move between region boards, which the player's own
// record no longer shows.
type cacheRepair struct {
	p       *Processor
	rebuilt bool
}

// Rebuild rebuilds the streak boards; one too big for this invocation
// continues in the next.
func (r *cacheRepair) Rebuild(ctx context.Context) (bool, error) {
	return r.rebuildBoards(ctx)
}

// errRebuildContinues says the boards' rebuild goes on in the next tick.
var errRebuildContinues = errors.New("the streak boards' rebuild continues at the next tick")

func (r *cacheRepair) rebuildBoards(ctx context.Context) (bool, error) {
	if r.rebuilt {
		return true, nil
	}
	r.p.Log.InfoContext(ctx, "rebuilding streak boards in redis")
	done, err := jobs.Continue(ctx, r.p.Progress, jobs.Spec{Kind: jobs.Rebuild, Target: jobs.Streaks}, r.p.Rebuilds.rebuild)
	r.rebuilt = done && err == nil
	return r.rebuilt, err
}

// Refresh rebuilds the boards (once) and rewrites the cached streaks the
// keys name from DynamoDB. A player who has none was erased (a marker is
// only left by a write): the erasure is put again, so what the lost write
// would have erased goes.
func (r *cacheRepair) Refresh(ctx context.Context, keys []string) error {
	done, err := r.rebuildBoards(ctx)
	if err == nil && !done {
		err = errRebuildContinues
	}
	if err != nil {
		return err
	}
	var states []State
	for _, key := range keys {
		user, ok := strings.CutPrefix(key, dirtyUser)
		if !ok {
			continue
		}
		st, found, err := r.p.Store.Get(ctx, user)
		if err != nil {
			return err
		}
		if !found {
			st = State{UserID: user, Removed: true}
		}
		states = append(states, st)
	}
	if len(states) == 0 {
		return nil
	}
	return r.p.Cache.Put(ctx, states...)
}

// dirtyKeys are the markers of a lost write of states: their cached
// streaks (and with them the boards) may be wrong.
func dirtyKeys(states ...State) []string {
	keys := make([]string, len(states))
	for i, st := range states {
		keys[i] = dirtyUser + st.UserID
	}
	return keys
}
