package clock

import (
	"testing"
	"time"
)

// At tells what the clock read at a wall-clock instant, across moves: a
// timestamp taken before the clock was advanced keeps the reading it had.
func TestSettableAtReadsTheClockAsItWas(t *testing.T) {
	c := NewSettable()
	before := time.Now()
	if d := c.At(before).Sub(before); d != 0 {
		t.Fatalf("before any move At is off by %s", d)
	}
	c.Advance(25 * time.Hour)
	after := time.Now()
	if got := c.At(before); !got.Equal(before.UTC()) {
		t.Fatalf("a time from before the move reads %s, want %s", got, before.UTC())
	}
	if got := c.At(after).Sub(after); got != 25*time.Hour {
		t.Fatalf("a time from after the move reads %s ahead, want 25h", got)
	}
	if gap := c.Now().Sub(c.At(before)); gap < 25*time.Hour {
		t.Fatalf("the clock is %s past a time taken before a 25h move", gap)
	}
}
