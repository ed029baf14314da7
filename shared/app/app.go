// Package app wires a Rally function: it reads configuration, builds the AWS
// and Redis clients, the clock, logger and metrics, and binds each declared
// route and processor (shared/routes) to its handler. A Lambda's main calls
// MustLoad and lambda.Start(deps.HTTP(route)); the local stack builds the
// same Deps and serves every handler in one process.
package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sync"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/redis/go-redis/v9"

	"github.com/rallyhq/rally/shared/api"
	"github.com/rallyhq/rally/shared/cache"
	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/config"
	"github.com/rallyhq/rally/shared/obs"
	"github.com/rallyhq/rally/shared/privacy"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/streams"
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

	once     sync.Once
	http     map[string]api.Endpoint
	handlers map[string]streams.BatchFunc
	erasures *privacy.Job
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
	d := &Deps{
		Config:  cfg,
		Log:     obs.NewLogger(out, cfg.LogLevel),
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
	if d.Cursors.Key, err = cursorKey(ctx, cfg, awsCfg); err != nil {
		return nil, err
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

func cursorKey(ctx context.Context, cfg config.Config, awsCfg aws.Config) ([]byte, error) {
	if cfg.SecretARN == "" {
		switch {
		case cfg.CursorKey != "":
			return []byte(cfg.CursorKey), nil
		case cfg.Stage == "local":
			return []byte("rally-local-cursor-key"), nil
		}
		// Functions that page through lists get RALLY_SECRET_ARN; the
		// others never sign cursors, and an unkeyed Cursors refuses to.
		return nil, nil
	}
	out, err := secretsmanager.NewFromConfig(awsCfg).GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(cfg.SecretARN)})
	if err != nil {
		return nil, fmt.Errorf("app: read secret %s: %w", cfg.SecretARN, err)
	}
	if out.SecretString == nil || *out.SecretString == "" {
		return nil, fmt.Errorf("app: secret %s is empty", cfg.SecretARN)
	}
	return []byte(*out.SecretString), nil
}

// HTTP returns the Lambda handler for route.
func (d *Deps) HTTP(r routes.Route) api.Handler {
	e, ok := d.Endpoints()[r.Function]
	if !ok {
		panic("app: no handler bound for route " + r.Key())
	}
	serve := api.Serve(d.Log, e)
	return func(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		if ev.RequestContext.RequestID != "" {
			ctx = obs.WithRequestID(ctx, ev.RequestContext.RequestID)
		}
		return serve(ctx, ev)
	}
}

// Stream returns the Lambda handler for processor p.
func (d *Deps) Stream(p routes.Processor) streams.Handler {
	fn, ok := d.Processors()[p.Function]
	if !ok {
		panic("app: no handler bound for processor " + p.Function)
	}
	return streams.Serve(d.Log, fn)
}

// Endpoints returns every HTTP endpoint by function name.
func (d *Deps) Endpoints() map[string]api.Endpoint {
	d.bind()
	return d.http
}

// ErasureJob returns the job behind the erasure processor, to resume or
// inspect erasures outside a stream (tools, tests).
func (d *Deps) ErasureJob() *privacy.Job {
	d.bind()
	return d.erasures
}

// Processors returns every stream processor by function name.
func (d *Deps) Processors() map[string]streams.BatchFunc {
	d.bind()
	return d.handlers
}

func (d *Deps) bind() {
	d.once.Do(func() {
		d.http = map[string]api.Endpoint{}
		d.handlers = map[string]streams.BatchFunc{}
		bindReactions(d)
		bindLeaderboards(d)
		bindStreaks(d)
		bindAnalytics(d)
		bindPrivacy(d)
	})
}
