package main

import (
	"context"
	"errors"
	"testing"

	"github.com/rallyhq/rally/infra/local/dynamodblocal"
	"github.com/rallyhq/rally/infra/local/redisserver"
	"github.com/rallyhq/rally/infra/local/testenv"
)

// testEnv starts what a section runs on (DynamoDB Local and
// redis-server) for a test; a missing one skips the test, and fails it
// in CI.
func testEnv(t *testing.T) *Env {
	t.Helper()
	env, err := StartEnv(context.Background())
	if errors.Is(err, dynamodblocal.ErrNoJar) || errors.Is(err, dynamodblocal.ErrNoJava) || errors.Is(err, redisserver.ErrNotInstalled) {
		testenv.Require(t, "DynamoDB Local and redis-server", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Close)
	return env
}
