package cachegen_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/shared/cachegen"
	"github.com/rallyhq/rally/shared/schema"
)

// scope is a Redis side that records what the repair asked of it. Its
// rebuild takes rebuildCalls calls to finish; refresh may mark a key
// dirty again while it runs, as a writer racing the repair would.
type scope struct {
	tr           *cachegen.Tracker
	rebuildCalls int
	rebuilds     int
	rebuildLeft  time.Duration
	refreshed    []string
	remark       string
}

func (s *scope) Rebuild(ctx context.Context) (bool, error) {
	s.rebuilds++
	if deadline, ok := ctx.Deadline(); ok {
		s.rebuildLeft = time.Until(deadline)
	}
	return s.rebuilds >= s.rebuildCalls, nil
}

func (s *scope) Refresh(ctx context.Context, keys []string) error {
	s.refreshed = append(s.refreshed, keys...)
	if s.remark != "" && slices.Contains(keys, s.remark) {
		err := s.tr.MarkDirty(ctx, []string{s.remark}, time.Now().Add(time.Hour))
		s.remark = ""
		return err
	}
	return nil
}

func newTracker(t *testing.T) (*cachegen.Tracker, *redis.Client) {
	t.Helper()
	db, names, _ := testenv.DynamoDB(t)
	srv := testenv.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	return &cachegen.Tracker{DB: db, Table: names.Of(schema.Counters), Redis: rdb, Scope: "repair", CheckEvery: time.Nanosecond}, rdb
}

// The protocol: a fresh Redis is left alone; a Redis that lost its data is
// rebuilt (over several invocations when it must), then every dirty key
// is refreshed and cleared, and only then is Redis trusted again.
func TestRepairRebuildsThenRefreshesThenTrusts(t *testing.T) {
	ctx := context.Background()
	tr, rdb := newTracker(t)
	s := &scope{tr: tr, rebuildCalls: 2}

	if err := tr.Advance(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if err := tr.Repair(ctx, s); err != nil || s.rebuilds != 0 || len(s.refreshed) != 0 {
		t.Fatalf("a fresh Redis was repaired: %v, %d rebuilds, refreshed %v", err, s.rebuilds, s.refreshed)
	}

	// Redis loses everything, and a write is lost meanwhile.
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := tr.MarkDirty(ctx, []string{"a", "b"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := tr.Repair(ctx, s); !errors.Is(err, cachegen.ErrRepairUnfinished) || s.rebuilds != 1 || tr.Fresh(ctx) {
		t.Fatalf("an unfinished rebuild: %v after %d rebuilds, fresh %v", err, s.rebuilds, tr.Fresh(ctx))
	}
	if len(s.refreshed) != 0 {
		t.Fatalf("keys refreshed before the rebuild finished: %v", s.refreshed)
	}
	if err := tr.Repair(ctx, s); err != nil || s.rebuilds != 2 {
		t.Fatalf("the rebuild's second invocation: %v after %d rebuilds", err, s.rebuilds)
	}
	slices.Sort(s.refreshed)
	if !slices.Equal(s.refreshed, []string{"a", "b"}) || !tr.Fresh(ctx) {
		t.Fatalf("refreshed %v, fresh %v; want a and b, then trusted", s.refreshed, tr.Fresh(ctx))
	}
	if left, _ := tr.Dirty(ctx, 10); len(left) != 0 {
		t.Fatalf("markers left after the repair: %+v", left)
	}
}

// A key marked dirty again while it is being refreshed stays dirty, and
// Redis stays untrusted until a later repair refreshes it once more.
func TestAKeyDirtiedDuringItsRefreshIsRefreshedAgain(t *testing.T) {
	ctx := context.Background()
	tr, _ := newTracker(t)
	if err := tr.Advance(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if err := tr.MarkDirty(ctx, []string{"hot"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	s := &scope{tr: tr, remark: "hot"}
	// The repair refreshes hot, sees it marked again and refreshes it
	// again in the same run; the generation bumped by the second mark
	// is only trusted after a repair that starts after it.
	_ = tr.Repair(ctx, s)
	if tr.Fresh(ctx) {
		t.Fatal("Redis trusted although a write was lost after the repair read the generation")
	}
	if err := tr.Repair(ctx, s); err != nil || !tr.Fresh(ctx) {
		t.Fatalf("the next repair: %v, fresh %v", err, tr.Fresh(ctx))
	}
	if n := len(s.refreshed); n < 2 {
		t.Fatalf("hot refreshed %d times, want again after its second marking", n)
	}
}

// The budget comes from the invocation's deadline, keeping a reserve for
// the rest of the invocation; without a deadline a default bounds it.
func TestRepairBudgetComesFromTheDeadline(t *testing.T) {
	tr, _ := newTracker(t)
	s := &scope{tr: tr, rebuildCalls: 1}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	if err := tr.Repair(ctx, s); err != nil {
		t.Fatal(err)
	}
	if s.rebuildLeft <= 20*time.Second || s.rebuildLeft > 31*time.Second {
		t.Fatalf("the rebuild had %s of a 40s invocation, want about three quarters", s.rebuildLeft)
	}
	tr2, _ := newTracker(t)
	s2 := &scope{tr: tr2, rebuildCalls: 1}
	if err := tr2.Repair(context.Background(), s2); err != nil {
		t.Fatal(err)
	}
	if s2.rebuildLeft <= 0 || s2.rebuildLeft > cachegen.DefaultRepairBudget {
		t.Fatalf("without a deadline the rebuild had %s, want at most %s", s2.rebuildLeft, cachegen.DefaultRepairBudget)
	}
}
