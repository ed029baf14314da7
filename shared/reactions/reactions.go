// Package reactions owns favorites of games and likes of posts: one
// mechanism, a user→target edge of a kind. Handlers change edges with
// conditional writes (the source of truth, in DynamoDB); the counter
// processor turns the Reactions stream into counts and trending windows,
// exactly once; Redis mirrors counts, trending and each player's own
// reactions so reads are fast, and every read still answers from DynamoDB
// when Redis cannot be trusted. Counts take every reaction; trending only
// those the fraud controls trust (not a young account's, nor a player's
// flipping one edge too fast: see Service.React).
//
// Adapters live in sub-packages: dynamo (edges, counts, games) and mirror
// (the Redis side). This package holds the rules and the HTTP endpoints.
package reactions

import (
	"context"
	"fmt"
	"time"

	"github.com/rallyhq/rally/shared/games"
)

// Kind is the kind of a reaction edge.
type Kind string

// Reaction kinds.
const (
	Favorite Kind = "favorite" // a player favorites a game
	Like     Kind = "like"     // a player likes a post
)

// Kinds lists every kind.
func Kinds() []Kind {
	return []Kind{Favorite, Like}
}

// ParseKind returns the kind named s.
func ParseKind(s string) (Kind, error) {
	for _, k := range Kinds() {
		if string(k) == s {
			return k, nil
		}
	}
	return "", fmt.Errorf("reactions: unknown kind %q", s)
}

// State is the state of an edge.
type State string

// Edge states. A removed edge is kept (REMOVED) so its version keeps
// growing and stale stream records can be recognised.
const (
	Active  State = "ACTIVE"
	Removed State = "REMOVED"
)

// Ref names an edge: who reacted to what.
type Ref struct {
	UserID   string
	Kind     Kind
	TargetID string
}

// Target names what was reacted to.
type Target struct {
	Kind Kind
	ID   string
}

// Target returns the edge's target.
func (r Ref) Target() Target { return Target{Kind: r.Kind, ID: r.TargetID} }

func (r Ref) String() string { return r.UserID + "→" + string(r.Kind) + ":" + r.TargetID }

func (t Target) String() string { return string(t.Kind) + ":" + t.ID }

// Trend says whether an edge's activation counts in trending. Counts take
// every activation; the fraud controls keep out of trending those of a
// young account and those of a player flipping the edge too fast (see
// Service.React).
type Trend bool

// Whether an activation counts in trending.
const (
	InTrending    Trend = true
	OutOfTrending Trend = false
)

// Edge is the current state of one user→target reaction.
type Edge struct {
	Ref
	State State
	// Version grows by one on every change of state.
	Version int64
	// CreatedAt is when the edge last became ACTIVE.
	CreatedAt time.Time
	// UpdatedAt is when the edge last changed.
	UpdatedAt time.Time
	// Trend is whether its latest activation counts in trending.
	Trend bool
}

// Active reports whether the edge is in place.
func (e Edge) Active() bool { return e.State == Active }

// Counted is the state counts hold for the edge once its latest change
// is counted.
func (e Edge) Counted() Counted {
	if !e.Active() {
		return Counted{Version: e.Version}
	}
	return Counted{Version: e.Version, Active: true, Trend: e.Trend, Since: e.CreatedAt}
}

// Change is one edge transition read from the Reactions stream: the edge
// reached Version at At, becoming active or not.
type Change struct {
	Ref
	Version int64
	Active  bool
	// Delta is +1 when the edge became active, -1 when it stopped being
	// active, 0 when its activity did not change.
	Delta int
	At    time.Time
	// Deleted is set when the edge itself was deleted (erasure): nothing
	// may cache it any more. A deletion is one version past the edge it
	// deleted (the rule every stream decoder follows, see shared/streams).
	Deleted bool
	// Trend says whether the edge, as the change leaves it, counts in
	// trending: an activation as its edge was written (Trend), a
	// deactivation or a deletion as the activation it ends. Counts take
	// every change.
	Trend bool
	// Since is when the edge became active, for an active edge (its
	// created_at): the trending buckets its activation counts in, and
	// the ones its end takes it back from.
	Since time.Time
}

// Counted is the state of an edge as the counts hold it: what the counter
// processor last applied of it. A target's count is the number of its
// edges counted active, its all-time trending total those counted active
// in trending, and each trending bucket the edges counted active in
// trending that became active within the bucket's span. Counts hold states,
// not sums of deltas, so applying an edge's newest change gives the same
// counts whatever came before it, in whatever order, however often.
type Counted struct {
	// Version is the edge version counted; 0 when nothing was.
	Version int64
	Active  bool
	Trend   bool
	Since   time.Time
}

