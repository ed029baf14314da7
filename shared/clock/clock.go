// Package clock owns the notion of "now" for every handler and processor, so
// the local stack can move time (streak days, periods, trending windows) and
// tests can pin it.
package clock

import (
	"context"
	"sync"
	"time"
)

// Clock tells the current time.
type Clock interface {
	Now() time.Time
}

// System is the wall clock, in UTC.
type System struct{}

// Now returns the current UTC time.
func (System) Now() time.Time { return time.Now().UTC() }

// Settable is a clock whose time can be pinned or advanced. Between changes
// it keeps ticking with the wall clock, so durations measured across it
// (timeouts, expiries) stay meaningful.
type Settable struct {
	mu     sync.Mutex
	offset time.Duration
	// changes are the offsets it had, from the wall-clock time each was
	// set on, oldest first (for At).
	changes []change
	// stopped is the wall-clock time the clock stands at, once Stop was
	// called (zero while it ticks).
	stopped time.Time
}

type change struct {
	from   time.Time
	offset time.Duration
}

// NewSettable returns a clock that starts at the wall-clock time.
func NewSettable() *Settable { return &Settable{} }

// Now returns the wall-clock time shifted by the configured offset.
func (s *Settable) Now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.wall().UTC().Add(s.offset)
}

// wall is the wall-clock time the clock reads from: now, or the time it
// stopped at.
func (s *Settable) wall() time.Time {
	if !s.stopped.IsZero() {
		return s.stopped
	}
	return time.Now()
}

// Set moves the clock so that Now returns t at this instant.
func (s *Settable) Set(t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shift(t.Sub(s.wall()))
}

// Stop makes the clock stand still: Now returns the same time until the
// clock is set or advanced, which move it, still standing. A test that
// compares the times handlers stamp with the ones it expects stops it;
// leases and expiries taken from it then never run out by themselves.
func (s *Settable) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped.IsZero() {
		s.stopped = time.Now()
	}
}

// Advance moves the clock forward by d (backward when d is negative).
func (s *Settable) Advance(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shift(s.offset + d)
}

func (s *Settable) shift(offset time.Duration) {
	s.offset = offset
	s.changes = append(s.changes, change{from: time.Now(), offset: offset})
}

// At is what the clock read at wall-clock time wall: what a timestamp
// taken by something that does not know this clock (DynamoDB Local's
// stream records, say) means on it.
func (s *Settable) At(wall time.Time) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	var offset time.Duration
	for _, c := range s.changes {
		if c.from.After(wall) {
			break
		}
		offset = c.offset
	}
	return wall.UTC().Add(offset)
}

// Fixed is a clock that always returns the same instant; for tests.
type Fixed time.Time

// Now returns the fixed instant.
func (f Fixed) Now() time.Time { return time.Time(f) }

// Now is c's time in UTC, or the wall clock's when c is nil (a store built
// without a clock).
func Now(c Clock) time.Time {
	if c == nil {
		return time.Now().UTC()
	}
	return c.Now().UTC()
}

// Sleep waits for d, or until ctx is done, whose error it then returns.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Budget is the part of ctx's time that work beside an invocation's own
// (a Redis repair, a job's run) may take: up to ctx's deadline less a
// reserve for the rest of the invocation, a quarter of the time left (at
// least two seconds, at most half of it), or fallback when ctx has no
// deadline.
func Budget(ctx context.Context, fallback time.Duration) (context.Context, context.CancelFunc) {
	deadline, ok := ctx.Deadline()
	if !ok {
		return context.WithTimeout(ctx, fallback)
	}
	left := time.Until(deadline)
	return context.WithDeadline(ctx, deadline.Add(-min(max(left/4, 2*time.Second), left/2)))
}
