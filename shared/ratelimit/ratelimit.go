// Package ratelimit enforces request budgets with GCRA (the generic cell
// rate algorithm) in Redis, through go-redis/redis_rate: a caller may spend
// a budget at once and then earns one request back every period / rate, so
// there is no double burst at a window edge as with fixed windows. Redis
// holds one timestamp per caller and budget, and every instance of every
// function shares it.
//
// When Redis is unreachable (or its circuit breaker is open) each warm
// instance keeps limiting with an in-process GCRA of the same budget
// (golang.org/x/time/rate): an outage loosens a budget by the number of
// warm instances, it never removes it.
package ratelimit

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/rallyhq/rally/shared/errs"
)

// Check is one caller measured against one budget.
type Check struct {
	// Name names the budget; checks with one Name and Subject share it.
	Name string
	// PerMinute is the budget: the burst, and the rate it refills at.
	PerMinute int
	// Subject is who is counted: a player, an IP address, a role.
	Subject string
}

// Decision is the outcome of one request's checks, as the RateLimit
// headers report it: the most constrained check's limit, what is left of
// it, and when it is whole again; RetryAfter is set when the request is
// refused.
type Decision struct {
	Allowed bool
	// Budget names the check reported: the one that refused, or the most
	// constrained.
	Budget     string
	Limit      int
	Remaining  int
	Reset      time.Duration
	RetryAfter time.Duration
	// Local is true when Redis could not be reached and the instance's own
	// limiter decided.
	Local bool
}

// Err is the RateLimited error of a refused decision, nil otherwise.
func (d Decision) Err() error {
	if d.Allowed {
		return nil
	}
	return &errs.Error{Kind: errs.RateLimited, Detail: "too many requests; retry after the indicated time", RetryAfter: d.RetryAfter}
}

// Limiter checks budgets in Redis, and in process when Redis fails.
type Limiter struct {
	redis *redis_rate.Limiter
	rdb   redis.UniversalClient
	local *localLimits
}

// New returns a limiter over rdb.
func New(rdb redis.UniversalClient) *Limiter {
	return &Limiter{redis: redis_rate.NewLimiter(rdb), rdb: rdb, local: newLocalLimits(localSubjects)}
}

// localSubjects bounds the in-process limiters one instance keeps.
const localSubjects = 50_000

// key is where a check's GCRA state lives (redis_rate adds its "rate:"
// prefix). One key per check: the keys of one request need not share a
// hash slot.
func key(name, subject string) string { return "rally:" + name + ":" + subject }

// Allow counts one request against every check and decides: it is refused
// when any check is over budget. Checks are made one after another, and
// stop at the first refusal, so a refused request spends nothing of the
// budgets after it.
func (l *Limiter) Allow(ctx context.Context, checks ...Check) Decision {
	return l.allow(ctx, true, checks)
}

// AllowInProcess is Allow with the instance's own limiter alone: for a
// function that has no Redis.
func (l *Limiter) AllowInProcess(checks ...Check) Decision {
	return l.allow(context.Background(), false, checks)
}

func (l *Limiter) allow(ctx context.Context, shared bool, checks []Check) Decision {
	out := Decision{Allowed: true, Limit: -1}
	for _, c := range checks {
		if c.PerMinute <= 0 || c.Subject == "" {
			continue
		}
		var d Decision
		if shared {
			d = l.check(ctx, c)
		} else {
			d = l.local.allow(c)
		}
		if !d.Allowed {
			return d
		}
		out.Local = out.Local || d.Local
		if out.Limit < 0 || d.Remaining < out.Remaining {
			out.Budget, out.Limit, out.Remaining, out.Reset = d.Budget, d.Limit, d.Remaining, d.Reset
		}
	}
	if out.Limit < 0 {
		out.Limit = 0
	}
	return out
}

func (l *Limiter) check(ctx context.Context, c Check) Decision {
	limit := redis_rate.PerMinute(c.PerMinute)
	if l != nil && l.redis != nil {
		res, err := l.redis.Allow(ctx, key(c.Name, c.Subject), limit)
		if err == nil {
			d := Decision{Allowed: res.Allowed > 0, Budget: c.Name, Limit: c.PerMinute, Remaining: res.Remaining, Reset: res.ResetAfter}
			if !d.Allowed {
				d.RetryAfter = res.RetryAfter
			}
			return d
		}
	}
	return l.local.allow(c)
}

// Forget deletes what Redis holds about subject under the named budgets
// (for an erasure); the in-process limiters forget by themselves.
func (l *Limiter) Forget(ctx context.Context, subject string, names ...string) error {
	pipe := l.rdb.Pipeline()
	for _, n := range names {
		// One key per DEL: keys of a subject need not share a hash slot.
		pipe.Del(ctx, "rate:"+key(n, subject))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("ratelimit: forget %d budgets: %w", len(names), err)
	}
	return nil
}

// localLimits is an instance's own GCRA per budget and subject, for when
// Redis is unreachable. It keeps at most max subjects: past that it starts
// again from an empty set, which is generous to a few callers for a moment
// rather than growing without bound.
type localLimits struct {
	mu       sync.Mutex
	max      int
	limiters map[string]*rate.Limiter
	now      func() time.Time
}

func newLocalLimits(max int) *localLimits {
	return &localLimits{max: max, limiters: map[string]*rate.Limiter{}, now: time.Now}
}

func (ll *localLimits) allow(c Check) Decision {
	every := time.Minute / time.Duration(c.PerMinute)
	k := c.Name + "\x00" + c.Subject + "\x00" + strconv.Itoa(c.PerMinute)
	ll.mu.Lock()
	lim, ok := ll.limiters[k]
	if !ok {
		if len(ll.limiters) >= ll.max {
			clear(ll.limiters)
		}
		lim = rate.NewLimiter(rate.Every(every), c.PerMinute)
		ll.limiters[k] = lim
	}
	now := ll.now()
	r := lim.ReserveN(now, 1)
	wait := r.DelayFrom(now)
	if wait > 0 {
		r.CancelAt(now)
	}
	tokens := lim.TokensAt(now)
	ll.mu.Unlock()
	d := Decision{Allowed: wait == 0, Budget: c.Name, Limit: c.PerMinute, Local: true}
	if tokens > 0 {
		d.Remaining = int(tokens)
	}
	d.Reset = time.Duration((float64(c.PerMinute) - tokens) * float64(every))
	if !d.Allowed {
		d.RetryAfter = wait
	}
	return d
}

// Eraser erases what the budgets hold about a player (a part of
// shared/privacy's erasure job): the Redis keys are named by the player.
type Eraser struct {
	Limiter *Limiter
	// Budgets name the player's budgets.
	Budgets []string
}

// Name implements privacy.Part.
func (e *Eraser) Name() string { return "budgets" }

// Erase implements privacy.Part.
func (e *Eraser) Erase(ctx context.Context, user string) (done bool, err error) {
	if err := e.Limiter.Forget(ctx, user, e.Budgets...); err != nil {
		return false, err
	}
	return true, nil
}
