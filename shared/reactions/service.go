package reactions

import (
	"context"
	"log/slog"
	"time"

	"github.com/rallyhq/rally/shared/accounts"
	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/freshness"
	"github.com/rallyhq/rally/shared/games"
	"github.com/rallyhq/rally/shared/obs"
)

// Service applies the reaction rules over the stores.
type Service struct {
	Edges  Edges
	Counts Counts
	Games  Games
	Mirror Mirror
	Clock  clock.Clock
	Log    *slog.Logger
	// Metrics counts the reads the cache served and those it did not.
	Metrics *obs.Metrics
	// Freshness says how fresh counts and trending are: as of the newest
	// change the counter processor applied.
	Freshness freshness.Reads
	// Flips counts each edge's changes per clock hour (the flip velocity
	// control).
	Flips *Flips
}

// MetricOutOfTrending counts the activations the fraud controls kept out of
// trending, by reason (young, flips).
const MetricOutOfTrending = "ReactionsOutOfTrending"

// Caller is who writes.
type Caller struct {
	Player string
}

func (c Caller) ref(t Target) Ref { return Ref{UserID: c.Player, Kind: t.Kind, TargetID: t.ID} }

// React makes c.Player's edge to the target active. The activation counts,
// and moves trending unless the fraud controls keep it out (see trend).
func (s *Service) React(ctx context.Context, c Caller, t Target) (Edge, bool, error) {
	ref, now := c.ref(t), s.Clock.Now()
	trend, why := s.trend(ctx, ref, now)
	e, changed, err := s.Edges.Add(ctx, ref, now, trend)
	if err != nil {
		return Edge{}, false, err
	}
	if changed {
		s.flipped(ctx, e, now, why)
	}
	s.remember(ctx, e)
	return e, changed, nil
}

// Unreact removes c.Player's edge to the target.
func (s *Service) Unreact(ctx context.Context, c Caller, t Target) (Edge, bool, error) {
	now := s.Clock.Now()
	e, changed, err := s.Edges.Remove(ctx, c.ref(t), now)
	if err != nil {
		return Edge{}, false, err
	}
	if changed {
		s.flipped(ctx, e, now, "")
	}
	s.remember(ctx, e)
	return e, changed, nil
}

// Toggle flips c.Player's edge to the target; commit, when given, names
// the request's Idempotency-Key, and a retry of it flips nothing
// (commit.Replayed).
func (s *Service) Toggle(ctx context.Context, c Caller, t Target, commit *Commit) (Edge, error) {
	ref, now := c.ref(t), s.Clock.Now()
	trend, why := s.trend(ctx, ref, now)
	e, err := s.Edges.Toggle(ctx, ref, now, trend, commit)
	if err != nil {
		return Edge{}, err
	}
	if commit == nil || !commit.Replayed {
		s.flipped(ctx, e, now, why)
	}
	s.remember(ctx, e)
	return e, nil
}

// trend decides whether an activation of ref now would count in trending,
// and if not why: not for a young account (accounts.Young, which the gate
// put in the context), nor once the edge changed MaxTrendingFlips times
// within the clock hour. Concurrent changes of one edge may each see the
// count before the others', so a burst may pass the limit by a few.
func (s *Service) trend(ctx context.Context, ref Ref, now time.Time) (Trend, string) {
	if accounts.Young(ctx) {
		return OutOfTrending, "young"
	}
	n, err := s.Flips.Count(ctx, ref, now)
	if err != nil {
		s.Log.DebugContext(ctx, "flip count read from this instance alone", "error", err.Error())
	}
	if n >= MaxTrendingFlips {
		return OutOfTrending, "flips"
	}
	return InTrending, ""
}

// flipped counts a change of the edge e for the flip velocity control,
// and an activation kept out of trending (why) in the metrics. A failure
// to count in Redis leaves the instance's own count.
func (s *Service) flipped(ctx context.Context, e Edge, now time.Time, why string) {
	if e.Active() && why != "" {
		s.Metrics.Count(MetricOutOfTrending, 1, map[string]string{"Reason": why})
	}
	if err := s.Flips.Record(ctx, e.Ref, now); err != nil {
		s.Log.DebugContext(ctx, "flip counted in this instance alone", "edge", e.Ref.String(), "error", err.Error())
	}
}

// remember puts the player's own write in the cache so their next status
// read sees it at once. A failure is harmless: the counter processor writes
// the same version from the stream, and reads fall back meanwhile.
func (s *Service) remember(ctx context.Context, e Edge) {
	if err := s.Mirror.Remember(ctx, []Edge{e}); err != nil {
		s.Log.DebugContext(ctx, "cache write skipped", "edge", e.Ref.String(), "error", err.Error())
	}
}

