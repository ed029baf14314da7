// Package app is what every Rally function starts from: it reads the
// configuration and builds the AWS and Redis clients, the clock, logger,
// metrics and the platform stores (idempotency records, cache generations,
// rate limits). It knows no feature: each feature's bind package
// (shared/<feature>/bind) turns Deps into that feature's handlers, so a
// Lambda links only the feature it serves. A Lambda's main is
//
//	deps := app.MustLoad(ctx)
//	lambda.Start(deps.HTTP(bind.Reactions, routes.FavoriteGame))
//
// and the local stack binds every feature (shared/app/all) in one process.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	smtypes "github.com/aws/aws-sdk-go-v2/service/secretsmanager/types"
	"github.com/aws/smithy-go/middleware"
	"github.com/redis/go-redis/v9"

	"github.com/rallyhq/rally/shared/accounts"
	"github.com/rallyhq/rally/shared/api"
	"github.com/rallyhq/rally/shared/cache"
	"github.com/rallyhq/rally/shared/cachegen"
	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/config"
	"github.com/rallyhq/rally/shared/idempotency"
	"github.com/rallyhq/rally/shared/obs"
	"github.com/rallyhq/rally/shared/ratelimit"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
)

// Deps are the dependencies every handler is built from.
type Deps struct {
	Config  config.Config
	Log     *slog.Logger
	Metrics *obs.Metrics
	Clock   clock.Clock
	DB      *dynamodb.Client
	Redis   redis.UniversalClient
	Cursors api.Cursors
	// AWS is the SDK configuration the clients were built from.
	AWS aws.Config

	// limiter and accounts keep in-process state across invocations (the
	// fallback limits, the first-seen cache), so they are built once.
	limiter  *ratelimit.Limiter
	accounts *accounts.Store
}

// Options adjusts New for the local stack and tests.
type Options struct {
	// Clock replaces the wall clock.
	Clock clock.Clock
	// LogOutput replaces stdout for logs and metrics.
	LogOutput io.Writer
	// RedisHooks are added to the Redis client (e.g. command counting).
	RedisHooks []redis.Hook
	// Function names the function in logs and metrics.
	Function string
	// APIOptions are added to every AWS client's middleware stack (e.g.
	// recording what each call touches, in the local stack).
	APIOptions []func(*middleware.Stack) error
}

// MustLoad builds Deps from the environment or exits with a clear message;
// it is what a Lambda's main calls once per cold start.
func MustLoad(ctx context.Context) *Deps {
	cfg, err := config.FromEnv()
	if err == nil {
		var d *Deps
		if d, err = New(ctx, cfg, Options{Function: os.Getenv("AWS_LAMBDA_FUNCTION_NAME")}); err == nil {
			return d
		}
	}
	fmt.Fprintln(os.Stderr, "rally: cannot start:", err)
	os.Exit(1)
	return nil
}

// New builds Deps from cfg.
func New(ctx context.Context, cfg config.Config, opts Options) (*Deps, error) {
	out := opts.LogOutput
	if out == nil {
		out = os.Stdout
	}
	logKey, err := logKey(cfg)
	if err != nil {
		return nil, err
	}
	d := &Deps{
		Config:  cfg,
		Log:     obs.NewLogger(out, cfg.LogLevel, logKey),
		Metrics: obs.NewMetrics(out, opts.Function),
		Clock:   opts.Clock,
	}
	if d.Clock == nil {
		d.Clock = clock.System{}
	}
	awsCfg, err := awsConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	awsCfg.APIOptions = append(awsCfg.APIOptions, opts.APIOptions...)
	d.AWS = awsCfg
	d.DB = dynamodb.NewFromConfig(awsCfg, func(o *dynamodb.Options) {
		// Redis-less leaderboard reads query every index shard at once;
		// keep enough idle connections that they are reused, not redialled.
		o.HTTPClient = awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
			tr.MaxIdleConnsPerHost = 64
		})
		if cfg.DynamoDBEndpoint != "" {
			o.BaseEndpoint = aws.String(cfg.DynamoDBEndpoint)
		}
	})
	hooks := opts.RedisHooks
	if cfg.Tracing {
		hooks = append(hooks, obs.RedisTracing{})
	}
	if d.Redis, err = cache.New(cache.Options{
		URL: cfg.RedisURL, Cluster: cfg.RedisCluster, Timeout: cfg.RedisTimeout, Hooks: hooks,
	}); err != nil {
		return nil, err
	}
	keys, err := cursorKeys(ctx, cfg, awsCfg)
	if err != nil {
		return nil, err
	}
	d.limiter = ratelimit.New(d.Redis)
	d.accounts = &accounts.Store{DB: d.DB, Table: d.Table(schema.Accounts), Redis: d.Redis, Clock: d.Clock}
	d.Cursors = api.Cursors{Keys: keys, Clock: d.Clock, TTL: cfg.CursorTTL}
	if !cfg.Local() && len(cfg.ServiceRoles) == 0 && servesServices(cfg.Function) {
		return nil, fmt.Errorf("app: %s serves service routes, but RALLY_SERVICE_ROLES (the roles allowed to call them) is not set", cfg.Function)
	}
	return d, nil
}

func awsConfig(ctx context.Context, cfg config.Config) (aws.Config, error) {
	opts := []func(*awsconfig.LoadOptions) error{awsconfig.WithRegion(cfg.Region)}
	if cfg.DynamoDBEndpoint != "" && os.Getenv("AWS_ACCESS_KEY_ID") == "" {
		// DynamoDB Local accepts any credentials; do not go looking for real ones.
		opts = append(opts, awsconfig.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("local", "local", "")))
	}
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return aws.Config{}, fmt.Errorf("app: load aws config: %w", err)
	}
	if cfg.Tracing {
		obs.TraceAWS(&awsCfg)
	}
	return awsCfg, nil
}

