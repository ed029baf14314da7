// Package testenv gives integration tests real storage: DynamoDB Local (one
// per test binary, a fresh set of tables per test) and a real redis-server
// per test; package stacktest runs a whole local stack over them. Outside
// CI a missing dependency skips the test with the reason; with CI=true it
// fails it, so a pipeline can never pass by skipping (package ci owns that
// rule).
//
// testenv imports no feature and no handler: a feature's own tests use it
// without the go tool compiling the local stack again against that
// feature's test build.
package testenv

import (
	"context"
	"errors"
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

	"github.com/rallyhq/rally/infra/local/dynamodblocal"
	"github.com/rallyhq/rally/infra/local/redisserver"
	"github.com/rallyhq/rally/infra/local/tables"
	"github.com/rallyhq/rally/infra/local/testenv/ci"
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

// ClusterNodes is how many primaries RedisCluster starts: enough that
// boards under different hash tags land on different shards.
const ClusterNodes = 3

// RedisCluster starts a local Redis Cluster of ClusterNodes redis-servers
// for this test (cluster files in t.TempDir) and stops it when the test
// ends. Give a client its Addrs (or its URL with cluster mode on).
func RedisCluster(t testing.TB) *redisserver.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := redisserver.StartCluster(ctx, ClusterNodes, t.TempDir())
	if errors.Is(err, redisserver.ErrNotInstalled) {
		Require(t, "redis-server", err)
	}
	if err != nil {
		t.Fatalf("testenv: start a Redis Cluster: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
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
