// Package stacktest runs Rally's whole local stack inside a test: the real
// handlers behind the local gateway, stream pollers, DynamoDB Local and a
// real redis-server, isolated from every other test.
package stacktest

import (
	"context"
	"testing"
	"time"

	"github.com/rallyhq/rally/infra/local/stack"
	"github.com/rallyhq/rally/infra/local/tables"
	"github.com/rallyhq/rally/infra/local/testenv"
)

// Start runs a whole local stack for an end-to-end test, on a free port,
// against the binary's DynamoDB Local (fresh tables for this test) and a
// real redis-server of its own, with the state directory in t.TempDir and
// fast retries so DLQ paths finish quickly. Fields set in opts win. The
// stack is stopped and its tables deleted when the test ends.
func Start(t testing.TB, opts stack.Options) *stack.Stack {
	t.Helper()
	if opts.DynamoDBEndpoint == "" {
		opts.DynamoDBEndpoint = testenv.Endpoint(t)
	}
	if opts.Tables == nil {
		opts.Tables = testenv.Names(t)
	}
	if opts.RedisURL == "" {
		opts.RedisURL = testenv.Redis(t).URL()
	}
	if opts.StateDir == "" {
		opts.StateDir = t.TempDir()
	}
	if opts.Log == nil {
		opts.Log = t.Output()
	}
	if opts.RetryBase == 0 {
		opts.RetryBase, opts.RetryMax = 5*time.Millisecond, 50*time.Millisecond
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := stack.Start(ctx, opts)
	if err != nil {
		t.Fatalf("stacktest: start the local stack: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("stacktest: stop the local stack: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := tables.Delete(ctx, s.DB(), s.Tables()); err != nil {
			t.Logf("stacktest: delete tables: %v", err)
		}
	})
	return s
}
