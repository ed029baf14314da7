// Package config reads a function's settings from its environment. The CDK
// stack sets these variables on every Lambda; the local stack sets them for
// its in-process handlers.
package config

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
)

// Config is everything a Rally function needs to know about where it runs.
type Config struct {
	// Stage names the deployment ("local", "prod", ...).
	Stage string
	// Function is the declared name of the function this process serves
	// (favorite-game), which says what it must be configured with; empty
	// for a process serving several (the local stack) or none (tests).
	Function string
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
	// SecretARN names the Secrets Manager secret holding the cursor key
	// (routes.CursorKey).
	SecretARN string
	// CursorKey signs pagination cursors when no SecretARN is set (local).
	CursorKey string
	// CursorTTL is how long a pagination cursor stays valid.
	CursorTTL time.Duration
	// LogKeyARN names the secret holding the key of the hashes logs name
	// users by (routes.LogKey, obs.UserHash); LogKey is that key itself,
	// used when no LogKeyARN is set (local, tests).
	LogKeyARN, LogKey string
	// ErasureKeyARN names the secret holding the key of the hashes
	// erasure records are kept under (routes.ErasureKey); ErasureKey is
	// that key itself, used when no ErasureKeyARN is set (local, tests).
	ErasureKeyARN, ErasureKey string
	// ServiceRoles are the IAM principals (role ARNs, matched by their
	// sessions, or user ARNs) allowed to call the function's service
	// routes: the principals of the roles its routes admit
	// (RALLY_SERVICE_ROLES).
	ServiceRoles []string
	// Principals, where one configuration serves every function (the
	// local stack), says who acts as each role: a service route then
	// admits its roles' principals instead of ServiceRoles.
	Principals routes.Principals
	// Tracing turns on X-Ray instrumentation.
	Tracing bool
	// LogLevel is debug, info, warn or error.
	LogLevel string
	// Budgets override the per-minute budgets declared with the routes
	// (routes.Budget), by budget name; 0 turns a budget off.
	// RALLY_BUDGETS="favorite=30,read=600".
	Budgets map[string]int
	// YoungAccountAge is how long after Rally first sees a player the
	// account counts as young: half budgets, and its reactions stay out
	// of trending. 0 turns the young-account controls off.
	YoungAccountAge time.Duration
	// CacheCheckEvery is how long a handler trusts its last check of the
	// cache generation before checking again.
	CacheCheckEvery time.Duration
	// RankEstimateFrom is the member count from which a board's rank read
	// without Redis is estimated from its score histogram instead of
	// counted; RankExactTop the rank down to which it is counted all the
	// same (cheap there).
	RankEstimateFrom, RankExactTop int64
	// PartitionAt is the member count past which a leaderboard period
	// defined without "partitions" is converted, in Redis, from one
	// sorted set to score-range partitions that spread over a cluster.
	PartitionAt int64
	// SnapshotEvery is how often processors store top-N snapshots for
	// reads while Redis is down.
	SnapshotEvery time.Duration
	// ReconcileEvery is how often the job runner starts a reconcile of
	// everything on its own; 0 never.
	ReconcileEvery time.Duration
	// ReconcileSettle is how long a reconcile waits before it confirms a
	// count that is off its edges (it may be a change in flight).
	ReconcileSettle time.Duration
	// FirehoseStream is the analytics delivery stream the shipper sends
	// events to (in AWS).
	FirehoseStream string
	// AnalyticsDir receives the analytics export as Parquet files when no
	// FirehoseStream is set (the local stack: .local/analytics).
	AnalyticsDir string
	// ExportBucket is the S3 bucket export documents are written to and
	// linked from (in AWS).
	ExportBucket string
	// ExportsDir holds export documents as files when no ExportBucket is
	// set (the local stack: its state directory, documents under
	// exports/), and ExportLinks is the URL their links start with (the
	// local stack's, which serves them under /_local/).
	ExportsDir, ExportLinks string
	// Functions maps deployed function names to declared ones (e.g.
	// Rally-prod-CounterProcessor… → counter-processor), for functions
	// that act on other functions (the dlq-archiver); empty means the
	// deployed names are the declared ones (the local stack).
	Functions map[string]string
	// LambdaEndpoint overrides the Lambda endpoint functions invoke other
	// functions through (the local stack serves Lambda's Invoke API).
	LambdaEndpoint string
}

