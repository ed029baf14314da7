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
	"github.com/rallyhq/rally/shared/freshness"
	"github.com/rallyhq/rally/shared/jobs"
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

// CounterProcessor turns the Reactions stream into counts and trending
// windows. Each batch is coalesced to one delta per target and applied to
// DynamoDB exactly once (see Counts.Apply); the resulting absolute values
// are then mirrored into Redis with their versions. When Redis cannot be
// written, the affected keys are recorded as dirty and the cache generation
// bumped, so readers fall back to DynamoDB until a later batch repairs them.
type CounterProcessor struct {
	Decode streams.Decoder[Change]
	Counts Counts
	Mirror Sync
	Gen    cachegen.Generations
	// Rebuilds and Progress rebuild Redis after it lost its data, across
	// invocations when it takes more than one (as a rebuild job does).
	Rebuilds *Jobs
	Progress jobs.Positions
	Clock    clock.Clock
	Log      *slog.Logger
	Metrics  *obs.Metrics
	Trending []Kind
	// Freshness records, after each batch, the newest change applied: the
	// as_of of counts and trending.
	Freshness *freshness.Recorder
	// SnapshotEvery is how often trending lists are stored for reads
	// while Redis is down (default 10s).
	SnapshotEvery time.Duration

	mu           sync.Mutex
	lastSnapshot time.Time
	saved        map[string]string // last snapshot saved per kind/window
}

// Process applies one stream batch.
func (p *CounterProcessor) Process(ctx context.Context, records []events.DynamoDBEventRecord) error {
	batch := streams.Decode(records, p.Decode)
	now := p.Clock.Now()
	if changes := batch.Records; len(changes) > 0 {
		n, err := p.Counts.Apply(ctx, changes, now, func(ctx context.Context, moved map[Target][]BucketRef) error {
			return p.mirrorCounts(ctx, moved, now)
		})
		if err != nil {
			return err
		}
		p.Metrics.Count("ReactionChangesApplied", n, nil)
		p.Metrics.Count("ReactionChangesRedelivered", len(changes)-n, nil)
		if err := p.mirrorEdges(ctx, changes, now); err != nil {
			return err
		}
		p.Freshness.Applied(ctx, batch.NewestChange(Change.changedAt))
	}
	if err := p.Gen.Repair(ctx, cacheRepair{p: p, now: now}); err != nil {
		p.Log.WarnContext(ctx, "redis repair incomplete", "error", err.Error())
	}
	p.snapshot(ctx, now)
	// Everything before an unreadable record is applied; the event
	// source mapping retries from it and finally parks it in the DLQ.
	return batch.Err()
}

// mirrorCounts writes to Redis what a commit of counts moved, read back
// from DynamoDB (absolute values with their versions, so a late or
// repeated mirror never sets one back). It runs before the commit is
// marked counted, so a run that dies between the two leaves an intent
// whose finisher mirrors it again. On failure it records what went dirty
// (durably — only a failure to do that fails the batch).
func (p *CounterProcessor) mirrorCounts(ctx context.Context, moved map[Target][]BucketRef, now time.Time) error {
	tallies, err := p.Counts.Tallies(ctx, moved)
	if err == nil {
		err = p.Mirror.Apply(ctx, tallies, nil)
	}
	if err == nil {
		return nil
	}
	keys := make([]string, 0, len(moved))
	for t := range moved {
		keys = append(keys, dirtyTarget+string(t.Kind)+"#"+t.ID)
	}
	return p.markDirty(ctx, keys, err, now)
}

// mirrorEdges caches each edge's newest state as its user's own; an edge
// whose latest change is its deletion (erasure) is dropped from its user's
// cached edges rather than remembered: the erasure deletes that cache once
// the deletions are counted, and nothing here may write it back.
func (p *CounterProcessor) mirrorEdges(ctx context.Context, changes []Change, now time.Time) error {
	latest := streams.Newest(changes, Change.key, Change.version, nil)
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
	err := p.Mirror.Apply(ctx, nil, edges)
	if err == nil && len(deleted) > 0 {
		err = p.Mirror.ForgetEdges(ctx, deleted)
	}
	if err == nil {
		return nil
	}
	keys := make([]string, 0, len(latest))
	for _, c := range latest {
		keys = append(keys, dirtyUser+c.Ref.UserID)
	}
	return p.markDirty(ctx, keys, err, now)
}

// markDirty records keys whose Redis values a failed write left wrong.
func (p *CounterProcessor) markDirty(ctx context.Context, keys []string, cause error, now time.Time) error {
	p.Log.WarnContext(ctx, "redis mirror update failed; marking keys dirty", "keys", len(keys), "error", cause.Error())
	p.Metrics.Count("ReactionMirrorFailures", 1, nil)
	return p.Gen.MarkDirty(ctx, keys, now)
}

// Dirty key prefixes.
const (
	dirtyTarget = "target#"
	dirtyUser   = "user#"
)

// cacheRepair is the reactions scope's side of the repair protocol
// (cachegen.Tracker.Repair).
type cacheRepair struct {
	p   *CounterProcessor
	now time.Time
}

// Rebuild mirrors every target's tallies from a scan of the durable
// counts, as a rebuild job does, resuming where the last invocation left
// it.
func (r cacheRepair) Rebuild(ctx context.Context) (bool, error) {
	r.p.Log.InfoContext(ctx, "rebuilding reactions in redis")
	done, err := jobs.Continue(ctx, r.p.Progress, jobs.Spec{Kind: jobs.Rebuild, Target: jobs.Counters}, r.p.Rebuilds.rebuild)
	if done {
		r.p.Log.InfoContext(ctx, "reactions rebuilt in redis")
	}
	return done, err
}

// Refresh re-mirrors the tallies of dirty targets and drops the cached
// edges of dirty users (they are read through again).
func (r cacheRepair) Refresh(ctx context.Context, keys []string) error {
	var tallies []Tally
	for _, key := range keys {
		if user, ok := strings.CutPrefix(key, dirtyUser); ok {
			if err := r.p.Mirror.ForgetUser(ctx, user); err != nil {
				return err
			}
			continue
		}
		kind, id, _ := strings.Cut(strings.TrimPrefix(key, dirtyTarget), "#")
		k, err := ParseKind(kind)
		if err != nil {
			continue
		}
		t, err := r.p.Counts.TargetTally(ctx, Target{Kind: k, ID: id}, r.now)
		if err != nil {
			return err
		}
		tallies = append(tallies, t)
	}
	return r.p.Mirror.Apply(ctx, tallies, nil)
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
		for _, w := range Windows() {
			top, err := p.Mirror.ComputeTop(ctx, kind, w, 100, now)
			if err != nil {
				p.Log.WarnContext(ctx, "trending snapshot skipped", "kind", kind, "window", w, "error", err.Error())
				return
			}
			if top.AsOf.IsZero() {
				// Redis lost the watermark and no batch has applied a
				// change since: a snapshot could not say how fresh it is.
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
