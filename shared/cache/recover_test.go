package cache_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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

// A URL's path names the database: two clients of one server on different
// databases never see each other's keys, and a path that is not a number
// is refused rather than quietly read as database 0.
func TestTheURLNamesTheDatabase(t *testing.T) {
	srv := testenv.Redis(t)
	ctx := context.Background()
	clients := map[string]redis.UniversalClient{}
	for _, path := range []string{"", "/", "/0", "/3"} {
		c, err := cache.New(cache.Options{URL: srv.URL() + path})
		if err != nil {
			t.Fatalf("%q: %v", path, err)
		}
		t.Cleanup(func() { _ = c.Close() })
		clients[path] = c
	}
	if err := clients["/3"].Set(ctx, "k", "in 3", 0).Err(); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"", "/", "/0"} {
		if err := clients[path].Get(ctx, "k").Err(); !cache.IsMiss(err) {
			t.Errorf("database %q reads database 3's key (err %v)", path, err)
		}
	}
	if got, err := clients["/3"].Get(ctx, "k").Result(); err != nil || got != "in 3" {
		t.Errorf("database 3 read %q, %v", got, err)
	}
	for _, bad := range []string{"/x", "/-1", "/1/2"} {
		if _, err := cache.New(cache.Options{URL: srv.URL() + bad}); err == nil {
			t.Errorf("%q was accepted", bad)
		}
	}
	if _, err := cache.New(cache.Options{URL: srv.URL() + "/1", Cluster: true}); err == nil {
		t.Error("a cluster URL with database 1 was accepted")
	}
}
