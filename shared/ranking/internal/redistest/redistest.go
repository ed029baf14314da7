// Package redistest gives tests real Redis servers: a private redis-server
// (standalone or a one-node cluster) on a free port, or an embedded
// miniredis. When redis-server is missing the test is skipped, except in
// CI (CI=true), where a missing dependency fails the test.
package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// Server starts a private redis-server for tb and returns a client to it.
// extra arguments go to redis-server (e.g. "--maxmemory", "0").
func Server(tb testing.TB, extra ...string) *redis.Client {
	tb.Helper()
	addr := start(tb, extra...)
	c := redis.NewClient(&redis.Options{Addr: addr})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// Cluster starts a one-node Redis Cluster owning every slot. It enforces
// what ElastiCache Serverless does for multi-key commands: keys in one
// command must share a hash slot (CROSSSLOT otherwise).
func Cluster(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	dir := tb.TempDir()
	addr := start(tb, "--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"))
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer admin.Close()
	if err := admin.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(); err != nil {
		tb.Fatalf("assign cluster slots: %v", err)
	}
	awaitCondition(tb, "cluster state ok", func() bool {
		info, err := admin.ClusterInfo(ctx).Result()
		return err == nil && strings.Contains(info, "cluster_state:ok")
	})
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}})
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

func binary(tb testing.TB) string {
	tb.Helper()
	if p := os.Getenv("REDIS_SERVER"); p != "" {
		return p
	}
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p
	}
	const usual = "/usr/bin/redis-server"
	if _, err := os.Stat(usual); err == nil {
		return usual
	}
	if os.Getenv("CI") == "true" {
		tb.Fatalf("redis-server not found (set REDIS_SERVER); integration tests must run in CI")
	}
	tb.Skip("redis-server not found (set REDIS_SERVER to run this test)")
	return ""
}

// start runs redis-server on a free port until the test ends and returns
// its address once it answers PING.
func start(tb testing.TB, extra ...string) string {
	tb.Helper()
	bin := binary(tb)
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		addr, err := launch(tb, bin, extra)
		if err == nil {
			return addr
		}
		lastErr = err // most likely another process took the port first
	}
	tb.Fatalf("start redis-server: %v", lastErr)
	return ""
}

func launch(tb testing.TB, bin string, extra []string) (string, error) {
	port, err := freePort()
	if err != nil {
		return "", err
	}
	dir := tb.TempDir()
	args := append([]string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir,
	}, extra...)
	cmd := exec.Command(bin, args...)
	var logs strings.Builder
	cmd.Stdout = &logs
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		return "", err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() {
		_ = cmd.Process.Kill()
		<-exited
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(15 * time.Second)
	for {
		select {
		case err := <-exited:
			exited <- err
			return "", fmt.Errorf("redis-server exited: %v: %s", err, logs.String())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			tb.Cleanup(stop)
			return addr, nil
		}
		if time.Now().After(deadline) {
			stop()
			return "", errors.Join(errors.New("redis-server did not answer PING"), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func awaitCondition(tb testing.TB, what string, ok func() bool) {
	tb.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
