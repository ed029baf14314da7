// Package stacktest runs a whole local stack for an end-to-end test, over
// testenv's DynamoDB Local and a redis-server of its own. It runs the real
// handlers, so it depends on every feature: use it from external test
// packages (package foo_test) only, or a feature would import itself.
package stacktest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rallyhq/rally/infra/local/access"
	"github.com/rallyhq/rally/infra/local/stack"
	"github.com/rallyhq/rally/infra/local/tables"
	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/shared/config"
	"github.com/rallyhq/rally/shared/routes"
)

// Start runs a whole local stack for an end-to-end test, on a free port,
// against the binary's DynamoDB Local (fresh tables for this test) and a
// real redis-server of its own, with the state directory in t.TempDir and
// fast retries so DLQ paths finish quickly. Fields set in opts win. The
// stack is stopped and its tables deleted when the test ends, and the test
// fails if a function touched anything its declarations do not grant it
// (shared/routes Uses, what the CDK stack grants): that call would be
// refused in AWS. The gateway checks every request against the OpenAPI
// document before its handler (stack.Options.SkipRequestValidation turns
// that off), so a test's request the document refuses answers 400; when
// the test ends, each such request is shown to its handler, and the test
// fails if the handler serves it (Stack.ContractMismatches): the deployed
// API, which validates nothing, would have served what the document
// refuses.
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
		opts.Log = testenv.FailureLog(t)
	}
	// Young-account controls are off unless a test turns them on: a test's
	// players are all minutes old. Budgets are the declared ones, but for
	// the per-IP and the read budgets: every test client calls from
	// 127.0.0.1, and tests check boards and counts through one reader and
	// poll them (a test of those budgets sets them).
	configure := opts.Configure
	opts.Configure = func(c *config.Config) {
		c.YoungAccountAge = 0
		c.Budgets = map[string]int{routes.IPBudget.Name: 1_000_000, routes.ReadBudget.Name: 1_000_000}
		if configure != nil {
			configure(c)
		}
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
		// Before Close, which the handlers need.
		recheck, done := context.WithTimeout(context.Background(), time.Minute)
		for _, m := range s.ContractMismatches(recheck) {
			t.Errorf("stacktest: contract mismatch: the OpenAPI document refused %s (request %s: %s), which its handler serves (%d)",
				m.Route, m.RequestID, strings.Join(m.Fields, "; "), m.Status)
		}
		done()
		if err := s.Close(); err != nil {
			t.Errorf("stacktest: stop the local stack: %v", err)
		}
		for _, d := range access.Denied(access.Grants(), s.Access().Uses()) {
			t.Errorf("stacktest: not granted in AWS: %s", d)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := tables.Delete(ctx, s.DB(), s.Tables()); err != nil {
			t.Logf("stacktest: delete tables: %v", err)
		}
	})
	return s
}