// Secret is where the function finds the key of secret s: the secret's
// ARN (in AWS), or the key itself (local, tests); both empty when it was
// given neither.
func (c Config) Secret(s routes.Secret) (arn, key string) {
	switch s.Name {
	case routes.CursorKey.Name:
		return c.SecretARN, c.CursorKey
	case routes.LogKey.Name:
		return c.LogKeyARN, c.LogKey
	case routes.ErasureKey.Name:
		return c.ErasureKeyARN, c.ErasureKey
	}
	return "", ""
}

// Budget is b's per-minute budget: b's own unless overridden.
func (c Config) Budget(b routes.Budget) int {
	if n, ok := c.Budgets[b.Name]; ok {
		return n
	}
	return b.PerMinute
}

// budgets parses "name=n,name=n" for budgets declared in routes.
func budgets(v string) (map[string]int, error) {
	out := map[string]int{}
	for _, part := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' }) {
		name, value, _ := strings.Cut(part, "=")
		n, err := strconv.Atoi(value)
		known := slices.ContainsFunc(routes.AllBudgets(), func(b routes.Budget) bool { return b.Name == name })
		if err != nil || n < 0 || !known {
			return nil, fmt.Errorf("config: RALLY_BUDGETS entry %q is not <budget>=<requests a minute> with a budget of %s", part, budgetNames())
		}
		out[name] = n
	}
	return out, nil
}

func budgetNames() string {
	var names []string
	for _, b := range routes.AllBudgets() {
		names = append(names, b.Name)
	}
	return strings.Join(names, ", ")
}

// LocalStage is the stage of the local stack (`make dev`) and the default
// when RALLY_STAGE is unset: the one stage where a function may start
// without the secrets a deployment must give it, using local stand-ins.
const LocalStage = "local"

// Local reports whether c is the local stack's configuration.
func (c Config) Local() bool { return c.Stage == LocalStage }

// ServiceRolesOf is the allow-list of service route r: the function's own
// (ServiceRoles) or, given Principals, the principals of the roles r
// admits.
func (c Config) ServiceRolesOf(r routes.Route) []string {
	if c.Principals != nil {
		return c.Principals.Of(r.Admitted())
	}
	return c.ServiceRoles
}