// Statuses tells, for each target, whether user's edge of kind is active.
// Cached answers come from Redis in one round trip; the rest are read from
// DynamoDB (strongly consistent) and cached. Without a trustworthy cache,
// everything is read from DynamoDB and the answer is marked degraded.
func (s *Service) Statuses(ctx context.Context, user string, kind Kind, targets []string) (map[string]bool, bool, error) {
	out, err := s.Mirror.Statuses(ctx, user, kind, targets)
	degraded := err != nil
	if degraded {
		out = map[string]bool{}
	}
	var missing []string
	for _, t := range targets {
		if _, ok := out[t]; !ok {
			missing = append(missing, t)
		}
	}
	s.Metrics.CacheReads(len(targets)-len(missing), len(missing))
	if len(missing) == 0 {
		return out, false, nil
	}
	edges, err := s.Edges.Get(ctx, user, kind, missing)
	if err != nil {
		return nil, false, err
	}
	fill := make([]Edge, 0, len(edges))
	for t, e := range edges {
		out[t] = e.Active()
		fill = append(fill, e)
	}
	if !degraded {
		s.rememberAll(ctx, fill)
	}
	return out, degraded, nil
}

func (s *Service) rememberAll(ctx context.Context, edges []Edge) {
	if err := s.Mirror.Remember(ctx, edges); err != nil {
		s.Log.DebugContext(ctx, "cache fill skipped", "edges", len(edges), "error", err.Error())
	}
}

// Count returns a target's count: from Redis, or read through from
// DynamoDB on a miss, or from DynamoDB (degraded) when Redis cannot be
// trusted.
//
// Its AsOf is the counter processor's watermark: fetched from Redis with
// the count (also on a miss: the durable count includes at least what the
// watermark says), or, without Redis, the durable copy of it.
func (s *Service) Count(ctx context.Context, t Target) (Count, error) {
	c, found, err := s.Mirror.Count(ctx, t)
	if err == nil && found {
		s.Metrics.CacheReads(1, 0)
		c.AsOf = s.Freshness.AsOf(ctx, c.AsOf)
		return c, nil
	}
	s.Metrics.CacheReads(0, 1)
	durable, derr := s.Counts.Count(ctx, t)
	if derr != nil {
		return Count{}, derr
	}
	if err != nil {
		durable.Degraded = true
		durable.AsOf = s.Freshness.DurableAsOf(ctx)
		return durable, nil
	}
	durable.AsOf = s.Freshness.AsOf(ctx, c.AsOf)
	if serr := s.Mirror.StoreCount(ctx, t, durable, durable.Version); serr != nil {
		s.Log.DebugContext(ctx, "count cache fill skipped", "target", t.String(), "error", serr.Error())
	}
	return durable, nil
}

// List returns a page of user's active reactions of kind, newest first.
func (s *Service) List(ctx context.Context, user string, kind Kind, limit int, after Position) (Page, error) {
	return s.Edges.List(ctx, user, kind, limit, after)
}

// Top returns the trending list of kind in window w: from Redis, or the
// stored snapshot (degraded) when Redis cannot be trusted.
func (s *Service) Top(ctx context.Context, kind Kind, w Window, limit int) (Top, error) {
	top, err := s.Mirror.Top(ctx, kind, w, limit, s.Clock.Now())
	if err == nil {
		s.Metrics.CacheReads(1, 0)
		top.AsOf = s.Freshness.AsOf(ctx, top.AsOf)
		return top, nil
	}
	s.Metrics.CacheReads(0, 1)
	// A snapshot keeps the as_of it was computed with.
	snap, found, serr := s.Counts.Snapshot(ctx, kind, w)
	if serr != nil {
		return Top{}, serr
	}
	if !found {
		snap = Top{Window: w, AsOf: s.Freshness.DurableAsOf(ctx)}
	}
	if len(snap.Items) > limit {
		snap.Items = snap.Items[:limit]
	}
	snap.Degraded = true
	return snap, nil
}

// GamesOf returns the metadata of the given games; a failure to enrich is
// not a failure of the read, so it yields no metadata.
func (s *Service) GamesOf(ctx context.Context, ids []string) map[string]games.Game {
	if len(ids) == 0 {
		return nil
	}
	known, err := s.Games.Get(ctx, ids)
	if err != nil {
		s.Log.WarnContext(ctx, "game metadata unavailable", "error", err.Error())
		return nil
	}
	return known
}

// asOf is when a value was computed, or now for a value never computed.
func asOf(t, now time.Time) time.Time {
	if t.IsZero() {
		return now
	}
	return t
}
