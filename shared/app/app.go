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
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/smithy-go/middleware"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

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
	"github.com/rallyhq/rally/shared/secrets"
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
	// keys are the keys read from the secrets, by routes.Secret name.
	keys map[string]*secrets.Ring
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
	awsCfg, err := awsConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	awsCfg.APIOptions = append(awsCfg.APIOptions, opts.APIOptions...)
	keys, err := loadKeys(ctx, cfg, awsCfg)
	if err != nil {
		return nil, err
	}
	logKey, _ := keys[routes.LogKey.Name].Keys()
	d := &Deps{
		Config:  cfg,
		Log:     obs.NewLogger(out, cfg.LogLevel, logKey),
		Metrics: obs.NewMetrics(out, opts.Function),
		Clock:   opts.Clock,
		AWS:     awsCfg,
		keys:    keys,
	}
	if d.Clock == nil {
		d.Clock = clock.System{}
	}
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
	d.limiter = ratelimit.New(d.Redis)
	d.accounts = &accounts.Store{DB: d.DB, Table: d.Table(schema.Accounts), Redis: d.Redis, Clock: d.Clock}
	d.Cursors = api.Cursors{Keys: d.Key(routes.CursorKey), Clock: d.Clock, TTL: cfg.CursorTTL}
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

// loadKeys reads the key of each secret (routes.Secrets) the function is
// given, all at once: from Secrets Manager when it is given the secret's
// ARN, as is when given the key itself, the local key on the local stage.
// Outside the local stage a function refuses to start without a secret it
// reads (the log key, which every function reads, and those its
// declarations name) rather than log hashes anyone could recompute or
// sign cursors anyone could forge; a secret it does not read stays unread.
func loadKeys(ctx context.Context, cfg config.Config, awsCfg aws.Config) (map[string]*secrets.Ring, error) {
	uses, _ := routes.UsesOf(cfg.Function)
	keys := map[string]*secrets.Ring{}
	stored := map[routes.Secret]string{} // secret → its ARN
	for _, s := range routes.Secrets() {
		arn, key := cfg.Secret(s)
		switch {
		case arn != "":
			stored[s] = arn
		case key != "":
			keys[s.Name] = secrets.Fixed([]byte(key), nil)
		case cfg.Local():
			keys[s.Name] = secrets.Fixed([]byte(s.Local), nil)
		case uses.Reads(s):
			function := cfg.Function
			if function == "" {
				function = "a deployed function"
			}
			return nil, fmt.Errorf("app: %s reads the key that %s, but %s (its secret's ARN) is not set", function, s.Purpose, s.ARNVar)
		}
	}
	if len(stored) == 0 {
		return keys, nil
	}
	sm := secretsmanager.NewFromConfig(awsCfg)
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	for s, arn := range stored {
		g.Go(func() error {
			ring, err := secrets.Load(gctx, secrets.Versions(sm, arn, s.Rotates), nil)
			if err != nil {
				return fmt.Errorf("app: the key that %s (%s): %w", s.Purpose, s.ARNVar, err)
			}
			mu.Lock()
			defer mu.Unlock()
			keys[s.Name] = ring
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return keys, nil
}

// Key is the key of secret s, nil when the function reads none (it is
// not among the secrets it declares); a function that declares s
// refuses to start without it.
func (d *Deps) Key(s routes.Secret) *secrets.Ring { return d.keys[s.Name] }

// servesServices reports whether function serves a service route.
func servesServices(function string) bool {
	for _, r := range routes.All() {
		if r.Function == function && r.Auth == routes.Service {
			return true
		}
	}
	return false
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
