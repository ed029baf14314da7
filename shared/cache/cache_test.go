package cache

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestBreakerOpensAfterConsecutiveFailuresAndProbesAfterCooldown(t *testing.T) {
	now := time.Unix(0, 0)
	b := NewBreaker(BreakerOptions{Failures: 3, Cooldown: time.Second})
	b.now = func() time.Time { return now }
	down := errors.New("dial tcp: connection refused")

	for i := 0; i < 3; i++ {
		if !b.Allow() {
			t.Fatalf("call %d refused before the threshold", i)
		}
		b.Record(down)
	}
	if b.Allow() {
		t.Fatal("open breaker let a call through")
	}
	now = now.Add(1100 * time.Millisecond)
	if !b.Allow() {
		t.Fatal("no probe after the cooldown")
	}
	b.Record(down)
	if b.Allow() {
		t.Fatal("failed probe did not re-open the breaker")
	}
	now = now.Add(1100 * time.Millisecond)
	if !b.Allow() {
		t.Fatal("no second probe")
	}
	b.Record(nil)
	for i := 0; i < 5; i++ {
		if !b.Allow() {
			t.Fatal("successful probe did not close the breaker")
		}
		b.Record(nil)
	}
}

func TestAnswersFromRedisAreNotFailures(t *testing.T) {
	b := NewBreaker(BreakerOptions{Failures: 1})
	b.Record(redis.Nil)
	b.Record(context.Canceled)
	if !b.Allow() {
		t.Fatal("a miss or a cancelled call opened the breaker")
	}
}

func TestNoRedisConfiguredFailsFastWithErrDisabled(t *testing.T) {
	c, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := c.Get(context.Background(), "k").Err(); !errors.Is(err, ErrDisabled) {
		t.Fatalf("got %v, want ErrDisabled", err)
	}
	pipe := c.Pipeline()
	pipe.Get(context.Background(), "a")
	if _, err := pipe.Exec(context.Background()); !errors.Is(err, ErrDisabled) {
		t.Fatalf("pipeline got %v, want ErrDisabled", err)
	}
	if time.Since(start) > 100*time.Millisecond {
		t.Fatal("disabled cache did not fail fast")
	}
}
