// Package config reads a function's settings from its environment. The CDK
// stack sets these variables on every Lambda; the local stack sets them for
// its in-process handlers.
package config

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/rallyhq/rally/shared/schema"
)

// Config is everything a Rally function needs to know about where it runs.
type Config struct {
	// Stage names the deployment ("local", "prod", ...).
	Stage string
	// Region is the AWS region.
	Region string
	// DynamoDBEndpoint overrides the DynamoDB endpoint (DynamoDB Local).
	DynamoDBEndpoint string
	// Tables maps logical table names to physical ones.
	Tables schema.Names
	// RedisURL locates Redis/Valkey: redis://host:port or rediss:// for TLS.
	// Empty means no cache: every read is served from DynamoDB, degraded.
	RedisURL string
	// RedisCluster selects cluster semantics (ElastiCache Serverless).
	RedisCluster bool
	// RedisTimeout bounds each Redis command so a sick cache stays off the
	// hot path.
	RedisTimeout time.Duration
	// SecretARN names the Secrets Manager secret holding the cursor key.
	SecretARN string
	// CursorKey signs pagination cursors when no SecretARN is set (local).
	CursorKey string
	// Tracing turns on X-Ray instrumentation.
	Tracing bool
	// LogLevel is debug, info, warn or error.
	LogLevel string
}

// FromEnv reads the configuration from the process environment.
func FromEnv() (Config, error) {
	c := Config{
		Stage:            env("RALLY_STAGE", "local"),
		Region:           env("AWS_REGION", "us-east-1"),
		DynamoDBEndpoint: os.Getenv("RALLY_DYNAMODB_ENDPOINT"),
		Tables:           schema.NamesFromEnv(os.Getenv("RALLY_TABLE_PREFIX")),
		RedisURL:         os.Getenv("RALLY_REDIS_URL"),
		SecretARN:        os.Getenv("RALLY_SECRET_ARN"),
		CursorKey:        os.Getenv("RALLY_CURSOR_KEY"),
		LogLevel:         env("RALLY_LOG_LEVEL", "info"),
	}
	var err error
	if c.RedisCluster, err = boolEnv("RALLY_REDIS_CLUSTER", false); err != nil {
		return c, err
	}
	// Lambda sets AWS_LAMBDA_FUNCTION_NAME; tracing is on there by default.
	if c.Tracing, err = boolEnv("RALLY_TRACING", os.Getenv("AWS_LAMBDA_FUNCTION_NAME") != ""); err != nil {
		return c, err
	}
	if c.RedisTimeout, err = durationEnv("RALLY_REDIS_TIMEOUT", 250*time.Millisecond); err != nil {
		return c, err
	}
	if c.SecretARN == "" && c.CursorKey == "" && c.Stage != "local" {
		return c, fmt.Errorf("config: RALLY_SECRET_ARN or RALLY_CURSOR_KEY must be set outside the local stage")
	}
	return c, nil
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func boolEnv(name string, def bool) (bool, error) {
	v := strings.TrimSpace(os.Getenv(name))
	if v == "" {
		return def, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("config: %s=%q is not a boolean", name, v)
	}
	return b, nil
}

func durationEnv(name string, def time.Duration) (time.Duration, error) {
	v := strings.TrimSpace(os.Getenv(name))
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("config: %s=%q is not a duration", name, v)
	}
	return d, nil
}
