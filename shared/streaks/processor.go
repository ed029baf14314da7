package streaks

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/rallyhq/rally/shared/cachegen"
	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/obs"
	"github.com/rallyhq/rally/shared/streams"
)

// Processor keeps the streak cache and the live-streak boards in line with
// the Streaks stream. Records carry the streak's version, so the handler's
// write-through, redelivered records and late older ones leave the newest
// state. Scheduled ticks (empty batches) take broken streaks off the
// boards and rebuild them when Redis lost data or a write.
type Processor struct {
	Decode  func(events.DynamoDBEventRecord) (State, bool, error)
	Store   Store
	Cache   Cache
	Gen     *cachegen.Tracker
	Clock   clock.Clock
	Log     *slog.Logger
	Metrics *obs.Metrics
}

// Process applies one stream batch (an empty one is a scheduled tick).
func (p *Processor) Process(ctx context.Context, records []events.DynamoDBEventRecord) error {
	latest := map[string]State{}
	var order []string
	var decodeErr error
	failedAt := -1
	for i, rec := range records {
		st, ok, err := p.Decode(rec)
		if err != nil {
			decodeErr, failedAt = err, i
			break
		}
		if !ok {
			continue
		}
		cur, seen := latest[st.UserID]
		if !seen {
			order = append(order, st.UserID)
		}
		// An erasure (Removed) carries the version of the record it
		// deleted, so it is kept over that record and every older one.
		if !seen || cur.Version < st.Version || (cur.Version == st.Version && st.Removed) {
			switch {
			case seen && st.Removed:
				// The erasure clears every board the batch's changes touched.
				st.Regions = slices.Concat(st.Regions, cur.Regions, []string{cur.Region, cur.PrevRegion})
			case seen && st.PrevRegion == "" && cur.Region != st.Region:
				// Two moves in one batch: the board must leave the first region too.
				st.PrevRegion = cur.Region
			}
			latest[st.UserID] = st
		}
	}
	states := make([]State, 0, len(order))
	for _, u := range order {
		states = append(states, latest[u])
	}
	now := p.Clock.Now()
	if len(states) > 0 {
		if err := p.Cache.Put(ctx, states...); err != nil {
			p.Log.WarnContext(ctx, "streak mirror update failed; marking streaks dirty", "states", len(states), "error", err.Error())
			if err := p.Gen.MarkDirty(ctx, dirtyKeys(states...), now); err != nil {
				return err
			}
		}
		p.Metrics.Count("StreaksMirrored", len(states), nil)
	}
	if swept, err := p.Cache.Sweep(ctx, now); err != nil {
		p.Log.WarnContext(ctx, "streak sweep failed", "error", err.Error())
	} else if swept > 0 {
		p.Metrics.Count("StreaksBroken", swept, nil)
	}
	p.repair(ctx, now)
	if decodeErr != nil {
		return &streams.PartialError{From: failedAt, Err: decodeErr}
	}
	return nil
}

// repair brings Redis back in line when the cache generation says it may be
// wrong: the streak boards are rebuilt from DynamoDB's live streaks, and the
// cached streak of every player whose write was lost is refreshed from
// DynamoDB. Failures wait for the next batch or tick.
func (p *Processor) repair(ctx context.Context, now time.Time) {
	st, err := p.Gen.State(ctx)
	if err != nil || st.Fresh() {
		return
	}
	p.Log.InfoContext(ctx, "rebuilding streak boards in redis", "redis_lost_data", !st.MirrorKnown)
	err = p.Cache.Rebuild(ctx, now, func(fn func([]State) error) error { return p.Store.Live(ctx, now, fn) })
	for err == nil {
		var markers []cachegen.Marker
		if markers, err = p.Gen.Dirty(ctx, 100); err != nil || len(markers) == 0 {
			break
		}
		if err = p.refresh(ctx, markers); err == nil {
			err = p.Gen.Clear(ctx, markers)
		}
	}
	if err == nil {
		err = p.Gen.Advance(ctx, st.Durable)
	}
	if err != nil {
		p.Log.WarnContext(ctx, "streak repair incomplete", "error", err.Error())
	}
}

// refresh rewrites the cached streaks the markers name from DynamoDB. A
// player who has none was erased (a marker is only left by a write): the
// erasure is put again, so what the lost write would have erased goes.
func (p *Processor) refresh(ctx context.Context, markers []cachegen.Marker) error {
	var states []State
	for _, m := range markers {
		user, ok := strings.CutPrefix(m.Key, dirtyUser)
		if !ok {
			continue
		}
		st, found, err := p.Store.Get(ctx, user)
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
	return p.Cache.Put(ctx, states...)
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
