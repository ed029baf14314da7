package reactions

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/rallyhq/rally/shared/cachegen"
	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/obs"
	"github.com/rallyhq/rally/shared/streams"
)

// Sync is the processor's view of the Redis mirror.
type Sync interface {
	// Apply mirrors durable tallies and edge states, versioned.
	Apply(ctx context.Context, tallies []Tally, edges []Edge) error
	// ForgetEdges drops deleted edges (erasure) from their users' cached
	// edges, writing nothing else.
	ForgetEdges(ctx context.Context, refs []Ref) error
	// ForgetUser drops a user's cached edges.
	ForgetUser(ctx context.Context, user string) error
	// ComputeTop reads a trending list straight from Redis.
	ComputeTop(ctx context.Context, kind Kind, w Window, limit int, now time.Time) (Top, error)
}

// Generations is the processor's view of the cache generation tracker.
type Generations interface {
	State(ctx context.Context) (cachegen.State, error)
	MarkDirty(ctx context.Context, keys []string, at time.Time) error
	Dirty(ctx context.Context, limit int32) ([]cachegen.Marker, error)
	Clear(ctx context.Context, markers []cachegen.Marker) error
	Advance(ctx context.Context, gen int64) error
	Fresh(ctx context.Context) bool
}

// RebuildCursors remembers how far a rebuild of Redis got, so a long
// rebuild spreads over several invocations.
type RebuildCursors interface {
	Load(ctx context.Context) (Position, bool, error)
	Save(ctx context.Context, p Position) error
	Reset(ctx context.Context) error
}

// CounterProcessor turns the Reactions stream into counts and trending
// windows. Each batch is coalesced to one delta per target and applied to
// DynamoDB exactly once (see Counts.Apply); the resulting absolute values
// are then mirrored into Redis with their versions. When Redis cannot be
// written, the affected keys are recorded as dirty and the cache generation
// bumped, so readers fall back to DynamoDB until a later batch repairs them.
type CounterProcessor struct {
	Decode   func(events.DynamoDBEventRecord) (Change, bool, error)
	Counts   Counts
	Mirror   Sync
	Gen      Generations
	Rebuild  RebuildCursors
	Clock    clock.Clock
	Log      *slog.Logger
	Metrics  *obs.Metrics
	Trending []Kind
	// SnapshotEvery is how often trending lists are stored for reads
	// while Redis is down (default 10s).
	SnapshotEvery time.Duration
	// RepairBudget bounds the time one invocation spends repairing Redis
	// (default 5s).
	RepairBudget time.Duration

	mu           sync.Mutex
	lastSnapshot time.Time
	saved        map[string]string // last snapshot saved per kind/window
}

// Process applies one stream batch.
func (p *CounterProcessor) Process(ctx context.Context, records []events.DynamoDBEventRecord) error {
	changes := make([]Change, 0, len(records))
	var decodeErr error
	failedAt := -1
	for i, rec := range records {
		c, ok, err := p.Decode(rec)
		if err != nil {
			decodeErr, failedAt = err, i
			break
		}
		if ok {
			changes = append(changes, c)
		}
	}
	if err := p.apply(ctx, changes); err != nil {
		return err
	}
	if decodeErr != nil {
		// Everything before the bad record is applied; the event source
		// mapping retries from it and finally parks it in the DLQ.
		return &streams.PartialError{From: failedAt, Err: decodeErr}
	}
	return nil
}

func (p *CounterProcessor) apply(ctx context.Context, changes []Change) error {
	now := p.Clock.Now()
	if len(changes) > 0 {
		n, err := p.Counts.Apply(ctx, changes, now)
		if err != nil {
			return err
		}
		p.Metrics.Count("ReactionChangesApplied", n, nil)
		p.Metrics.Count("ReactionChangesRedelivered", len(changes)-n, nil)
		if err := p.mirror(ctx, changes, now); err != nil {
			return err
		}
	}
	p.repair(ctx, now)
	p.snapshot(ctx, now)
	return nil
}

