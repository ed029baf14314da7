// Package stack is Rally's local stack as a library: DynamoDB Local (or a
// given endpoint), Redis (embedded miniredis or a given URL), the tables
// from shared/schema, the real handlers from shared/app behind a local API
// Gateway (JWT and SigV4 authorizers), and a poller per stream processor.
// `go run ./infra/local` runs it for development; stacktest.Start runs it in
// end-to-end tests.
package stack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/alicebob/miniredis/v2"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/smithy-go/middleware"
	"github.com/redis/go-redis/v9"

	"github.com/rallyhq/rally/infra/local/access"
	"github.com/rallyhq/rally/infra/local/authorizer"
	"github.com/rallyhq/rally/infra/local/awsapi"
	"github.com/rallyhq/rally/infra/local/binaries"
	"github.com/rallyhq/rally/infra/local/docs"
	"github.com/rallyhq/rally/infra/local/dynamodblocal"
	"github.com/rallyhq/rally/infra/local/gateway"
	"github.com/rallyhq/rally/infra/local/poller"
	"github.com/rallyhq/rally/infra/local/runtimeapi"
	"github.com/rallyhq/rally/infra/local/tables"
	"github.com/rallyhq/rally/infra/local/template"
	"github.com/rallyhq/rally/shared/api"
	"github.com/rallyhq/rally/shared/app"
	"github.com/rallyhq/rally/shared/app/all"
	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/config"
	"github.com/rallyhq/rally/shared/deadletters"
	dlqbind "github.com/rallyhq/rally/shared/deadletters/bind"
	"github.com/rallyhq/rally/shared/exports"
	"github.com/rallyhq/rally/shared/exports/objects"
	"github.com/rallyhq/rally/shared/obs"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
	"github.com/rallyhq/rally/shared/streamread"
	"github.com/rallyhq/rally/shared/streams"
)

// Local credentials, audience and region. Two local users sign service
// routes: rallylocal as the operator (every service route) and
// rallyserver as the game server (the game routes).
const (
	AccessKeyEnv     = "RALLY_LOCAL_ACCESS_KEY_ID"
	SecretKeyEnv     = "RALLY_LOCAL_SECRET_ACCESS_KEY"
	DefaultAccessKey = "rallylocal"
	DefaultSecretKey = "rallylocalsecret"

	ServerAccessKeyEnv     = "RALLY_LOCAL_SERVER_ACCESS_KEY_ID"
	ServerSecretKeyEnv     = "RALLY_LOCAL_SERVER_SECRET_ACCESS_KEY"
	DefaultServerAccessKey = "rallyserver"
	DefaultServerSecretKey = "rallyserversecret"

	Audience = "rally-local"
	Region   = authorizer.Region
)

// The local users, by the role each acts as.
var (
	OperatorUser   = authorizer.UserARN("rallylocal")
	GameServerUser = authorizer.UserARN("rallyserver")
)

// Local service roles, as a deployment's rally-<stage>-game-server and
// rally-<stage>-operator. Sessions of them come from
// POST /_local/assume-role (or Stack.AssumeRole).
const (
	GameServerRole = "arn:aws:iam::" + authorizer.AccountID + ":role/rally-local-game-server"
	OperatorRole   = "arn:aws:iam::" + authorizer.AccountID + ":role/rally-local-operator"
)

// DefaultPrincipals says who acts as each role locally: the game server is
// the user rallyserver and the role rally-local-game-server, the operator
// the user rallylocal (whose keys sign `curl --aws-sigv4` and the redrive
// CLI) and the role rally-local-operator. A service route admits the
// principals of the roles it declares, as a deployment's functions do.
func DefaultPrincipals() routes.Principals {
	return routes.Principals{
		routes.GameServer: {GameServerUser, GameServerRole},
		routes.Operator:   {OperatorUser, OperatorRole},
	}
}

