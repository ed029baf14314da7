package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/rallyhq/rally/shared/cache"
	"github.com/rallyhq/rally/shared/errs"
)

// limiter is a Limiter under test and the clock both its Redis and its
// in-process limiters read.
type limiter struct {
	*Limiter
	now   time.Time
	redis *miniredis.Miniredis
	// down is true when Redis is unreachable: every decision is the
	// instance's own.
	down bool
}

// advance moves the clock of Redis and of the in-process limiters.
func (l *limiter) advance(d time.Duration) {
	l.now = l.now.Add(d)
	l.redis.SetTime(l.now)
}

// start is half a second before a minute edge.
var start = time.Date(2026, 5, 4, 9, 0, 59, 500_000_000, time.UTC)

// newLimiter is a Limiter over a miniredis whose clock starts at start.
func newLimiter(t *testing.T) *limiter {
	t.Helper()
	m := miniredis.RunT(t)
	// The client every function has: its circuit breaker skips a Redis
	// that keeps failing.
	rdb, err := cache.New(cache.Options{URL: "redis://" + m.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	l := &limiter{Limiter: New(rdb), redis: m, now: start}
	l.Limiter.local.now = func() time.Time { return l.now }
	m.SetTime(start)
	return l
}

// stopRedis makes Redis unreachable.
func (l *limiter) stopRedis() {
	l.redis.Close()
	l.down = true
}

// backends runs fn with Redis up and with Redis unreachable, where each
// instance limits in process: the budget is the same either way.
func backends(t *testing.T, fn func(t *testing.T, l *limiter)) {
	t.Run("redis", func(t *testing.T) { fn(t, newLimiter(t)) })
	t.Run("in process, redis unreachable", func(t *testing.T) {
		l := newLimiter(t)
		l.stopRedis()
		fn(t, l)
	})
}

// near reports whether two durations agree within a millisecond: Redis
// computes GCRA in floating-point seconds. (The budgets below refill in
// intervals a float holds exactly, so that Remaining, rounded down, is
// exact too.)
func near(a, b time.Duration) bool { return (a - b).Abs() <= time.Millisecond }

// The whole budget may be spent at once; then one request comes back every
// minute / budget. Each decision reports what the RateLimit headers and
// Retry-After carry: the limit, what is left, how long until the budget is
// whole again, and how long a refused caller waits.
func TestABudgetIsSpentAtOnceAndEarnedBackOneAtATime(t *testing.T) {
	backends(t, func(t *testing.T, l *limiter) {
		ctx := context.Background()
		const budget = 30
		every := time.Minute / budget
		c := Check{Name: "favorite", PerMinute: budget, Subject: "ann"}
		for i := 1; i <= budget; i++ {
			d := l.Allow(ctx, c)
			if !d.Allowed || d.Budget != "favorite" || d.Limit != budget || d.Remaining != budget-i ||
				!near(d.Reset, time.Duration(i)*every) || d.RetryAfter != 0 || d.Local != l.down || d.Err() != nil {
				t.Fatalf("request %d of %d: %+v, want allowed with %d remaining, whole again in %v (local %v)",
					i, budget, d, budget-i, time.Duration(i)*every, l.down)
			}
		}
		refused := func(what string) {
			t.Helper()
			d := l.Allow(ctx, c)
			if d.Allowed || d.Budget != "favorite" || d.Limit != budget || d.Remaining != 0 ||
				!near(d.RetryAfter, every) || !near(d.Reset, time.Minute) {
				t.Fatalf("%s: %+v, want refused, retry after %v, whole again in %v", what, d, every, time.Minute)
			}
			var e *errs.Error
			if err := d.Err(); !errors.As(err, &e) || e.Kind != errs.RateLimited || e.RetryAfter != d.RetryAfter {
				t.Fatalf("%s: error %v, want RateLimited with its RetryAfter", what, err)
			}
		}
		refused("the request past the budget")
		refused("a retry at once") // a refused request spends nothing

		l.advance(every)
		if d := l.Allow(ctx, c); !d.Allowed || d.Remaining != 0 {
			t.Fatalf("after %v: %+v, want the one request earned back", every, d)
		}
		refused("the next at the same moment")

		l.advance(time.Minute)
		for i := 1; i <= budget; i++ {
			if d := l.Allow(ctx, c); !d.Allowed {
				t.Fatalf("a minute later, request %d: %+v, want the whole budget back", i, d)
			}
		}
		if d := l.Allow(ctx, c); d.Allowed {
			t.Fatalf("a minute later, past the budget: %+v", d)
		}
	})
}

// A burst straddling a minute edge gets the budget once plus what it earns
// back while it lasts: nothing starts afresh at the edge.
func TestABurstAcrossAMinuteEdgeGetsTheBudgetOnce(t *testing.T) {
	backends(t, func(t *testing.T, l *limiter) {
		const budget, step, burst = 30, 10 * time.Millisecond, 5 * time.Second
		every := time.Minute / budget
		edge := start.Truncate(time.Minute).Add(time.Minute)
		c := Check{Name: "favorite", PerMinute: budget, Subject: "ann"}
		before, after := 0, 0
		for at := time.Duration(0); at < burst; at += step {
			if d := l.Allow(context.Background(), c); d.Allowed && l.now.Before(edge) {
				before++
			} else if d.Allowed {
				after++
			}
			l.advance(step)
		}
		earned := int((burst - step) / every)
		if before != budget || after != earned {
			t.Fatalf("%d accepted before the edge and %d after, in %v from %v before it; want the budget %d, then the %d earned back",
				before, after, burst, edge.Sub(start), budget, earned)
		}
	})
}

// A request is counted against each of its checks in turn; the first that
// refuses decides, and the checks after it spend nothing. Allowed, the
// decision reports the most constrained check. A check without a budget
// (0: turned off) or without a subject is skipped.
func TestEveryCheckCountsAndTheMostConstrainedIsReported(t *testing.T) {
	backends(t, func(t *testing.T, l *limiter) {
		ctx := context.Background()
		player := Check{Name: "favorite", PerMinute: 5, Subject: "ann"}
		ip := Check{Name: "ip", PerMinute: 120, Subject: "192.0.2.1"}
		off := Check{Name: "off", PerMinute: 0, Subject: "ann"}
		nobody := Check{Name: "nobody", PerMinute: 1}
		for i := 1; i <= 5; i++ {
			d := l.Allow(ctx, ip, off, player, nobody)
			if !d.Allowed || d.Budget != "favorite" || d.Limit != 5 || d.Remaining != 5-i {
				t.Fatalf("request %d: %+v, want the player's budget reported, %d remaining", i, d, 5-i)
			}
		}
		if d := l.Allow(ctx, player, ip); d.Allowed || d.Budget != "favorite" || d.Remaining != 0 {
			t.Fatalf("past the player's budget: %+v, want refused by it", d)
		}
		// The IP budget was spent by the five allowed requests, and by
		// none of the refused one, which stopped at the player's.
		if d := l.Allow(ctx, ip); !d.Allowed || d.Budget != "ip" || d.Remaining != 120-6 {
			t.Fatalf("the IP budget alone: %+v, want %d remaining", d, 120-6)
		}
		if d := l.Allow(ctx, off, nobody); !d.Allowed || d.Limit != 0 {
			t.Fatalf("checks without a budget or a subject: %+v, want allowed without a limit", d)
		}
		for i := range 50 {
			if d := l.Allow(ctx, Check{Name: "favorite", PerMinute: 5, Subject: fmt.Sprintf("bystander-%d", i)}); !d.Allowed {
				t.Fatalf("another player is held back: %+v", d)
			}
		}
	})
}

// When Redis fails in the middle of a minute, each instance limits in
// process: never wide open. The instance's own limiter starts from a whole
// budget (an outage loosens a budget by the number of warm instances).
func TestARedisOutageFallsBackToTheInstancesOwnLimit(t *testing.T) {
	l := newLimiter(t)
	ctx := context.Background()
	const budget = 10
	c := Check{Name: "favorite", PerMinute: budget, Subject: "ann"}
	for range budget {
		if d := l.Allow(ctx, c); !d.Allowed || d.Local {
			t.Fatalf("with Redis up: %+v, want allowed by Redis", d)
		}
	}
	l.stopRedis()
	accepted := 0
	for range 10 * budget {
		d := l.Allow(ctx, c)
		if !d.Local {
			t.Fatalf("with Redis down: %+v, want the instance's own decision", d)
		}
		if d.Allowed {
			accepted++
		} else if !near(d.RetryAfter, time.Minute/budget) {
			t.Fatalf("refused in process: %+v, want a retry after %v", d, time.Minute/budget)
		}
	}
	if accepted != budget {
		t.Fatalf("with Redis down %d of %d requests accepted at one moment; the budget is %d", accepted, 10*budget, budget)
	}
}

// A function without Redis limits in process only, and leaves Redis alone.
func TestAllowInProcessNeverTouchesRedis(t *testing.T) {
	l := newLimiter(t)
	c := Check{Name: "service", PerMinute: 3, Subject: "arn:aws:iam::123456789012:role/game-server"}
	for i := range 4 {
		d := l.AllowInProcess(c)
		if !d.Local || d.Allowed != (i < 3) {
			t.Fatalf("request %d in process: %+v", i+1, d)
		}
	}
	if keys := l.redis.Keys(); len(keys) != 0 {
		t.Fatalf("the in-process limiter wrote to Redis: %v", keys)
	}
}

// Forget deletes a subject's budgets from Redis (an erasure): the player
// starts with a whole budget.
func TestForgetGivesBackTheWholeBudget(t *testing.T) {
	l := newLimiter(t)
	ctx := context.Background()
	c := Check{Name: "favorite", PerMinute: 2, Subject: "ann"}
	l.Allow(ctx, c)
	l.Allow(ctx, c)
	if d := l.Allow(ctx, c); d.Allowed {
		t.Fatalf("past the budget: %+v", d)
	}
	if err := l.Forget(ctx, "ann", "favorite", "like"); err != nil {
		t.Fatal(err)
	}
	if d := l.Allow(ctx, c); !d.Allowed || d.Remaining != 1 {
		t.Fatalf("after Forget: %+v, want a whole budget", d)
	}
}

// The in-process limiters are bounded: past max subjects the instance
// starts again from none, rather than growing with every caller it sees.
func TestTheInProcessLimitersAreBounded(t *testing.T) {
	ll := newLocalLimits(3)
	now := start
	ll.now = func() time.Time { return now }
	spend := func(subject string) (accepted int) {
		for range 5 {
			if ll.allow(Check{Name: "favorite", PerMinute: 2, Subject: subject}).Allowed {
				accepted++
			}
		}
		return accepted
	}
	for i, subject := range []string{"ann", "bob", "cyd", "dee", "eve"} {
		if got := spend(subject); got != 2 {
			t.Fatalf("%s got %d of a budget of 2", subject, got)
		}
		if n := len(ll.limiters); n > 3 || n != i%3+1 {
			t.Fatalf("after %d subjects the instance keeps %d limiters, want %d (at most 3)", i+1, n, i%3+1)
		}
	}
	// ann's limiter went in the clear: ann gets a budget again.
	if got := spend("ann"); got != 2 {
		t.Fatalf("ann after the clear: %d accepted, want 2", got)
	}
}