// mirror writes the batch's results to Redis; on failure it records what
// went dirty (durably — only a failure to do that fails the batch). An
// edge whose latest change is its deletion (erasure) is dropped from its
// user's cached edges rather than remembered: the erasure deletes that
// cache once the deletions are counted, and nothing here may write it back.
func (p *CounterProcessor) mirror(ctx context.Context, changes []Change, now time.Time) error {
	touched := map[Target][]BucketRef{}
	latest := map[Ref]Change{}
	for _, c := range changes {
		t := c.Target()
		if _, ok := touched[t]; !ok {
			touched[t] = nil
		}
		if c.Delta != 0 {
			touched[t] = appendBucket(touched[t], BucketOf(Hourly, c.At))
			touched[t] = appendBucket(touched[t], BucketOf(Daily, c.At))
		}
		// A deletion comes one version past the edge it deleted.
		if e, ok := latest[c.Ref]; !ok || e.Version < c.Version {
			latest[c.Ref] = c
		}
	}
	edges := make([]Edge, 0, len(latest))
	var deleted []Ref
	for _, c := range latest {
		if c.Deleted {
			deleted = append(deleted, c.Ref)
			continue
		}
		state := Removed
		if c.Active {
			state = Active
		}
		edges = append(edges, Edge{Ref: c.Ref, State: state, Version: c.Version, UpdatedAt: c.At})
	}
	tallies, err := p.Counts.Tallies(ctx, touched)
	if err == nil {
		err = p.Mirror.Apply(ctx, tallies, edges)
	}
	if err == nil && len(deleted) > 0 {
		err = p.Mirror.ForgetEdges(ctx, deleted)
	}
	if err == nil {
		return nil
	}
	p.Log.WarnContext(ctx, "redis mirror update failed; marking keys dirty", "targets", len(touched), "error", err.Error())
	p.Metrics.Count("ReactionMirrorFailures", 1, nil)
	keys := make([]string, 0, len(touched)+len(latest))
	for t := range touched {
		keys = append(keys, dirtyTarget+string(t.Kind)+"#"+t.ID)
	}
	for ref := range latest {
		keys = append(keys, dirtyUser+ref.UserID)
	}
	return p.Gen.MarkDirty(ctx, keys, now)
}

func appendBucket(refs []BucketRef, b BucketRef) []BucketRef {
	for _, r := range refs {
		if r == b {
			return refs
		}
	}
	return append(refs, b)
}

// Dirty key prefixes.
const (
	dirtyTarget = "target#"
	dirtyUser   = "user#"
)

// repair brings Redis back in line with DynamoDB when the cache generation
// says it is behind: dirty keys are re-read and re-mirrored; a Redis that
// lost everything is rebuilt from a scan, resumably. Failures are logged
// and left for the next batch; readers keep falling back meanwhile.
func (p *CounterProcessor) repair(ctx context.Context, now time.Time) {
	st, err := p.Gen.State(ctx)
	if err != nil {
		p.Log.DebugContext(ctx, "redis repair postponed: cannot read cache generations", "error", err.Error())
		return
	}
	if st.Fresh() {
		return
	}
	budget := p.RepairBudget
	if budget == 0 {
		budget = 5 * time.Second
	}
	deadline := time.Now().Add(budget)
	if !st.MirrorKnown {
		err = p.rebuild(ctx, st.Durable, now, deadline)
	} else {
		err = p.resync(ctx, st.Durable, now, deadline)
	}
	if err != nil {
		p.Log.WarnContext(ctx, "redis repair incomplete", "error", err.Error())
	}
}