// Options configures Start. The zero value is `make dev`'s defaults except
// for the port (0 picks a free one).
type Options struct {
	// Port for the gateway on localhost; 0 picks a free one.
	Port int
	// DynamoDBEndpoint uses a running DynamoDB instead of starting
	// DynamoDB Local.
	DynamoDBEndpoint string
	// Persist keeps DynamoDB Local's data in <StateDir>/dynamodb.
	Persist bool
	// RedisURL uses this Redis; empty starts an embedded miniredis.
	RedisURL string
	// RedisCluster says RedisURL is a node of a Redis Cluster: the
	// functions use cluster mode (RALLY_REDIS_CLUSTER), as with ElastiCache.
	RedisCluster bool
	// StateDir holds analytics/ and the persisted database
	// (default .local).
	StateDir string
	// Tables names the physical tables; empty means schema.NamesFromEnv
	// with TablePrefix.
	Tables      schema.Names
	TablePrefix string
	// AccessKeyID and SecretAccessKey are the operator user's credentials
	// (default from RALLY_LOCAL_ACCESS_KEY_ID / _SECRET_ACCESS_KEY, or
	// rallylocal / rallylocalsecret); ServerAccessKeyID and
	// ServerSecretAccessKey the game server user's (default from
	// RALLY_LOCAL_SERVER_*, or rallyserver / rallyserversecret).
	AccessKeyID, SecretAccessKey             string
	ServerAccessKeyID, ServerSecretAccessKey string
	// Principals says who acts as each role: a service route admits the
	// principals of the roles it declares (RALLY_SERVICE_ROLES in AWS);
	// nil is DefaultPrincipals.
	Principals routes.Principals
	// CORSOrigins are the web origins browsers may call the API from
	// (exact, "*", or scheme://host:* for any port); nil is
	// gateway.DefaultCORSOrigins (this machine's http://localhost and
	// 127.0.0.1 on any port), empty configures no CORS, as a deployment
	// without corsOrigins.
	CORSOrigins []string
	// Handlers and Processors replace the handler bound in shared/app for
	// the named functions (tests).
	Handlers   map[string]api.Handler
	Processors map[string]streams.Handler
	// Configure adjusts the handlers' configuration (limits, ...).
	Configure func(*config.Config)
	// RetryBase and RetryMax bound the pollers' retry backoff (defaults
	// 100ms and 5s).
	RetryBase, RetryMax time.Duration
	// SharedStreams reads a stream that feeds several functions once for
	// all of them (poller.Pages) instead of once per function.
	SharedStreams bool
	// DynamoDBJVM are the options of the DynamoDB Local the stack starts
	// (default dynamodblocal.QuickStart; make dev runs Steady).
	DynamoDBJVM []string
	// PollInterval and MaxPollInterval are the pollers' pauses between
	// polls of a quiet shard: the first, and the longest they double to
	// (defaults 250ms and 2s). A write by the stack's handlers wakes the
	// pollers of its table whatever the pause.
	PollInterval, MaxPollInterval time.Duration
	// TickEvery is how often each processor with a Tick is invoked with no
	// records (default 5s; every minute in AWS). Each tick is a few
	// requests to DynamoDB: at 1s they were most of the idle stack's CPU.
	TickEvery time.Duration
	// StreamRetention, when set, is how long the streams keep records, by
	// the stack's clock (DynamoDB Streams keep them 24 hours): moving the
	// clock past it makes older records unreadable, as in AWS. Zero keeps
	// every record, as DynamoDB Local does, so moving the clock by days
	// (streaks, periods) loses nothing still in flight.
	StreamRetention time.Duration
	// ReconcileEvery is how often the job runner starts a reconcile on its
	// own (RALLY_RECONCILE_EVERY in AWS); zero (the default) never, since
	// the stack's clock may be moved by days.
	ReconcileEvery time.Duration
	// ReconcileSettle is how long a reconcile waits before confirming a
	// count off its edges; zero (the default) confirms at once.
	ReconcileSettle time.Duration
	// Log receives one JSON line per request and the handlers' logs
	// (default stdout).
	Log io.Writer
	// SkipRequestValidation serves requests the OpenAPI document refuses:
	// only the handlers validate them, as in AWS. By default the gateway
	// checks each request against the document first and answers a
	// mismatch 400 (infra/local/gateway, Options.ValidateRequests).
	SkipRequestValidation bool
	// Binaries, when set, serves every route, processor and consumer
	// through its real binary (`make dev ARGS=-binaries`) instead of in
	// process. The binaries run on the real clock: /_local/clock cannot
	// reach another process.
	Binaries *Binaries
	// Isolate binds each function on its own over the one set of clients,
	// as Lambda runs each function in its own process: no in-process
	// cache (board definitions, hot boards) is shared between functions,
	// so each one's calls are its own (infra/local/access proves the
	// grants with it). By default every feature is bound once.
	Isolate bool
	// AWSEndpoint starts the local AWS endpoint (AWS()) that function
	// binaries reach through AWS_ENDPOINT_URL, each with the credentials
	// AddCaller gives it: DynamoDB and its streams (checked against the
	// function's role, then DynamoDB Local), the cursor secret
	// (SecretARN: the cursor, log and erasure keys), the analytics delivery
	// stream (AnalyticsStream,
	// into the local analytics export) and Lambda Invoke of the
	// processors. The local credentials (AccessKeyID) call it unchecked.
	// The in-process handlers do not use it.
	AWSEndpoint bool
	// APIOptions are added to the in-process handlers' and processors' AWS
	// clients' middleware stacks, beside the access recorder (e.g. a
	// meter of consumed capacity).
	APIOptions []func(*middleware.Stack) error
	// Invoked, when set, is told of every invocation of an in-process
	// handler or processor as it returns: the function, the records of a
	// processor's batch (0 for a route and a tick) and how long the
	// handler ran, which is what Lambda bills (the gateway's and the
	// authorizers' work apart): a bench's measure of billed duration.
	Invoked func(function string, records int, took time.Duration)
}

// Binaries are the functions' real binaries and the template that says
// how each one runs.
type Binaries struct {
	// Template is the synthesized stack's template.
	Template *template.Template
	// Built maps every function to its binary, built for the host
	// (binaries.Build).
	Built map[string]string
	// Instances is how many instances of each function may run at once,
	// as Lambda runs concurrent invocations each in an instance of its
	// own; one is started warm, the others on demand (cold). Default 1:
	// concurrent invocations queue for the one instance.
	Instances int
}

