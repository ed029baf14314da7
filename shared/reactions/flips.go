package reactions

import (
	"context"
	"sync"
	"time"
)

// MaxTrendingFlips is how many times a player may change one edge (favorite
// and unfavorite, like and unlike) within a clock hour and still move
// trending: the later activations of that hour count in counts only.
const MaxTrendingFlips = 10

// FlipStore keeps, for every instance to share, how many times each player
// changed each of their edges within a clock hour (the mirror, in Redis).
type FlipStore interface {
	// Flips returns how many times ref changed within hour.
	Flips(ctx context.Context, ref Ref, hour BucketRef) (int64, error)
	// Flipped counts one more change of ref within hour.
	Flipped(ctx context.Context, ref Ref, hour BucketRef) error
	// ForgetFlips drops what the store holds of user (erasure).
	ForgetFlips(ctx context.Context, user string) error
}

// Flips counts the changes of each edge per clock hour, for the flip
// velocity control. The shared count lives in the store; each instance
// also keeps its own, which decides while the store cannot be reached, so
// an outage loosens the control (to what one instance saw) but never
// lifts it.
type Flips struct {
	Store FlipStore

	mu    sync.Mutex
	local map[Ref]localFlips
}

type localFlips struct {
	hour time.Time
	n    int64
}

// localEdges bounds the edges one instance counts: past it, it starts again
// from none, which is generous to a few players for the rest of an hour
// rather than growing without bound.
const localEdges = 50_000

// Count returns how many times ref changed in the clock hour of at, and
// whether the store answered.
func (f *Flips) Count(ctx context.Context, ref Ref, at time.Time) (int64, error) {
	hour := BucketOf(Hourly, at)
	local := f.localCount(ref, hour.Start)
	n, err := f.Store.Flips(ctx, ref, hour)
	if err != nil {
		return local, err
	}
	// The store misses the changes made while it could not be reached.
	return max(n, local), nil
}

// Record counts one change of ref at at.
func (f *Flips) Record(ctx context.Context, ref Ref, at time.Time) error {
	hour := BucketOf(Hourly, at)
	f.mu.Lock()
	if f.local == nil || len(f.local) >= localEdges {
		f.local = map[Ref]localFlips{}
	}
	c := f.local[ref]
	if !c.hour.Equal(hour.Start) {
		c = localFlips{hour: hour.Start}
	}
	c.n++
	f.local[ref] = c
	f.mu.Unlock()
	return f.Store.Flipped(ctx, ref, hour)
}

func (f *Flips) localCount(ref Ref, hour time.Time) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.local[ref]; ok && c.hour.Equal(hour) {
		return c.n
	}
	return 0
}