// Counted is the state the change leaves its edge in, as counts hold it.
func (c Change) Counted() Counted {
	if !c.Active {
		return Counted{Version: c.Version}
	}
	return Counted{Version: c.Version, Active: true, Trend: c.Trend, Since: c.Since}
}

// Trending reports whether the edge counts in trending.
func (c Counted) Trending() bool { return c.Active && c.Trend }

func (c Change) key() Ref             { return c.Ref }
func (c Change) version() int64       { return c.Version }
func (c Change) changedAt() time.Time { return c.At }

// Window is a trending window.
type Window string

// Trending windows.
const (
	Last24h Window = "24h"
	Last7d  Window = "7d"
	AllTime Window = "all"
)

// Windows lists every trending window.
func Windows() []Window {
	return []Window{Last24h, Last7d, AllTime}
}

// Count is a target's count as a reader sees it.
type Count struct {
	N int64
	// AsOf is the time of the newest change the counter processor had
	// applied when the count was read: the count includes every change
	// made up to then.
	AsOf time.Time
	// Degraded is true when the value was served without Redis.
	Degraded bool
	// Version grows with every change of the count; caches keep the newest.
	Version int64
}

// Ranked is one entry of a trending list.
type Ranked struct {
	Rank  int
	ID    string
	Score int64
}

// Top is a trending list.
type Top struct {
	Window Window
	Items  []Ranked
	// AsOf is the time of the newest change the counter processor had
	// applied when the list was computed (as for Count).
	AsOf     time.Time
	Degraded bool
}

// Page is one page of a user's reactions, newest first.
type Page struct {
	Edges []Edge
	// Next is the position after the last edge, or nil at the end.
	Next Position
}

// Position is a place in a list, opaque to everyone but the store that made
// it; the HTTP layer signs it into a cursor.
type Position map[string]string

// Edges is the source of truth for reaction edges.
type Edges interface {
	// Add makes the edge active, counting in trending or not; changed is
	// false if it already was active (and then trend changes nothing).
	Add(ctx context.Context, ref Ref, at time.Time, trend Trend) (e Edge, changed bool, err error)
	// Remove makes the edge inactive; changed is false if it was not active.
	Remove(ctx context.Context, ref Ref, at time.Time) (e Edge, changed bool, err error)
	// Toggle flips the edge (an activation counting in trending or not).
	// When commit is non-nil its result (the response to store for an
	// Idempotency-Key) commits atomically with the flip.
	Toggle(ctx context.Context, ref Ref, at time.Time, trend Trend, commit *Commit) (Edge, error)
	// Get returns the edges of user to the given targets (missing ones are
	// returned as never-active edges with Version 0).
	Get(ctx context.Context, user string, kind Kind, targets []string) (map[string]Edge, error)
	// List returns a page of user's active edges of kind, newest first.
	List(ctx context.Context, user string, kind Kind, limit int, after Position) (Page, error)
}

// Commit names the request a toggle answers when it carries an
// Idempotency-Key. The edge itself remembers the keys of its latest
// flips (FlipMemory of them, each for FlipMemoryFor), written with the
// flip in one conditional write: a retry finds its key and is answered
// with the edge as that flip left it, and does not flip again.
type Commit struct {
	Key  string // the Idempotency-Key
	Hash string // the request's fingerprint (idempotency.Hash)
	// Replayed is set by Toggle when the key had flipped the edge
	// already.
	Replayed bool
}

// An edge remembers the keys of its last FlipMemory flips, each for
// FlipMemoryFor (an Idempotency-Key's life): a retry is recognised unless
// its edge was flipped FlipMemory times since, within the day.
const (
	FlipMemory    = 16
	FlipMemoryFor = 24 * time.Hour
)

// Games is what lists read of game metadata (shared/games) to show beside
// each game id.
type Games interface {
	Get(ctx context.Context, ids []string) (map[string]games.Game, error)
}

// Span is the length of a trending bucket.
type Span string

// Bucket spans: 24h is summed from hourly buckets, 7d from daily ones.
const (
	Hourly Span = "h"
	Daily  Span = "d"
)

// BucketRef names one trending bucket: the span starting at Start (UTC).
type BucketRef struct {
	Span  Span
	Start time.Time
}

// Name is the bucket's compact name: 2026112210 (hour) or 20261122 (day).
func (b BucketRef) Name() string {
	if b.Span == Hourly {
		return b.Start.UTC().Format("2006010215")
	}
	return b.Start.UTC().Format("20060102")
}

