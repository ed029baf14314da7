// Package ratelimit enforces per-player and per-IP request budgets with
// fixed windows counted in Redis. Limits protect the service; they are not
// a source of truth, so when Redis is unreachable requests are allowed.
package ratelimit

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/errs"
)

// Rule is a budget: at most Limit requests per Window for one subject.
type Rule struct {
	Name   string
	Limit  int64
	Window time.Duration
}

// Check is one subject measured against one rule.
type Check struct {
	Rule    Rule
	Subject string
}

// Limiter counts requests in Redis.
type Limiter struct {
	Redis redis.UniversalClient
	Clock clock.Clock
}

// Allow counts one request against every check, in one round trip, and
// returns a RateLimited error (with the time until the window resets) when
// any budget is exhausted. A Redis failure allows the request.
func (l *Limiter) Allow(ctx context.Context, checks ...Check) error {
	if l == nil || len(checks) == 0 {
		return nil
	}
	now := l.Clock.Now()
	pipe := l.Redis.Pipeline()
	counts := make([]*redis.IntCmd, len(checks))
	resets := make([]time.Duration, len(checks))
	for i, c := range checks {
		if c.Rule.Limit <= 0 {
			continue
		}
		start := now.Truncate(c.Rule.Window)
		key := windowKey(c, start)
		counts[i] = pipe.Incr(ctx, key)
		pipe.PExpire(ctx, key, c.Rule.Window+time.Second)
		resets[i] = start.Add(c.Rule.Window).Sub(now)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil
	}
	var wait time.Duration
	for i, c := range checks {
		if counts[i] != nil && counts[i].Val() > c.Rule.Limit && resets[i] > wait {
			wait = resets[i]
		}
	}
	if wait > 0 {
		return &errs.Error{Kind: errs.RateLimited, Detail: "too many requests; retry after the indicated time", RetryAfter: wait}
	}
	return nil
}

// windowKey is the counter of a check in the window starting at start.
func windowKey(c Check, start time.Time) string {
	return "rally:rl:" + c.Rule.Name + ":" + c.Subject + ":" + strconv.FormatInt(start.Unix(), 10)
}

// Forget deletes the counters a subject may still have under rules (the
// current and the previous window of each), for an erasure.
func (l *Limiter) Forget(ctx context.Context, subject string, rules ...Rule) error {
	now := l.Clock.Now()
	var keys []string
	for _, r := range rules {
		if r.Window <= 0 {
			continue
		}
		start := now.Truncate(r.Window)
		c := Check{Rule: r, Subject: subject}
		keys = append(keys, windowKey(c, start), windowKey(c, start.Add(-r.Window)))
	}
	pipe := l.Redis.Pipeline()
	for _, k := range keys {
		// One key per DEL: keys of a subject need not share a hash slot.
		pipe.Del(ctx, k)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("ratelimit: forget %d counters: %w", len(keys), err)
	}
	return nil
}
