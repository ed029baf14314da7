package cache_test

import (
	"context"
	"testing"
	"time"

	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/shared/cache"
)

// After an outage long enough to open the circuit, the client serves again
// soon after Redis comes back, with no restart of the caller.
func TestClientRecoversAfterRedisReturns(t *testing.T) {
	srv := testenv.Redis(t)
	c, err := cache.New(cache.Options{URL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	for i := 0; i < 50; i++ {
		if err := c.Get(ctx, "k").Err(); err == nil {
			t.Fatal("a stopped Redis answered")
		}
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := c.Set(ctx, "k", "v", 0).Err()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still failing 10 s after Redis returned: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
