package redisserver_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rallyhq/rally/infra/local/testenv"
)

// An outage is a Stop; recovery is a Start on the same address, with an
// empty cache (nothing is persisted).
func TestStopAndStartKeepTheAddressAndLoseTheData(t *testing.T) {
	srv := testenv.Redis(t)
	opts, err := redis.ParseURL(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	opts.MaxRetries = -1
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	ctx := context.Background()

	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	if err := rdb.Get(ctx, "k").Err(); err == nil {
		t.Fatal("GET succeeded while redis-server was stopped")
	}
	if srv.PID() != 0 {
		t.Fatal("PID of a stopped server is not 0")
	}

	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := srv.Start(sctx); err != nil {
		t.Fatal(err)
	}
	got, err := rdb.Get(ctx, "k").Result()
	if err != redis.Nil {
		t.Fatalf("GET after restart = %q, %v; want a miss", got, err)
	}
	if err := rdb.Set(ctx, "k", "w", 0).Err(); err != nil {
		t.Fatalf("SET after restart: %v", err)
	}
}
