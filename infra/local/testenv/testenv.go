// Package testenv gives integration tests real storage: DynamoDB Local (one
// per test binary, a fresh set of tables per test), a real redis-server per
// test, and a whole local stack for end-to-end tests. Outside CI a missing
// dependency skips the test with the reason; with CI=true it fails it, so a
// pipeline can never pass by skipping (package ci owns that rule).
//
// Because Stack runs the real handlers, testenv depends on shared/app: use
// it from external test packages (package foo_test) only, or a package
// under shared/app would import itself.
package testenv

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"

	"github.com/rallyhq/rally/infra/local/access"
	"github.com/rallyhq/rally/infra/local/dynamodblocal"
	"github.com/rallyhq/rally/infra/local/redisserver"
	"github.com/rallyhq/rally/infra/local/stack"
	"github.com/rallyhq/rally/infra/local/tables"
	"github.com/rallyhq/rally/infra/local/testenv/ci"
	"github.com/rallyhq/rally/shared/config"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
)

// EndpointEnv names an already running DynamoDB (Local) to use instead of
// starting one, e.g. in CI where one server is shared by every package.
const EndpointEnv = "RALLY_DYNAMODB_ENDPOINT"

// Region is the region every local client uses.
const Region = "us-east-1"

// InCI reports whether CI=true (or any true value) is set; see package ci.
func InCI() bool { return ci.On() }

// Require stops the test when a dependency is missing: t.Skip with the
// reason outside CI, t.Fatal in CI (the rule of package ci). It does
// nothing when err is nil.
func Require(t testing.TB, what string, err error) {
	t.Helper()
	ci.Require(t, what, err)
}

var shared struct {
	once     sync.Once
	server   *dynamodblocal.Server
	endpoint string
	err      error
}

var tableSets atomic.Int64

// Endpoint returns the URL of the test binary's DynamoDB Local, starting it
// on first use, or RALLY_DYNAMODB_ENDPOINT when set.
func Endpoint(t testing.TB) string {
	t.Helper()
	shared.once.Do(func() {
		if shared.endpoint = os.Getenv(EndpointEnv); shared.endpoint != "" {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		shared.server, shared.err = dynamodblocal.Start(ctx, dynamodblocal.Options{})
		if shared.err == nil {
			shared.endpoint = shared.server.Endpoint()
		}
	})
	Require(t, "DynamoDB Local", shared.err)
	return shared.endpoint
}

// Client returns a DynamoDB client for endpoint with local credentials.
func Client(endpoint string) *dynamodb.Client {
	return dynamodb.New(dynamodb.Options{
		Region:       Region,
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("local", "local", ""),
	})
}

// StreamsClient returns a DynamoDB Streams client for endpoint.
func StreamsClient(endpoint string) *dynamodbstreams.Client {
	return dynamodbstreams.New(dynamodbstreams.Options{
		Region:       Region,
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("local", "local", ""),
	})
}

// DynamoDB returns a client, a fresh set of every table in schema.Tables() under
// a prefix no other test uses, and the endpoint (for config.Config). The
// tables are deleted when the test ends.
func DynamoDB(t testing.TB) (*dynamodb.Client, schema.Names, string) {
	t.Helper()
	endpoint := Endpoint(t)
	db := Client(endpoint)
	names := Names(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := tables.Create(ctx, db, names); err != nil {
		Require(t, "DynamoDB at "+endpoint, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := tables.Delete(ctx, db, names); err != nil {
			t.Logf("testenv: delete tables: %v", err)
		}
	})
	return db, names, endpoint
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// Names returns physical table names unique to this test, this process and
// this call, so tests can share one DynamoDB (even across packages) without
// seeing each other's items.
func Names(t testing.TB) schema.Names {
	name := unsafeChars.ReplaceAllString(t.Name(), "_")
	if len(name) > 60 {
		name = name[:60]
	}
	prefix := fmt.Sprintf("%s.%d.%d.", name, os.Getpid(), tableSets.Add(1))
	names := schema.Names{}
	for _, tb := range schema.Tables() {
		names[tb.Name] = prefix + tb.Name
	}
	return names
}

// Redis starts a real redis-server for this test and stops it when the test
// ends. Tests may Stop and Start it to simulate an outage; its URL does not
// change.
func Redis(t testing.TB) *redisserver.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := redisserver.Start(ctx)
	Require(t, "redis-server", err)
	t.Cleanup(func() { _ = srv.Close() })
	return srv
}

// Stack runs a whole local stack for an end-to-end test, on a free port,
// against the binary's DynamoDB Local (fresh tables for this test) and a
// real redis-server of its own, with the state directory in t.TempDir and
// fast retries so DLQ paths finish quickly. Fields set in opts win. The
// stack is stopped and its tables deleted when the test ends, and the test
// fails if a function touched anything its declarations do not grant it
// (shared/routes Uses, what the CDK stack grants): that call would be
// refused in AWS. The gateway checks every request against the OpenAPI
// document before its handler (stack.Options.SkipRequestValidation turns
// that off), so a test's request the document refuses answers 400.
func Stack(t testing.TB, opts stack.Options) *stack.Stack {
	t.Helper()
	if opts.DynamoDBEndpoint == "" {
		opts.DynamoDBEndpoint = Endpoint(t)
	}
	if opts.Tables == nil {
		opts.Tables = Names(t)
	}
	if opts.RedisURL == "" {
		opts.RedisURL = Redis(t).URL()
	}
	if opts.StateDir == "" {
		opts.StateDir = t.TempDir()
	}
	if opts.Log == nil {
		opts.Log = FailureLog(t)
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
		t.Fatalf("testenv: start the local stack: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("testenv: stop the local stack: %v", err)
		}
		for _, d := range access.Denied(access.Grants(), s.Access().Uses()) {
			t.Errorf("testenv: not granted in AWS: %s", d)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := tables.Delete(ctx, s.DB(), s.Tables()); err != nil {
			t.Logf("testenv: delete tables: %v", err)
		}
	})
	return s
}

// Main runs the tests and then stops the DynamoDB Local this binary
// started. Call it from TestMain where possible: on Linux the server dies
// with the test binary anyway, elsewhere it would be left running.
func Main(m *testing.M) {
	code := m.Run()
	if shared.server != nil {
		_ = shared.server.Close()
	}
	os.Exit(code)
}