// FromEnv reads the configuration from the process environment.
func FromEnv() (Config, error) {
	c := Config{
		Stage:            env("RALLY_STAGE", LocalStage),
		Function:         os.Getenv("RALLY_FUNCTION"),
		Region:           env("AWS_REGION", "us-east-1"),
		DynamoDBEndpoint: os.Getenv("RALLY_DYNAMODB_ENDPOINT"),
		Tables:           schema.NamesFromEnv(os.Getenv("RALLY_TABLE_PREFIX")),
		RedisURL:         os.Getenv("RALLY_REDIS_URL"),
		SecretARN:        os.Getenv(routes.CursorKey.ARNVar),
		CursorKey:        os.Getenv(routes.CursorKey.KeyVar),
		LogKeyARN:        os.Getenv(routes.LogKey.ARNVar),
		LogKey:           os.Getenv(routes.LogKey.KeyVar),
		ErasureKeyARN:    os.Getenv(routes.ErasureKey.ARNVar),
		ErasureKey:       os.Getenv(routes.ErasureKey.KeyVar),
		LogLevel:         env("RALLY_LOG_LEVEL", "info"),
		FirehoseStream:   os.Getenv("RALLY_FIREHOSE_STREAM"),
		AnalyticsDir:     os.Getenv("RALLY_ANALYTICS_DIR"),
		ExportBucket:     os.Getenv("RALLY_EXPORT_BUCKET"),
		ExportsDir:       os.Getenv("RALLY_EXPORTS_DIR"),
		ExportLinks:      os.Getenv("RALLY_EXPORT_LINKS"),
		Functions:        map[string]string{},
		LambdaEndpoint:   os.Getenv("RALLY_LAMBDA_ENDPOINT"),
	}
	for _, arn := range strings.Split(os.Getenv("RALLY_SERVICE_ROLES"), ",") {
		if arn = strings.TrimSpace(arn); arn != "" {
			c.ServiceRoles = append(c.ServiceRoles, arn)
		}
	}
	for _, fn := range routes.Functions() {
		if deployed := os.Getenv(routes.FunctionEnvVar(fn)); deployed != "" {
			c.Functions[deployed] = fn
		}
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
	if c.CursorTTL, err = durationEnv("RALLY_CURSOR_TTL", 24*time.Hour); err != nil {
		return c, err
	}
	if c.CursorTTL <= 0 {
		return c, fmt.Errorf("config: RALLY_CURSOR_TTL=%s must be positive", c.CursorTTL)
	}
	if c.CacheCheckEvery, err = durationEnv("RALLY_CACHE_CHECK_EVERY", time.Second); err != nil {
		return c, err
	}
	if c.SnapshotEvery, err = durationEnv("RALLY_SNAPSHOT_EVERY", 10*time.Second); err != nil {
		return c, err
	}
	if c.ReconcileEvery, err = durationEnv("RALLY_RECONCILE_EVERY", 24*time.Hour); err != nil {
		return c, err
	}
	if c.ReconcileSettle, err = durationEnv("RALLY_RECONCILE_SETTLE", 5*time.Minute); err != nil {
		return c, err
	}
	if c.Budgets, err = budgets(os.Getenv("RALLY_BUDGETS")); err != nil {
		return c, err
	}
	if c.YoungAccountAge, err = durationEnv("RALLY_YOUNG_ACCOUNT_AGE", 24*time.Hour); err != nil {
		return c, err
	}
	if c.RankEstimateFrom, err = intEnv("RALLY_RANK_ESTIMATE_FROM", 10_000); err != nil {
		return c, err
	}
	if c.RankExactTop, err = intEnv("RALLY_RANK_EXACT_TOP", 1_000); err != nil {
		return c, err
	}
	if c.PartitionAt, err = intEnv("RALLY_PARTITION_AT", 5_000_000); err != nil {
		return c, err
	}
	if c.PartitionAt < 1 {
		return c, fmt.Errorf("config: RALLY_PARTITION_AT=%d must be positive", c.PartitionAt)
	}
	if err := tablesNamed(c); err != nil {
		return c, err
	}
	if uses, ok := routes.UsesOf(c.Function); ok && uses.Documents != 0 && !c.Local() && c.ExportBucket == "" && c.ExportsDir == "" {
		return c, fmt.Errorf("config: %s uses export documents, but RALLY_EXPORT_BUCKET (the exports bucket) is not set", c.Function)
	}
	return c, nil
}

// tablesNamed checks that a deployed function is told the physical name of
// every table it uses, and of every table whose stream it reads. Without
// one it would fall back to RALLY_TABLE_PREFIX + the logical name, the
// local stack's naming, and fail on its first call to that table with an
// error that does not name the variable. The local stage has the fallback.
func tablesNamed(c Config) error {
	if c.Local() || c.Function == "" {
		return nil
	}
	uses, ok := routes.UsesOf(c.Function)
	if !ok {
		return nil
	}
	tables := append(uses.Tables(), uses.Streams...)
	for _, p := range routes.Processors() {
		if p.Function == c.Function {
			tables = append(tables, p.Source)
		}
	}
	for _, t := range tables {
		if os.Getenv(t.EnvVar()) == "" {
			return fmt.Errorf("config: %s uses the %s table, but %s (its physical name) is not set", c.Function, t.Name, t.EnvVar())
		}
	}
	return nil
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

func intEnv(name string, def int64) (int64, error) {
	v := strings.TrimSpace(os.Getenv(name))
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("config: %s=%q is not a non-negative integer", name, v)
	}
	return n, nil
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