func (p *CounterProcessor) resync(ctx context.Context, gen int64, now time.Time, deadline time.Time) error {
	for time.Now().Before(deadline) {
		markers, err := p.Gen.Dirty(ctx, 100)
		if err != nil {
			return err
		}
		if len(markers) == 0 {
			return p.Gen.Advance(ctx, gen)
		}
		var tallies []Tally
		for _, m := range markers {
			switch {
			case strings.HasPrefix(m.Key, dirtyTarget):
				kind, id, _ := strings.Cut(strings.TrimPrefix(m.Key, dirtyTarget), "#")
				k, err := ParseKind(kind)
				if err != nil {
					continue
				}
				t, err := p.Counts.TargetTally(ctx, Target{Kind: k, ID: id}, now)
				if err != nil {
					return err
				}
				tallies = append(tallies, t)
			case strings.HasPrefix(m.Key, dirtyUser):
				if err := p.Mirror.ForgetUser(ctx, strings.TrimPrefix(m.Key, dirtyUser)); err != nil {
					return err
				}
			}
		}
		if err := p.Mirror.Apply(ctx, tallies, nil); err != nil {
			return err
		}
		if err := p.Gen.Clear(ctx, markers); err != nil {
			return err
		}
	}
	return nil
}

func (p *CounterProcessor) rebuild(ctx context.Context, gen int64, now time.Time, deadline time.Time) error {
	pos, started, err := p.Rebuild.Load(ctx)
	if err != nil {
		return err
	}
	if !started {
		pos = nil
	}
	p.Log.InfoContext(ctx, "rebuilding reactions in redis from dynamodb", "resuming", started)
	for time.Now().Before(deadline) {
		tallies, next, err := p.Counts.ScanTallies(ctx, pos, now)
		if err != nil {
			return err
		}
		if err := p.Mirror.Apply(ctx, tallies, nil); err != nil {
			return err
		}
		if next == nil {
			// Everything dirty before the rebuild began is covered by it.
			for {
				markers, err := p.Gen.Dirty(ctx, 100)
				if err != nil {
					return err
				}
				if len(markers) == 0 {
					break
				}
				if err := p.Gen.Clear(ctx, markers); err != nil {
					return err
				}
			}
			if err := p.Rebuild.Reset(ctx); err != nil {
				return err
			}
			p.Log.InfoContext(ctx, "reactions rebuilt in redis")
			return p.Gen.Advance(ctx, gen)
		}
		pos = next
		if err := p.Rebuild.Save(ctx, pos); err != nil {
			return err
		}
	}
	return nil
}

// snapshot stores the trending lists for reads while Redis is down, at most
// once per SnapshotEvery per processor instance.
func (p *CounterProcessor) snapshot(ctx context.Context, now time.Time) {
	every := p.SnapshotEvery
	if every == 0 {
		every = 10 * time.Second
	}
	p.mu.Lock()
	due := time.Since(p.lastSnapshot) >= every
	if due {
		p.lastSnapshot = time.Now()
	}
	p.mu.Unlock()
	if !due || !p.Gen.Fresh(ctx) {
		return
	}
	for _, kind := range p.Trending {
		for _, w := range Windows {
			top, err := p.Mirror.ComputeTop(ctx, kind, w, 100, now)
			if err != nil {
				p.Log.WarnContext(ctx, "trending snapshot skipped", "kind", kind, "window", w, "error", err.Error())
				return
			}
			key, rendered := string(kind)+"/"+string(w), fmt.Sprint(top.Items)
			if !p.snapshotChanged(key, rendered) {
				continue
			}
			if err := p.Counts.SaveSnapshot(ctx, kind, top); err != nil {
				p.Log.WarnContext(ctx, "trending snapshot not saved", "kind", kind, "window", w, "error", err.Error())
				return
			}
			p.mu.Lock()
			p.saved[key] = rendered
			p.mu.Unlock()
		}
	}
}

// snapshotChanged tells whether a list differs from the last snapshot this
// instance saved (an empty list with none saved counts as unchanged): a
// quiet board costs no writes.
func (p *CounterProcessor) snapshotChanged(key, rendered string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.saved == nil {
		p.saved = map[string]string{}
	}
	last, ok := p.saved[key]
	return !(ok && last == rendered) && (ok || rendered != "[]")
}
