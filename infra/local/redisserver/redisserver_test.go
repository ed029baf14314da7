package redisserver_test

import (
	"context"
	"fmt"
	"strings"
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

// A local cluster spreads hash slots over its nodes as ElastiCache does:
// keys under different hash tags land on different nodes, one command
// may not span slots, and a cluster client reaches every key from one
// seed.
func TestAClusterSpreadsSlotsOverItsNodes(t *testing.T) {
	cl := testenv.RedisCluster(t)
	ctx := context.Background()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()[:1]})
	defer rdb.Close()
	for i := range 300 {
		if err := rdb.Set(ctx, fmt.Sprintf("{tag-%d}:k", i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	total := int64(0)
	for i, addr := range cl.Addrs() {
		node := redis.NewClient(&redis.Options{Addr: addr})
		n, err := node.DBSize(ctx).Result()
		node.Close()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			t.Errorf("node %d holds none of 300 keys under 300 tags", i)
		}
		total += n
	}
	if total != 300 {
		t.Errorf("the nodes hold %d keys, want 300", total)
	}
	if got, err := rdb.Get(ctx, "{tag-299}:k").Int(); err != nil || got != 299 {
		t.Errorf("read back %d, %v", got, err)
	}
	if err := rdb.Do(ctx, "MGET", "{tag-1}:k", "{tag-2}:k").Err(); err == nil || !strings.Contains(err.Error(), "CROSSSLOT") {
		t.Errorf("a command spanning two slots answered %v, want CROSSSLOT", err)
	}
	if err := rdb.Do(ctx, "MGET", "{tag-1}:k", "{tag-1}:other").Err(); err != nil {
		t.Errorf("a command within one slot failed: %v", err)
	}
}