// LocalLogKey keys the local stack's log hashes when RALLY_LOG_KEY is
// unset.
const LocalLogKey = "rally-local-log-key"

// logKey keys the user hashes in logs: the deployment's RALLY_LOG_KEY, or
// the local one; outside the local stage a function refuses to start
// without it rather than log hashes anyone could recompute.
func logKey(cfg config.Config) ([]byte, error) {
	switch {
	case cfg.LogKey != "":
		return []byte(cfg.LogKey), nil
	case cfg.Local():
		return []byte(LocalLogKey), nil
	}
	return nil, errors.New("app: RALLY_LOG_KEY (the key of the user hashes in logs) is not set")
}

// localCursorKey signs the local stack's cursors when RALLY_CURSOR_KEY is
// unset.
const localCursorKey = "rally-local-cursor-key"

// cursorKeys are the keys that sign and verify pagination cursors: the
// cursor secret's AWSCURRENT and AWSPREVIOUS versions in AWS, a fixed key
// locally. A function declared to page (routes.Uses.Secrets) refuses to
// start without the secret outside the local stage; the others never sign
// cursors, and a Cursors without keys refuses to.
func cursorKeys(ctx context.Context, cfg config.Config, awsCfg aws.Config) (*api.Keyring, error) {
	if cfg.SecretARN == "" {
		switch {
		case cfg.CursorKey != "":
			return api.NewKeyring([]byte(cfg.CursorKey), nil), nil
		case cfg.Local():
			return api.NewKeyring([]byte(localCursorKey), nil), nil
		}
		if uses, ok := routes.UsesOf(cfg.Function); ok && uses.Secrets {
			return nil, fmt.Errorf("app: %s signs pagination cursors, but RALLY_SECRET_ARN (the cursor secret) is not set", cfg.Function)
		}
		return nil, nil
	}
	client := secretsmanager.NewFromConfig(awsCfg)
	return api.LoadKeyring(ctx, func(ctx context.Context) ([]byte, []byte, error) {
		return secretVersions(ctx, client, cfg.SecretARN)
	})
}

// servesServices reports whether function serves a service route.
func servesServices(function string) bool {
	for _, r := range routes.All() {
		if r.Function == function && r.Auth == routes.Service {
			return true
		}
	}
	return false
}

// SecretReader is the part of Secrets Manager the cursor keys are read
// with.
type SecretReader interface {
	GetSecretValue(context.Context, *secretsmanager.GetSecretValueInput, ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error)
}

// secretVersions reads the AWSCURRENT and AWSPREVIOUS versions of the
// secret arn; previous is nil when the secret was never rotated.
func secretVersions(ctx context.Context, sm SecretReader, arn string) (current, previous []byte, err error) {
	read := func(stage string) ([]byte, error) {
		out, err := sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(arn), VersionStage: aws.String(stage)})
		if err != nil {
			return nil, err
		}
		if out.SecretString == nil || *out.SecretString == "" {
			return nil, fmt.Errorf("app: secret %s (%s) is empty", arn, stage)
		}
		return []byte(*out.SecretString), nil
	}
	if current, err = read("AWSCURRENT"); err != nil {
		return nil, nil, fmt.Errorf("app: read secret %s: %w", arn, err)
	}
	previous, err = read("AWSPREVIOUS")
	var notFound *smtypes.ResourceNotFoundException
	if errors.As(err, &notFound) {
		return current, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("app: read secret %s (AWSPREVIOUS): %w", arn, err)
	}
	return current, previous, nil
}

// Table is the physical name of table t.
func (d *Deps) Table(t schema.Table) string { return d.Config.Tables.Of(t) }

// Idempotency is the store of Idempotency-Key records.
func (d *Deps) Idempotency() *idempotency.Store {
	return &idempotency.Store{DB: d.DB, Table: d.Table(schema.Idempotency), Clock: d.Clock}
}

// Generations tracks whether Redis still mirrors DynamoDB for scope.
func (d *Deps) Generations(scope string) *cachegen.Tracker {
	return &cachegen.Tracker{
		DB: d.DB, Table: d.Table(schema.Counters), Redis: d.Redis, Scope: scope,
		CheckEvery: d.Config.CacheCheckEvery,
	}
}

// Streams reads the tables' DynamoDB streams.
func (d *Deps) Streams() *dynamodbstreams.Client {
	return dynamodbstreams.NewFromConfig(d.AWS, func(o *dynamodbstreams.Options) {
		if d.Config.DynamoDBEndpoint != "" {
			o.BaseEndpoint = aws.String(d.Config.DynamoDBEndpoint)
		}
	})
}

// Lambda invokes other functions.
func (d *Deps) Lambda() *lambda.Client {
	return lambda.NewFromConfig(d.AWS, func(o *lambda.Options) {
		if d.Config.LambdaEndpoint != "" {
			o.BaseEndpoint = aws.String(d.Config.LambdaEndpoint)
		}
	})
}

// Limiter checks request budgets (in Redis, in process while Redis fails).
func (d *Deps) Limiter() *ratelimit.Limiter { return d.limiter }

// Accounts is the store of first-seen times (the young-account controls).
func (d *Deps) Accounts() *accounts.Store { return d.accounts }
