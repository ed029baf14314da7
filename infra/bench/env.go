package main

import (
	"context"
	"fmt"

	"github.com/rallyhq/rally/infra/local/dynamodblocal"
	"github.com/rallyhq/rally/infra/local/redisserver"
)

// Env is what every bench shares: one DynamoDB Local and one redis-server
// for the whole run. Benches that need the local stack start it over these
// (stack.Options.DynamoDBEndpoint / RedisURL) with a table prefix of their
// own.
type Env struct {
	DynamoDB *dynamodblocal.Server
	Redis    *redisserver.Server
}

// StartEnv starts DynamoDB Local and redis-server.
func StartEnv(ctx context.Context) (*Env, error) {
	ddb, err := dynamodblocal.Start(ctx, dynamodblocal.Options{JVM: dynamodblocal.Steady})
	if err != nil {
		return nil, fmt.Errorf("DynamoDB Local: %w", err)
	}
	rs, err := redisserver.Start(ctx)
	if err != nil {
		ddb.Close()
		return nil, fmt.Errorf("redis-server: %w", err)
	}
	return &Env{DynamoDB: ddb, Redis: rs}, nil
}

// Close stops both.
func (e *Env) Close() {
	e.Redis.Close()
	e.DynamoDB.Close()
}
