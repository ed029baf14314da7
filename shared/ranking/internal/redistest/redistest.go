// Package redistest gives tests real Redis servers: a private redis-server
// on a free port, a local Redis Cluster of three nodes, or an embedded
// miniredis. When redis-server is missing the test is skipped, except in
// CI (CI=true), where a missing dependency fails the test: package ci's
// rule, as in testenv.
package redistest

import (
	"context"
	"errors"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/rallyhq/rally/infra/local/redisserver"
	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/infra/local/testenv/ci"
)

// Server starts a private redis-server for tb and returns a client to it.
// extra arguments go to redis-server (e.g. "--maxmemory", "0").
func Server(tb testing.TB, extra ...string) *redis.Client {
	tb.Helper()
	addr := start(tb, "", extra...)
	c := redis.NewClient(&redis.Options{Addr: addr})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// Cluster starts a local Redis Cluster of testenv.ClusterNodes primaries
// and returns a client seeded with one of them. It enforces what
// ElastiCache does for multi-key commands: keys in one command must share
// a hash slot (CROSSSLOT otherwise), and boards under different hash tags
// live on different nodes.
func Cluster(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	cl := testenv.RedisCluster(tb)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()[:1]})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// Mini starts an embedded miniredis, the local stack's default Redis.
func Mini(tb testing.TB) (*redis.Client, *miniredis.Miniredis) {
	tb.Helper()
	m := miniredis.RunT(tb)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	tb.Cleanup(func() { _ = c.Close() })
	return c, m
}

// start runs redis-server on a free port until the test ends and returns
// its address. A missing redis-server skips the test, or fails it in CI.
func start(tb testing.TB, dir string, extra ...string) string {
	tb.Helper()
	srv, err := redisserver.StartWith(context.Background(), redisserver.Options{Args: extra, Dir: dir})
	if errors.Is(err, redisserver.ErrNotInstalled) {
		ci.Require(tb, "redis-server", err)
	}
	if err != nil {
		tb.Fatalf("start redis-server: %v", err)
	}
	tb.Cleanup(func() { _ = srv.Close() })
	return srv.Addr()
}
