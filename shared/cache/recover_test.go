package cache_test

import (
	"context"
	"testing"
	"time"

	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/infra/local/testenv/await"
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
	await.Success(t, 10*time.Second, "writes succeed again after Redis returned", func() error {
		return c.Set(ctx, "k", "v", 0).Err()
	})
}