// Stack is a running local stack.
type Stack struct {
	opts     Options
	url      string
	stateDir string
	log      *slog.Logger

	ddbLocal  *dynamodblocal.Server
	ddbURL    string
	mini      *miniredis.Miniredis
	redisURL  string
	db        *dynamodb.Client
	names     schema.Names
	access    *access.Recorder
	clock     *clock.Settable
	deps      *app.Deps
	bound     *app.Bound
	isolated  map[string]*app.Bound
	jwt       *authorizer.JWT
	iam       *authorizer.IAM
	docs      *docs.Server
	cors      *gateway.CORS
	gw        *gateway.Gateway
	delivery  *deliveryStream
	archive   *deadletters.Archive
	streams   streamread.Retained
	pollers   []*poller.Poller
	byTable   atomic.Pointer[map[string][]*poller.Poller] // pollers by source table, for wake
	unbound   []string
	binaries  *binaries.Set
	inits     []binaries.Init
	server    *http.Server
	listeners []net.Listener
	aws       *awsapi.Server

	cancel   context.CancelFunc
	wg       sync.WaitGroup
	closeErr error
	once     sync.Once
}

// Start brings the stack up and returns once the gateway accepts requests.
// On error everything started so far is stopped.
func Start(ctx context.Context, opts Options) (_ *Stack, err error) {
	if opts.StateDir == "" {
		opts.StateDir = ".local"
	}
	if opts.Log == nil {
		opts.Log = os.Stdout
	}
	if opts.AccessKeyID == "" {
		opts.AccessKeyID = envOr(AccessKeyEnv, DefaultAccessKey)
	}
	if opts.SecretAccessKey == "" {
		opts.SecretAccessKey = envOr(SecretKeyEnv, DefaultSecretKey)
	}
	if opts.ServerAccessKeyID == "" {
		opts.ServerAccessKeyID = envOr(ServerAccessKeyEnv, DefaultServerAccessKey)
	}
	if opts.ServerSecretAccessKey == "" {
		opts.ServerSecretAccessKey = envOr(ServerSecretKeyEnv, DefaultServerSecretKey)
	}
	if opts.Principals == nil {
		opts.Principals = DefaultPrincipals()
	}
	// The stack's own lines (requests, pollers) hash user ids as the
	// handlers' do, under the same key.
	s := &Stack{opts: opts, stateDir: opts.StateDir, clock: clock.NewSettable(),
		log: obs.NewLogger(opts.Log, "info", []byte(envOr(routes.LogKey.KeyVar, routes.LogKey.Local)))}
	defer func() {
		if err != nil {
			_ = s.Close()
		}
	}()
	for _, dir := range []string{"analytics"} {
		if err := os.MkdirAll(filepath.Join(s.stateDir, dir), 0o755); err != nil {
			return nil, fmt.Errorf("stack: create %s: %w", dir, err)
		}
	}

	// Origins no browser sends are refused before anything starts.
	origins := opts.CORSOrigins
	if origins == nil {
		origins = gateway.DefaultCORSOrigins
	}
	if len(origins) > 0 {
		if s.cors, err = gateway.RallyCORS(origins); err != nil {
			return nil, fmt.Errorf("stack: %w", err)
		}
	}

	// The listener comes first: the issuer URL carries the port.
	if err := s.listen(opts.Port); err != nil {
		return nil, err
	}

	// DynamoDB Local's JVM is the slow part; everything else happens while
	// it starts.
	ddbDone := make(chan error, 1)
	go func() { ddbDone <- s.startDynamoDB(ctx) }()
	var jwtErr error
	if s.jwt, jwtErr = authorizer.NewJWT(s.url+"/_local", Audience); jwtErr != nil {
		<-ddbDone
		return nil, jwtErr
	}
	s.iam = authorizer.NewIAM(
		authorizer.User{Name: "rallylocal", AccessKeyID: opts.AccessKeyID, Secret: opts.SecretAccessKey},
		authorizer.User{Name: "rallyserver", AccessKeyID: opts.ServerAccessKeyID, Secret: opts.ServerSecretAccessKey},
	)
	if err := s.startRedis(); err != nil {
		<-ddbDone
		return nil, err
	}
	if err := <-ddbDone; err != nil {
		return nil, err
	}

	s.db = dynamodb.New(dynamodb.Options{
		Region: Region, BaseEndpoint: aws.String(s.ddbURL),
		Credentials: credentials.NewStaticCredentialsProvider("local", "local", ""),
		APIOptions:  []func(*middleware.Stack) error{s.wakeOnWrite},
	})
	s.names = opts.Tables
	if s.names == nil {
		s.names = schema.NamesFromEnv(opts.TablePrefix)
	}
	if err := tables.Create(ctx, s.db, s.names); err != nil {
		return nil, fmt.Errorf("stack: %w", err)
	}

	cfg, err := s.config()
	if err != nil {
		return nil, err
	}
	// Every call a handler makes is recorded by function: what each one
	// touches, to compare with what the stack grants it.
	s.access = access.NewRecorder(s.names)
	if s.deps, err = app.New(ctx, cfg, app.Options{
		Clock: s.clock, LogOutput: opts.Log, Function: "rally-local",
		APIOptions: append([]func(*middleware.Stack) error{s.access.APIOption, s.wakeOnWrite}, opts.APIOptions...),
		RedisHooks: []redis.Hook{s.access},
	}); err != nil {
		return nil, fmt.Errorf("stack: build handlers: %w", err)
	}
	if s.bound, err = s.deps.Bind(all.Features()...); err != nil {
		return nil, fmt.Errorf("stack: bind handlers: %w", err)
	}
	if err := s.startBinaries(ctx); err != nil {
		return nil, err
	}
	gw, err := s.gateway()
	if err != nil {
		return nil, err
	}
	s.gw = gw
	runCtx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	if err := s.startPollers(runCtx); err != nil {
		return nil, err
	}

	if opts.AWSEndpoint {
		if err := s.startAWS(); err != nil {
			return nil, err
		}
	}

	// The API reference reads swagger-ui-dist from node_modules; without
	// it the API still runs and /docs says how to install it.
	if s.docs, err = docs.New(""); err != nil {
		return nil, fmt.Errorf("stack: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/_local/", s.cors.Wrap(s.localAPI()))
	mux.Handle("GET "+objects.LinkPath+exports.Prefix, s.exportLinks())
	mux.Handle("/openapi.json", s.cors.Wrap(http.HandlerFunc(s.serveOpenAPI)))
	mux.Handle("/docs", s.docs)
	mux.Handle("/docs/", s.docs)
	// The stack serves Lambda's Invoke API for the in-process functions
	// that invoke others (a redrive), under the processors' declared
	// names; a payload that is no DynamoDB event is a function error, as
	// Lambda reports it.
	mux.Handle("POST /2015-03-31/functions/{name}/invocations", awsapi.InvokeHandler(s.invoke))
	mux.Handle("/", gw)
	s.server = &http.Server{Handler: gateway.Logged(s.log, mux), ReadHeaderTimeout: 10 * time.Second}
	for _, l := range s.listeners {
		s.wg.Go(func() { _ = s.server.Serve(l) })
	}
	if err := s.Endpoints().Write(s.stateDir); err != nil {
		return nil, fmt.Errorf("stack: write %s: %w", binaries.EndpointsFile, err)
	}
	return s, nil
}

// Endpoints is what the stack offers a function's binary run beside it
// (`make invoke`): it is written to <state>/endpoints.json while the stack
// runs and served at GET /_local/endpoints.
func (s *Stack) Endpoints() binaries.Stack {
	analytics, _ := filepath.Abs(filepath.Join(s.stateDir, "analytics"))
	state, _ := filepath.Abs(s.stateDir)
	return binaries.Stack{
		URL: s.url, DynamoDB: s.ddbURL, Redis: s.redisURL, Tables: s.names, AnalyticsDir: analytics, ExportsDir: state,
		Region: Region, AccountID: authorizer.AccountID, Principals: s.opts.Principals, PID: os.Getpid(),
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// listen binds localhost on IPv4 and, when available, IPv6 with the same
// port, so http://localhost:<port> works whichever the client resolves.
func (s *Stack) listen(port int) error {
	l4, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("stack: listen on port %d: %w", port, err)
	}
	s.listeners = append(s.listeners, l4)
	port = l4.Addr().(*net.TCPAddr).Port
	if l6, err := net.Listen("tcp", net.JoinHostPort("::1", strconv.Itoa(port))); err == nil {
		s.listeners = append(s.listeners, l6)
	}
	s.url = "http://localhost:" + strconv.Itoa(port)
	return nil
}

func (s *Stack) startDynamoDB(ctx context.Context) error {
	if s.opts.DynamoDBEndpoint != "" {
		s.ddbURL = s.opts.DynamoDBEndpoint
		return nil
	}
	o := dynamodblocal.Options{JVM: s.opts.DynamoDBJVM}
	if s.opts.Persist {
		o.DBPath = filepath.Join(s.stateDir, "dynamodb")
	}
	srv, err := dynamodblocal.Start(ctx, o)
	if err != nil {
		return fmt.Errorf("stack: %w", err)
	}
	s.ddbLocal, s.ddbURL = srv, srv.Endpoint()
	return nil
}

func (s *Stack) startRedis() error {
	if s.opts.RedisURL != "" {
		s.redisURL = s.opts.RedisURL
		return nil
	}
	if s.opts.RedisCluster {
		return errors.New("stack: RedisCluster needs RedisURL, a node of the cluster (the embedded Redis is one node)")
	}
	m, err := miniredis.Run()
	if err != nil {
		return fmt.Errorf("stack: start embedded redis: %w", err)
	}
	s.mini, s.redisURL = m, "redis://"+m.Addr()
	return nil
}

func (s *Stack) config() (config.Config, error) {
	cfg, err := config.FromEnv()
	if err != nil {
		return cfg, fmt.Errorf("stack: %w", err)
	}
	cfg.Stage = "local"
	cfg.Region = Region
	cfg.DynamoDBEndpoint = s.ddbURL
	cfg.Tables = s.names
	cfg.RedisURL = s.redisURL
	cfg.RedisCluster = s.opts.RedisCluster
	// The secrets' keys are the local ones (or those the environment
	// gives), never read from Secrets Manager.
	cfg.SecretARN, cfg.LogKeyARN, cfg.ErasureKeyARN = "", "", ""
	// One configuration serves every function: each route admits its
	// roles' principals (config.ServiceRolesOf).
	cfg.ServiceRoles = nil
	cfg.Principals = s.opts.Principals
	if cfg.CursorKey == "" {
		cfg.CursorKey = routes.CursorKey.Local
	}
	cfg.Tracing = false
	cfg.FirehoseStream = ""
	cfg.AnalyticsDir = filepath.Join(s.stateDir, "analytics")
	// Export documents are files under <state>/exports, linked through
	// /_local/exports (exportLinks).
	cfg.ExportBucket, cfg.ExportsDir, cfg.ExportLinks = "", s.stateDir, s.url
	// The stack serves Lambda's Invoke API for the functions that invoke
	// others (a redrive), under the declared names.
	cfg.LambdaEndpoint = s.url
	cfg.Functions = map[string]string{}
	cfg.ReconcileEvery, cfg.ReconcileSettle = s.opts.ReconcileEvery, s.opts.ReconcileSettle
	if s.opts.Configure != nil {
		s.opts.Configure(&cfg)
	}
	return cfg, nil
}

// gateway binds every declared route to its handler: a test's override,
// else the one shared/app binds. A route nothing is bound to yet answers
// 500 and is listed in health.
func (s *Stack) gateway() (*gateway.Gateway, error) {
	var rs []gateway.Route
	for _, r := range routes.All() {
		gr := gateway.Route{Route: r, ServiceRoles: s.deps.Config.ServiceRolesOf(r)}
		if p, ok := s.pool(r.Function); ok {
			gr.Handler = binaries.HTTP(p)
		} else if h, ok := s.opts.Handlers[r.Function]; ok {
			gr.Handler = s.timedHTTP(r.Function, h)
		} else if h, ok := s.boundFor(r.Function, r.Feature).HTTP(r); ok {
			gr.Handler = s.timedHTTP(r.Function, h)
		} else {
			s.unbound = append(s.unbound, r.Function)
		}
		rs = append(rs, gr)
	}
	g, err := gateway.New(gateway.Options{
		Routes: rs,
		Authorizers: map[routes.Auth]authorizer.Authorizer{
			routes.Player:  s.jwt,
			routes.Service: s.iam,
		},
		ValidateRequests: !s.opts.SkipRequestValidation,
		Log:              s.log,
		CORS:             s.cors,
	})
	if err != nil {
		return nil, fmt.Errorf("stack: %w", err)
	}
	return g, nil
}

func (s *Stack) startPollers(ctx context.Context) error {
	retention := s.opts.StreamRetention
	sc := streamread.Retained{
		Client: dynamodbstreams.New(dynamodbstreams.Options{
			Region: Region, BaseEndpoint: aws.String(s.ddbURL),
			Credentials: credentials.NewStaticCredentialsProvider("local", "local", ""),
		}),
		// A record is gone once the stack's clock is past its creation
		// (as the clock read then) by the retention.
		Gone: func(created time.Time) bool {
			return retention > 0 && s.clock.Now().Sub(s.clock.At(created)) > retention
		},
	}
	s.streams = sc
	// The local dead-letter endpoints read and redrive the archive as the
	// ops routes do: indexed by the users' erasure hashes, and dropping
	// the records of erased users.
	s.archive = dlqbind.Archive(s.deps)
	// What the on-failure destinations receive goes to the dlq-archiver,
	// as the dead-letter queues deliver it in AWS.
	archive, ok := s.boundFor(routes.DlqArchiver.Function, routes.DlqArchiver.Feature).Queue(routes.DlqArchiver)
	if p, bin := s.pool(routes.DlqArchiver.Function); bin {
		archive, ok = binaries.Queue(p), true
	}
	if !ok {
		return fmt.Errorf("stack: no feature binds %s", routes.DlqArchiver.Function)
	}
	type feed struct {
		proc routes.Processor
		h    streams.Handler
	}
	var feeds []feed
	readers := map[string]int{} // pollers per source table
	for _, proc := range routes.Processors() {
		h, ok := s.opts.Processors[proc.Function]
		if p, bin := s.pool(proc.Function); bin {
			h, ok = binaries.Stream(p), true
		}
		if !ok {
			if h, ok = s.boundFor(proc.Function, proc.Feature).Stream(proc); !ok {
				s.unbound = append(s.unbound, proc.Function)
				continue
			}
		}
		if _, bin := s.pool(proc.Function); !bin {
			h = s.timedStream(proc.Function, h)
		}
		feeds = append(feeds, feed{proc, h})
		readers[s.names.Of(proc.Source)]++
	}
	// A stream that feeds several functions can be read once for all of
	// them (Options.SharedStreams).
	pages := map[string]*poller.Pages{}
	for table, n := range readers {
		if n > 1 && s.opts.SharedStreams {
			pages[table] = poller.NewPages()
		}
	}
	tables := map[*poller.Poller]string{}
	defer func() { s.indexPollers(s.pollers, func(p *poller.Poller) string { return tables[p] }) }()
	for _, f := range feeds {
		proc, h, table := f.proc, f.h, s.names.Of(f.proc.Source)
		p, err := poller.New(poller.Options{
			Processor: proc, Handler: h, Table: table, Pages: pages[table],
			DB: s.db, Streams: sc, Region: Region, AccountID: authorizer.AccountID,
			OnFailure: func(ctx context.Context, p streamread.Parked) error { return deliverParked(ctx, archive, p) },
			RetryBase: s.opts.RetryBase, RetryMax: s.opts.RetryMax, Log: s.log,
			PollInterval: s.opts.PollInterval, MaxPollInterval: s.opts.MaxPollInterval,
		})
		if err != nil {
			return fmt.Errorf("stack: %w", err)
		}
		s.pollers = append(s.pollers, p)
		tables[p] = table
		s.wg.Go(func() {
			if err := p.Run(ctx); err != nil {
				s.log.Error("stream poller stopped", "function", p.Function(), "error", err.Error())
			}
		})
		if proc.Tick > 0 {
			s.wg.Go(func() { s.tick(ctx, proc.Function, h) })
		}
	}
	return nil
}

// startBinaries starts one instance of every function's binary, two at a
// time, with the environment the template gives it, pointed at this stack;
// more start on demand, up to Binaries.Instances each.
func (s *Stack) startBinaries(ctx context.Context) error {
	b := s.opts.Binaries
	if b == nil {
		return nil
	}
	local := s.Endpoints()
	fns, err := b.Template.Functions(local.Local())
	if err != nil {
		return fmt.Errorf("stack: %w", err)
	}
	// The pollers stand in for the event source mappings, which Lambda
	// runs with each function's role: a role that may not read its
	// stream, its queue or send to its dead-letter queue stops the stack
	// as it stops the mapping in AWS.
	var denied []error
	for _, fn := range fns {
		denied = append(denied, fn.CheckMappings())
	}
	if err := errors.Join(denied...); err != nil {
		return fmt.Errorf("stack: %w", err)
	}
	// The binaries reach AWS through the local endpoint, each with its
	// own credentials and its role's statements checked on every call.
	if s.aws == nil {
		if err := s.startAWS(); err != nil {
			return err
		}
	}
	for _, sec := range b.Template.Secrets(local.Local()) {
		s.aws.AddSecret(sec.ARN, awsapi.Secret{Current: sec.Value})
	}
	for _, fn := range fns {
		if stream, ok := fn.Env["RALLY_FIREHOSE_STREAM"]; ok {
			s.delivery.also(stream)
		}
	}
	if s.binaries, err = binaries.NewSet(binaries.Options{
		Functions: fns, Binaries: b.Built, Endpoints: binaries.Checked{AWS: s.aws, Principals: local.Principals, ExportsDir: local.ExportsDir, StackURL: s.url},
		Region: Region, AccountID: authorizer.AccountID, MaxInstances: b.Instances, Log: s.opts.Log,
	}); err != nil {
		return fmt.Errorf("stack: %w", err)
	}
	s.inits = s.binaries.Start(ctx, 2)
	var errs []error
	for _, in := range s.inits {
		if in.Err != nil {
			errs = append(errs, in.Err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("stack: start the binaries: %w", err)
	}
	return nil
}

// Binaries are the functions' running binaries; nil unless the stack
// runs them (Options.Binaries).
func (s *Stack) Binaries() *binaries.Set { return s.binaries }

// pool is the binary serving fn, when the stack runs binaries.
func (s *Stack) pool(fn string) (*runtimeapi.Pool, bool) {
	if s.binaries == nil {
		return nil, false
	}
	return s.binaries.Pool(fn)
}

// boundFor is what serves function fn: every feature bound once, or with
// Isolate a binding of fn's feature for fn alone.
func (s *Stack) boundFor(fn string, feature routes.Feature) *app.Bound {
	if !s.opts.Isolate {
		return s.bound
	}
	if b, ok := s.isolated[fn]; ok {
		return b
	}
	if s.isolated == nil {
		s.isolated = map[string]*app.Bound{}
	}
	for _, f := range all.Features() {
		if f.Name != feature {
			continue
		}
		if b, err := s.deps.Bind(f); err == nil && b.Serves(fn) {
			s.isolated[fn] = b
			return b
		}
	}
	return s.bound
}

// tick invokes a processor with no records on a schedule, as the stack's
// EventBridge schedule does in AWS (locally every TickEvery, not every
// minute, so repairs show up while you watch).
func (s *Stack) tick(ctx context.Context, function string, h streams.Handler) {
	every := s.opts.TickEvery
	if every == 0 {
		every = 5 * time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			tickCtx, cancel := context.WithTimeout(context.WithValue(ctx, tickKey{}, true), routes.ProcessorTimeout)
			_, err := h(tickCtx, events.DynamoDBEvent{})
			cancel()
			if err != nil && ctx.Err() == nil {
				s.log.Warn("scheduled processor tick failed", "function", function, "error", err.Error())
			}
		}
	}
}

type tickKey struct{}

// IsTick reports whether ctx is a processor's scheduled tick (an
// invocation with no records), so a meter can leave periodic work out of
// what requests cost.
func IsTick(ctx context.Context) bool {
	t, _ := ctx.Value(tickKey{}).(bool)
	return t
}

// timedHTTP tells Options.Invoked how long each invocation of route
// function fn's handler h ran.
func (s *Stack) timedHTTP(fn string, h api.Handler) api.Handler {
	if s.opts.Invoked == nil {
		return h
	}
	return func(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		start := time.Now()
		resp, err := h(ctx, ev)
		s.opts.Invoked(fn, 0, time.Since(start))
		return resp, err
	}
}

// timedStream tells Options.Invoked how long each invocation of processor
// fn's handler h ran, and with how many records.
func (s *Stack) timedStream(fn string, h streams.Handler) streams.Handler {
	if s.opts.Invoked == nil {
		return h
	}
	return func(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		start := time.Now()
		resp, err := h(ctx, ev)
		s.opts.Invoked(fn, len(ev.Records), time.Since(start))
		return resp, err
	}
}

// URL is the gateway's base URL, http://localhost:<port>.
func (s *Stack) URL() string { return s.url }

// Clock is the clock every handler sees.
func (s *Stack) Clock() *clock.Settable { return s.clock }

// Deps are the handlers' dependencies (DynamoDB and Redis clients, config).
func (s *Stack) Deps() *app.Deps { return s.deps }

// Bound is every feature's handlers, as the stack serves them.
func (s *Stack) Bound() *app.Bound { return s.bound }

// Access is what each function's calls have touched so far: tables and
// indexes by action, streams, invocations, Redis.
func (s *Stack) Access() *access.Recorder { return s.access }

// ContractMismatches hands every request the OpenAPI document refused
// since the last call to its handler, and returns those the handler
// serves (gateway.Recheck): requests the deployed API serves but the
// document refuses. Their effects are real: call it at a test's end.
func (s *Stack) ContractMismatches(ctx context.Context) []gateway.Mismatch {
	return s.gw.Recheck(ctx)
}

// AWS is the local AWS endpoint, nil unless Options.AWSEndpoint: give each
// function binary its credentials with AddCaller and its URL as
// AWS_ENDPOINT_URL.
func (s *Stack) AWS() *awsapi.Server { return s.aws }

// DB is a DynamoDB client for the stack's tables.
func (s *Stack) DB() *dynamodb.Client { return s.db }

// Tables are the physical table names.
func (s *Stack) Tables() schema.Names { return s.names }

// JWT is the local identity provider.
func (s *Stack) JWT() *authorizer.JWT { return s.jwt }

// Streams reads the tables' streams as the pollers do: only what the
// stream retention (by the stack's clock) still holds.
func (s *Stack) Streams() streamread.Client { return s.streams }

// DeadLetters is the archive of parked batches.
func (s *Stack) DeadLetters() *deadletters.Archive { return s.archive }

// Token mints a one-hour player token for sub.
func (s *Stack) Token(sub string) (string, error) {
	tok, _, err := s.jwt.Mint(authorizer.TokenRequest{Subject: sub})
	return tok, err
}

// SignRequest signs req with SigV4 for a service route as the operator,
// who may call every one: with the local operator's credentials
// (RALLY_LOCAL_ACCESS_KEY_ID / RALLY_LOCAL_SECRET_ACCESS_KEY, default
// rallylocal / rallylocalsecret); body must be what will be sent.
func SignRequest(req *http.Request, body []byte) error {
	return authorizer.Sign(req, body, envOr(AccessKeyEnv, DefaultAccessKey), envOr(SecretKeyEnv, DefaultSecretKey), time.Now())
}

// SignRequestAsGameServer signs req with SigV4 as the game server, who may
// call the game routes alone: with the local game server's credentials
// (RALLY_LOCAL_SERVER_ACCESS_KEY_ID / RALLY_LOCAL_SERVER_SECRET_ACCESS_KEY,
// default rallyserver / rallyserversecret).
func SignRequestAsGameServer(req *http.Request, body []byte) error {
	return authorizer.Sign(req, body, envOr(ServerAccessKeyEnv, DefaultServerAccessKey), envOr(ServerSecretKeyEnv, DefaultServerSecretKey), time.Now())
}

// SignRequestAsRole signs req with SigV4 as role, with the local user
// acting as it (rallyserver or rallylocal).
func SignRequestAsRole(role routes.Role) func(*http.Request, []byte) error {
	if role == routes.GameServer {
		return SignRequestAsGameServer
	}
	return SignRequest
}

// AssumeRole mints a one-hour session of role, as POST /_local/assume-role
// does.
func (s *Stack) AssumeRole(role, session string) (authorizer.RoleCredentials, error) {
	return s.iam.AssumeRole(role, session, 0)
}

// SignRequestAs signs req for a service route with a role session's
// credentials; body must be what will be sent.
func SignRequestAs(creds authorizer.RoleCredentials) func(*http.Request, []byte) error {
	return func(req *http.Request, body []byte) error {
		return authorizer.SignWith(req, body, aws.Credentials{
			AccessKeyID: creds.AccessKeyID, SecretAccessKey: creds.SecretAccessKey, SessionToken: creds.SessionToken,
		}, time.Now())
	}
}

// ErrUnknownFunction means no poller runs for the named function.
var ErrUnknownFunction = errors.New("stack: no stream processor by that name")

func (s *Stack) poller(function string) (*poller.Poller, error) {
	for _, p := range s.pollers {
		if p.Function() == function {
			return p, nil
		}
	}
	return nil, fmt.Errorf("%w: %s", ErrUnknownFunction, function)
}

// Pause stops delivering to a processor; its lag grows until Resume.
func (s *Stack) Pause(function string) error {
	p, err := s.poller(function)
	if err == nil {
		p.Pause()
	}
	return err
}

// Resume restarts delivery to a paused processor.
func (s *Stack) Resume(function string) error {
	p, err := s.poller(function)
	if err == nil {
		p.Resume()
	}
	return err
}

// PauseProcessors stops delivering to every processor at once, as if
// their event source mappings were disabled: records pile up in the
// streams, derived data and its as_of stand still (scheduled ticks go on)
// until ResumeProcessors.
func (s *Stack) PauseProcessors() {
	for _, p := range s.pollers {
		p.Pause()
	}
}

// ResumeProcessors restarts delivery to every processor; what piled up is
// delivered in order.
func (s *Stack) ResumeProcessors() {
	for _, p := range s.pollers {
		p.Resume()
	}
}

// WaitIdle returns once every processor (except paused ones) has delivered
// every record written before the call, including records that processors
// themselves wrote to other streams meanwhile.
func (s *Stack) WaitIdle(ctx context.Context) error {
	for {
		before := s.delivered()
		for _, p := range s.pollers {
			if err := p.WaitIdle(ctx); err != nil {
				return err
			}
		}
		if s.delivered() == before {
			return nil
		}
	}
}

func (s *Stack) delivered() int64 {
	var n int64
	for _, p := range s.pollers {
		n += p.Status().Delivered
	}
	return n
}

// Info describes what the stack started, for the start-up banner.
type Info struct {
	URL              string
	DynamoDBEndpoint string
	// DynamoDBPID is DynamoDB Local's JVM, 0 when an endpoint was given.
	DynamoDBPID int
	Persisted   string
	RedisKind   string
	RedisURL    string
	Processors  []string
	Unbound     []string
	StateDir    string
	Routes      int
	// Docs is the API reference page; DocsMissing says why it cannot be
	// drawn (swagger-ui-dist not installed), nil when it can.
	Docs        string
	DocsMissing error
	// AWSEndpoint is the local AWS endpoint's URL, "" when not started.
	AWSEndpoint string
	// Inits are the binaries' cold starts, when the stack runs them.
	Inits []binaries.Init
}

// Info reports what runs where.
func (s *Stack) Info() Info {
	i := Info{URL: s.url, DynamoDBEndpoint: s.ddbURL, RedisURL: s.redisURL, StateDir: s.stateDir,
		Unbound: s.unbound, Routes: len(routes.All()) - s.unboundRoutes(), Docs: s.url + "/docs", Inits: s.inits}
	_, i.DocsMissing = s.docs.Assets()
	if s.ddbLocal != nil {
		i.DynamoDBPID = s.ddbLocal.PID()
		if s.opts.Persist {
			i.Persisted = filepath.Join(s.stateDir, "dynamodb")
		}
	}
	if s.aws != nil {
		i.AWSEndpoint = s.aws.URL()
	}
	i.RedisKind = "redis at REDIS_URL"
	if s.mini != nil {
		i.RedisKind = "embedded miniredis"
	}
	for _, p := range s.pollers {
		i.Processors = append(i.Processors, p.Function())
	}
	return i
}

func (s *Stack) unboundRoutes() int {
	n := 0
	for _, r := range routes.All() {
		for _, u := range s.unbound {
			if u == r.Function {
				n++
			}
		}
	}
	return n
}

// Close stops everything Start started: the gateway, the pollers, Redis
// (when embedded) and DynamoDB Local (when started here).
func (s *Stack) Close() error {
	s.once.Do(func() {
		var errs []error
		if s.server != nil {
			// net/http counts a connection a client opened but has not yet
			// sent a request on (an HTTP client dials ahead under
			// concurrency) as busy for its first 5 s: the deadline leaves
			// room past that, so only a handler still running fails it.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if err := s.server.Shutdown(ctx); err != nil {
				errs = append(errs, fmt.Errorf("stack: stop gateway: %w", err))
			}
			cancel()
		} else {
			for _, l := range s.listeners {
				_ = l.Close()
			}
		}
		if s.aws != nil {
			if err := s.aws.Close(); err != nil {
				errs = append(errs, fmt.Errorf("stack: stop the AWS endpoint: %w", err))
			}
		}
		if s.cancel != nil {
			s.cancel()
		}
		s.wg.Wait()
		if s.binaries != nil {
			_ = s.binaries.Close()
		}
		if s.deps != nil && s.deps.Redis != nil {
			_ = s.deps.Redis.Close()
		}
		if s.mini != nil {
			s.mini.Close()
		}
		if s.ddbLocal != nil {
			if err := s.ddbLocal.Close(); err != nil {
				errs = append(errs, err)
			}
		}
		// The endpoints file names this stack only while it runs.
		if st, err := binaries.ReadStack(s.stateDir); err == nil && st.URL == s.url && st.PID == os.Getpid() {
			_ = os.Remove(filepath.Join(s.stateDir, binaries.EndpointsFile))
		}
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// deliverParked hands an on-failure record to the dlq-archiver in the
// SQS message a dead-letter queue would deliver.
func deliverParked(ctx context.Context, archive app.QueueHandler, p streamread.Parked) error {
	body, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("encode the on-failure record: %w", err)
	}
	id := p.RequestContext.RequestID
	resp, err := archive(ctx, events.SQSEvent{Records: []events.SQSMessage{{
		MessageId: id, Body: string(body), EventSource: "aws:sqs", AWSRegion: Region,
	}}})
	if err == nil && len(resp.BatchItemFailures) > 0 {
		err = errors.New("the dlq-archiver could not archive it")
	}
	return err
}
