package cachegen

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rallyhq/rally/shared/clock"
)

// Generations is what a scope's processors use of its Tracker: they
// depend on this, not on *Tracker.
type Generations interface {
	// Fresh reports whether Redis can be trusted.
	Fresh(ctx context.Context) bool
	// MarkDirty records keys whose Redis values a lost write may have left
	// wrong.
	MarkDirty(ctx context.Context, keys []string, at time.Time) error
	// Repair brings Redis back in line with DynamoDB.
	Repair(ctx context.Context, r Repairable) error
}

var _ Generations = (*Tracker)(nil)

// Repairable is the Redis side of a scope, as the repair protocol uses it.
type Repairable interface {
	// Rebuild reloads everything the scope keeps in Redis from DynamoDB,
	// after Redis lost its data. It may stop when ctx is done and report
	// done=false; the next repair calls it again, and it resumes where it
	// stopped if it can (or starts over).
	Rebuild(ctx context.Context) (done bool, err error)
	// Refresh rewrites from DynamoDB what the dirty keys name (the keys
	// the scope's writers passed to MarkDirty).
	Refresh(ctx context.Context, keys []string) error
}

// DirtyPage is how many dirty markers one refresh takes.
const DirtyPage = 100

// DefaultRepairBudget bounds a repair whose context has no deadline (a
// test or tool calling a processor directly); an invocation's repair is
// bounded by the invocation's own deadline instead.
const DefaultRepairBudget = 10 * time.Second

// ErrRepairUnfinished means a repair ran out of time with work left; the
// next one continues.
var ErrRepairUnfinished = errors.New("cachegen: repair unfinished; the next one continues")

// Repair brings Redis back in line with DynamoDB when the scope's
// generations say it may be wrong, the one protocol every processor
// follows: read the state; if Redis lost its data, rebuild it; refresh
// every dirty key, clearing each marker once refreshed (unless it was
// marked again meanwhile); then advance Redis's generation to the one
// read at the start. A write lost during the repair bumped the durable
// generation past that, so Redis stays untrusted until the next repair.
//
// The repair takes the time its context allows, less a reserve for the
// rest of the invocation (clock.Budget); what is left is done by the next
// one (ErrRepairUnfinished). Readers fall back to DynamoDB meanwhile.
func (t *Tracker) Repair(ctx context.Context, r Repairable) error {
	st, err := t.State(ctx)
	if err != nil || st.Fresh() {
		return err
	}
	ctx, cancel := clock.Budget(ctx, DefaultRepairBudget)
	defer cancel()
	if !st.MirrorKnown {
		done, err := r.Rebuild(ctx)
		if err != nil {
			return err
		}
		if !done {
			return ErrRepairUnfinished
		}
	}
	for {
		if ctx.Err() != nil {
			return ErrRepairUnfinished
		}
		markers, err := t.Dirty(ctx, DirtyPage)
		if err != nil {
			return err
		}
		if len(markers) == 0 {
			break
		}
		keys := make([]string, len(markers))
		for i, m := range markers {
			keys[i] = m.Key
		}
		if err := r.Refresh(ctx, keys); err != nil {
			return err
		}
		if err := t.Clear(ctx, markers); err != nil {
			return err
		}
	}
	return t.Advance(ctx, st.Durable)
}

// Progress keeps a scope's rebuild position between invocations
// (jobs.Positions), in Redis itself: if Redis loses its data again
// mid-rebuild, the position goes with it and the rebuild rightly starts
// over.
type Progress struct {
	Redis redis.UniversalClient
	Scope string
}

func (p Progress) key() string { return "rally:rebuild:" + p.Scope }

// Load returns the saved position, "" when no rebuild is under way.
func (p Progress) Load(ctx context.Context) (string, error) {
	s, err := p.Redis.Get(ctx, p.key()).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return s, err
}

// Save records the position reached.
func (p Progress) Save(ctx context.Context, cursor string) error {
	return p.Redis.Set(ctx, p.key(), cursor, 0).Err()
}

// Reset ends the rebuild.
func (p Progress) Reset(ctx context.Context) error { return p.Redis.Del(ctx, p.key()).Err() }