// Buckets returns the buckets whose sum makes window w at now: the 24
// hours and the 7 days ending with the current one.
func Buckets(w Window, now time.Time) []BucketRef {
	var refs []BucketRef
	switch w {
	case Last24h:
		cur := BucketOf(Hourly, now)
		for i := 0; i < 24; i++ {
			refs = append(refs, BucketRef{Hourly, cur.Start.Add(-time.Duration(i) * time.Hour)})
		}
	case Last7d:
		cur := BucketOf(Daily, now)
		for i := 0; i < 7; i++ {
			refs = append(refs, BucketRef{Daily, cur.Start.AddDate(0, 0, -i)})
		}
	}
	return refs
}

// BucketOf returns the bucket of the given span that holds t.
func BucketOf(span Span, t time.Time) BucketRef {
	t = t.UTC()
	if span == Hourly {
		return BucketRef{Hourly, t.Truncate(time.Hour)}
	}
	return BucketRef{Daily, time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)}
}

// Bucket is a trending bucket's durable value: the net change, within the
// span, of a target's edges that count in trending.
type Bucket struct {
	BucketRef
	Delta   int64
	Version int64
}

// Tally is what DynamoDB holds for one target: its count, its all-time
// trending total and some of its trending buckets, each with the version
// that orders cache writes.
type Tally struct {
	Target   Target
	HasTotal bool
	Count    int64
	// Trending is the all-time trending total: the ACTIVE edges that count
	// in trending (Count less those the fraud controls kept out).
	Trending  int64
	Version   int64
	UpdatedAt time.Time
	Buckets   []Bucket
}

// Totals returns the tally's all-time values.
func (t Tally) Totals() Totals { return Totals{Count: t.Count, Trending: t.Trending} }

// Totals are a target's all-time values: its count (every ACTIVE edge) and
// its all-time trending total (the ACTIVE edges that count in trending).
type Totals struct {
	Count    int64
	Trending int64
}

// Committed is told, after each commit of counts and before the commit is
// marked counted, what it moved: per target, the trending buckets (a
// target with none moved its totals alone). A commit whose run died before
// marking it is told again by the run that finishes it, so whatever
// mirrors the counts never misses one.
type Committed func(ctx context.Context, moved map[Target][]BucketRef) error

// Counts is the durable side of counting: exactly-once application of
// changes, and counts and snapshots for reads without Redis.
type Counts interface {
	// Apply applies each edge's newest change at most once (an older or
	// repeated one is recognised by edge version), telling committed what
	// each commit moved, and returns how many changes were new.
	Apply(ctx context.Context, changes []Change, now time.Time, committed Committed) (int, error)
	// Count returns target's durable count.
	Count(ctx context.Context, t Target) (Count, error)
	// Snapshot returns the stored trending list, if any.
	Snapshot(ctx context.Context, kind Kind, w Window) (Top, bool, error)
	// SaveSnapshot stores a trending list for reads while Redis is down.
	SaveSnapshot(ctx context.Context, kind Kind, top Top) error
	// Tallies reads, consistently, the totals and the named buckets of
	// the given targets.
	Tallies(ctx context.Context, touched map[Target][]BucketRef) ([]Tally, error)
	// TargetTally reads a target's total and every live bucket.
	TargetTally(ctx context.Context, t Target, now time.Time) (Tally, error)
	// ScanTallies reads a page of every target's tallies, for rebuilding
	// Redis; next is nil after the last page.
	ScanTallies(ctx context.Context, after Position, now time.Time) (tallies []Tally, next Position, err error)
}

// Mirror is the Redis side: fast reads, rebuilt from DynamoDB when in doubt.
// Every method returns an error when Redis is unreachable or cannot be
// trusted (stale), so the caller falls back to DynamoDB.
type Mirror interface {
	// Statuses returns the cached states of user's edges; targets missing
	// from the cache are absent from the map.
	Statuses(ctx context.Context, user string, kind Kind, targets []string) (map[string]bool, error)
	// Remember caches edges as the user's own (read-your-writes); stale
	// versions are ignored.
	Remember(ctx context.Context, edges []Edge) error
	// Count returns target's cached count, or found=false on a miss. In
	// both cases c.AsOf is the counter processor's newest applied change,
	// read in the same round trip (zero when Redis holds none).
	Count(ctx context.Context, t Target) (c Count, found bool, err error)
	// StoreCount caches a count read from DynamoDB (read-through).
	StoreCount(ctx context.Context, t Target, c Count, version int64) error
	// Top returns the trending list for a window; its AsOf is the counter
	// processor's newest applied change when it was computed (zero when
	// Redis held none).
	Top(ctx context.Context, kind Kind, w Window, limit int, now time.Time) (Top, error)
}
