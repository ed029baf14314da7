// Package hotcache is a tiny in-process cache for hot read paths (top
// windows, much-viewed ranks): values live for a short TTL, and concurrent
// misses for one key share a single load, so a burst of readers costs one
// round trip to Redis instead of one each.
package hotcache

import (
	"context"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
)

// Cache holds values of type V by string key for TTL.
type Cache[V any] struct {
	TTL time.Duration
	// Max bounds the number of entries; when full, expired entries are
	// dropped, and if none are, the cache is cleared (default 10,000).
	Max int

	mu      sync.Mutex
	entries map[string]entry[V]
	group   singleflight.Group
	now     func() time.Time
}

type entry[V any] struct {
	v       V
	expires time.Time
}

// New returns a cache whose entries live for ttl.
func New[V any](ttl time.Duration) *Cache[V] {
	return &Cache[V]{TTL: ttl}
}

// Get returns the cached value for key, or loads it once for all concurrent
// callers. Failed loads are not cached. The load runs detached from the
// caller that started it: a caller that gives up (its context cancelled)
// stops waiting, but does not fail the others waiting on the same load,
// which keeps its caller's deadline.
func (c *Cache[V]) Get(ctx context.Context, key string, load func(context.Context) (V, error)) (v V, hit bool, err error) {
	c.mu.Lock()
	if e, ok := c.entries[key]; ok && c.clock().Before(e.expires) {
		c.mu.Unlock()
		return e.v, true, nil
	}
	c.mu.Unlock()
	done := c.group.DoChan(key, func() (any, error) {
		lctx := context.WithoutCancel(ctx)
		if deadline, ok := ctx.Deadline(); ok {
			var cancel context.CancelFunc
			lctx, cancel = context.WithDeadline(lctx, deadline)
			defer cancel()
		}
		v, err := load(lctx)
		if err != nil {
			return nil, err
		}
		c.put(key, v)
		return v, nil
	})
	var res singleflight.Result
	select {
	case <-ctx.Done():
		return v, false, ctx.Err()
	case res = <-done:
	}
	if res.Err != nil {
		return v, false, res.Err
	}
	typed, ok := res.Val.(V)
	if !ok {
		return v, false, fmt.Errorf("hotcache: unexpected value type %T", res.Val)
	}
	return typed, false, nil
}

// Drop forgets key, e.g. after a write that changes it.
func (c *Cache[V]) Drop(key string) {
	c.mu.Lock()
	delete(c.entries, key)
	c.mu.Unlock()
}

func (c *Cache[V]) clock() time.Time {
	if c.now == nil {
		return time.Now()
	}
	return c.now()
}

func (c *Cache[V]) put(key string, v V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	max := c.Max
	if max == 0 {
		max = 10000
	}
	now := c.clock()
	if c.entries == nil {
		c.entries = map[string]entry[V]{}
	}
	if len(c.entries) >= max {
		for k, e := range c.entries {
			if !now.Before(e.expires) {
				delete(c.entries, k)
			}
		}
		if len(c.entries) >= max {
			c.entries = map[string]entry[V]{}
		}
	}
	c.entries[key] = entry[V]{v: v, expires: now.Add(c.TTL)}
}
