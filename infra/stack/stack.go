// Package stack is Rally's AWS deployment as CDK constructs: one construct
// per concern (data, cache, analytics, functions, api, processors,
// observability),
// composed by New into the Rally-<stage> stack. Every Lambda, route, grant,
// event source mapping and alarm is derived from the declarations in
// shared/routes and shared/schema; nothing here names a route or a table.
package stack

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/rallyhq/rally/shared/analytics"
	"github.com/rallyhq/rally/shared/config"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
)

// ErrInvalidProps is wrapped by every error New returns for props or
// declarations that cannot be deployed.
var ErrInvalidProps = errors.New("stack: invalid props")

// MaxStreamReaders is how many event source mappings may read one DynamoDB
// stream; a third reader is throttled by the stream's shard read limits.
const MaxStreamReaders = 2

// Stage throttling defaults: what API Gateway lets through to the
// functions, for all callers together, before any Lambda runs. A warm
// route answers in tens of milliseconds (a degraded read in a few
// hundred), so 1,000 requests a second keep a few hundred invocations
// running: well inside what an account's default 1,000 concurrent
// executions leave once the processors' reservations are taken (README,
// Configuration). The burst, two seconds' worth, absorbs a client fleet
// reconnecting at once. Each player's own budget (shared/ratelimit) is far
// below; this caps the total.
const (
	DefaultThrottleRate  = 1000
	DefaultThrottleBurst = 2000
)

// Lambda's concurrency limits: an account starts with 1,000 concurrent
// executions a region, and reservations may not leave less than 100
// unreserved (for every function without one).
const (
	DefaultAccountConcurrency = 1000
	UnreservedMinimum         = 100
)

// Redis engines ElastiCache Serverless offers.
const (
	EngineValkey = "valkey"
	EngineRedis  = "redis"
)

// Props configures the Rally stack.
type Props struct {
	awscdk.StackProps
	// Stage names the deployment (dev, staging, prod...): lowercase letters,
	// digits and hyphens; not "local", the local stack's. It is passed to
	// every function as RALLY_STAGE.
	Stage string
	// Protect turns on deletion protection and retains stateful resources
	// (tables, user pool, secret, dead-letter queues, keys, logs) when the
	// stack is deleted.
	Protect bool
	// BuildDir holds <function>/bootstrap for every declared function.
	BuildDir string
	// JWTIssuer and JWTAudience select an external OIDC issuer for player
	// routes. When both are empty the stack creates a Cognito user pool.
	JWTIssuer   string
	JWTAudience []string
	// RedisEngine is EngineValkey (default) or EngineRedis.
	RedisEngine string
	// LogRetention applies to function, API access and VPC flow logs.
	LogRetention awslogs.RetentionDays
	// AlarmEmail, when set, subscribes an address to the alarm topic.
	AlarmEmail string
	// ThrottleRate (requests a second, steady) and ThrottleBurst cap what
	// the API's stage passes on to the functions; zero means
	// DefaultThrottleRate and DefaultThrottleBurst.
	ThrottleRate  float64
	ThrottleBurst int
	// Reserved overrides the reserved concurrency declared beside each
	// processor and queue consumer (routes.Processor.Reserved), by
	// function name.
	Reserved map[string]int
	// AccountConcurrency is the account's Lambda concurrency quota in the
	// region (default DefaultAccountConcurrency): the reservations must
	// leave UnreservedMinimum of it, or the deployment fails.
	AccountConcurrency int
	// GameServerRoleARNs and OperatorRoleARNs are existing roles (or
	// users) acting as the game server, allowed the game routes, and as
	// the operator, allowed every service route (routes.Role); for a role
	// given none the stack creates rally-<stage>-game-server or
	// rally-<stage>-operator.
	GameServerRoleARNs []string
	OperatorRoleARNs   []string
	// CORSOrigins are the origins (https://game.example.com) web games may
	// call the API from; none (the default) configures no CORS. AnyOrigin
	// allows every origin, but not with CORSCredentials.
	CORSOrigins     []string
	CORSCredentials bool
	// ImportBucket is the existing S3 bucket import files are read from
	// (POST /v1/ops/jobs with kind import, source s3://<bucket>/<key>):
	// the job runner may get its objects and nothing else. Empty, the
	// job runner reads no bucket and an import from S3 fails.
	ImportBucket string

	// Routes, Processors, Consumers and Tables default to routes.All(),
	// routes.Processors(), routes.Consumers() and schema.Tables(); tests
	// replace them.
	Routes     []routes.Route
	Processors []routes.Processor
	Consumers  []routes.Consumer
	Tables     []schema.Table
}

// Stack is the synthesized Rally stack and the constructs it composed, so
// callers (and tests) can reach a table or function by its declaration.
type Stack struct {
	awscdk.Stack
	Data          *Data
	Cache         *Cache
	Analytics     *Analytics
	Exports       *Exports
	Functions     *Functions
	API           *API
	Processors    *Processors
	Observability *Observability
}

// New builds the Rally stack. It returns an error wrapping ErrInvalidProps,
// before creating anything, when the props or the declarations cannot be
// deployed (e.g. three processors on one stream, a missing build).
func New(scope constructs.Construct, id string, props Props) (*Stack, error) {
	props = withDefaults(props)
	if err := validate(props); err != nil {
		return nil, err
	}
	sp := props.StackProps
	if sp.Description == nil {
		sp.Description = jsii.String(fmt.Sprintf("Rally engagement backend (%s)", props.Stage))
	}
	s := &Stack{Stack: awscdk.NewStack(scope, jsii.String(id), &sp)}
	awscdk.Tags_Of(s.Stack).Add(jsii.String("rally:stage"), jsii.String(props.Stage), nil)

	s.Data = NewData(s.Stack, "Data", DataProps{Tables: props.Tables, Protect: props.Protect})
	s.Cache = NewCache(s.Stack, "Cache", CacheProps{
		Stage:           props.Stage,
		Engine:          props.RedisEngine,
		LogRetention:    props.LogRetention,
		Protect:         props.Protect,
		SecretsEndpoint: needsSecretsEndpoint(props.Routes, props.Processors, props.Consumers),
	})
	s.Analytics = NewAnalytics(s.Stack, "Analytics", AnalyticsProps{
		Stage:        props.Stage,
		LogRetention: props.LogRetention,
		Protect:      props.Protect,
	})
	s.Exports = NewExports(s.Stack, "Exports", ExportsProps{AccessLogs: s.Analytics.AccessLogs})
	s.Functions = NewFunctions(s.Stack, "Functions", FunctionsProps{
		Stage:        props.Stage,
		BuildDir:     props.BuildDir,
		Routes:       props.Routes,
		Processors:   props.Processors,
		Consumers:    props.Consumers,
		Data:         s.Data,
		Cache:        s.Cache,
		Analytics:    s.Analytics,
		Exports:      s.Exports,
		ImportBucket: props.ImportBucket,
		LogRetention: props.LogRetention,
		Protect:      props.Protect,
		Reserved:     Reserved(props),
	})
	s.API = NewAPI(s.Stack, "Api", APIProps{
		Stage:              props.Stage,
		Routes:             props.Routes,
		Functions:          s.Functions,
		JWTIssuer:          props.JWTIssuer,
		JWTAudience:        props.JWTAudience,
		LogRetention:       props.LogRetention,
		Protect:            props.Protect,
		ThrottleRate:       props.ThrottleRate,
		ThrottleBurst:      props.ThrottleBurst,
		GameServerRoleARNs: props.GameServerRoleARNs,
		OperatorRoleARNs:   props.OperatorRoleARNs,
		CORSOrigins:        props.CORSOrigins,
		CORSCredentials:    props.CORSCredentials,
	})
	// The functions behind service routes admit only the principals of
	// the roles their routes admit.
	for _, fn := range serviceFunctions(props.Routes) {
		s.Functions.Get(fn).AddEnvironment(jsii.String("RALLY_SERVICE_ROLES"), s.API.AllowList(props.Routes, fn), nil)
	}
	s.Processors = NewProcessors(s.Stack, "Processors", ProcessorsProps{
		Processors: props.Processors,
		Archiver:   archiverOf(props.Consumers),
		Functions:  s.Functions,
		Data:       s.Data,
		Protect:    props.Protect,
	})
	s.Observability = NewObservability(s.Stack, "Observability", ObservabilityProps{
		Stage:      props.Stage,
		Functions:  s.Functions,
		Processors: s.Processors,
		API:        s.API,
		Data:       s.Data,
		Declared: Declared{
			Routes: props.Routes, Processors: props.Processors, Consumers: props.Consumers, Tables: props.Tables,
		},
		Analytics:  s.Analytics,
		AlarmEmail: props.AlarmEmail,
		Protect:    props.Protect,
	})
	s.addOutputs(props)
	return s, nil
}

// serviceFunctions lists, once each, the functions serving a service route.
func serviceFunctions(rs []routes.Route) []string {
	var out []string
	for _, r := range rs {
		if r.Auth == routes.Service && !slices.Contains(out, r.Function) {
			out = append(out, r.Function)
		}
	}
	return out
}

// archiverOf is the dlq-archiver among consumers, "" when it is not
// deployed (a test stack).
func archiverOf(consumers []routes.Consumer) string {
	for _, c := range consumers {
		if c.Function == routes.DlqArchiver.Function {
			return c.Function
		}
	}
	return ""
}

func withDefaults(p Props) Props {
	if p.Routes == nil {
		p.Routes = routes.All()
	}
	if p.Processors == nil {
		p.Processors = routes.Processors()
	}
	if p.Consumers == nil {
		p.Consumers = routes.Consumers()
	}
	if p.Tables == nil {
		p.Tables = schema.Tables()
	}
	if p.RedisEngine == "" {
		p.RedisEngine = EngineValkey
	}
	if p.LogRetention == "" {
		p.LogRetention = awslogs.RetentionDays_ONE_MONTH
	}
	if p.ThrottleRate == 0 {
		p.ThrottleRate = DefaultThrottleRate
	}
	if p.ThrottleBurst == 0 {
		p.ThrottleBurst = DefaultThrottleBurst
	}
	if p.AccountConcurrency == 0 {
		p.AccountConcurrency = DefaultAccountConcurrency
	}
	return p
}

var serviceRoleARN = regexp.MustCompile(`^arn:aws[a-z-]*:iam::\d{12}:(role|user)/[\w+=,.@/-]+$`)

var stagePattern = regexp.MustCompile(`^[a-z][a-z0-9-]{0,19}$`)

func validate(p Props) error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidProps}, args...)...))
	}
	if !stagePattern.MatchString(p.Stage) {
		// The stage names the serverless cache, which allows only lowercase
		// letters, digits and hyphens.
		bad("stage %q must be 1-20 lowercase letters, digits or hyphens, starting with a letter", p.Stage)
	}
	if p.Stage == config.LocalStage {
		// Every function runs as RALLY_STAGE: under the local stack's
		// stage it would start on the built-in log and cursor keys and
		// skip its service allow-list instead of refusing to start.
		bad("stage %q is the local stack's; a deployment needs another name (e.g. dev)", p.Stage)
	}
	if p.RedisEngine != EngineValkey && p.RedisEngine != EngineRedis {
		bad("redis engine %q must be %q or %q", p.RedisEngine, EngineValkey, EngineRedis)
	}
	if (p.JWTIssuer == "") != (len(p.JWTAudience) == 0) {
		bad("jwtIssuer and jwtAudience must be given together (or neither, for a Cognito user pool)")
	}
	for _, given := range []struct {
		key  string
		arns []string
	}{{"gameServerRoleArns", p.GameServerRoleARNs}, {"operatorRoleArns", p.OperatorRoleARNs}} {
		for _, arn := range given.arns {
			if !serviceRoleARN.MatchString(arn) {
				bad("%s: %q is not an IAM role or user ARN (arn:aws:iam::ACCOUNT:role/NAME)", given.key, arn)
			}
		}
	}
	for _, arn := range p.GameServerRoleARNs {
		if slices.Contains(p.OperatorRoleARNs, arn) {
			// The operator may call every route: as both, it would be an
			// operator the deployer meant as a game server.
			bad("%q is given as both a game server and an operator; a principal acts as one role", arn)
		}
	}
	for _, o := range p.CORSOrigins {
		if err := routes.CheckOrigin(o); err != nil {
			bad("corsOrigins: %v", err)
		}
		if o == routes.AnyOrigin && p.CORSCredentials {
			// Browsers refuse credentials with Access-Control-Allow-Origin: *,
			// and allowing every origin with them would let any site act
			// as the player.
			bad("corsOrigins: %q cannot be combined with corsAllowCredentials; list the origins", o)
		}
	}
	if p.CORSCredentials && len(p.CORSOrigins) == 0 {
		bad("corsAllowCredentials needs corsOrigins")
	}
	if p.JWTIssuer != "" {
		if u, err := url.Parse(p.JWTIssuer); err != nil || u.Scheme != "https" || u.Host == "" {
			bad("jwtIssuer %q must be an https URL", p.JWTIssuer)
		}
	}
	if p.ThrottleRate < 0 || math.IsNaN(p.ThrottleRate) || math.IsInf(p.ThrottleRate, 0) {
		bad("throttleRate %v must be a positive number of requests a second", p.ThrottleRate)
	}
	if p.ThrottleBurst < 0 {
		bad("throttleBurst %d must be a positive number of requests", p.ThrottleBurst)
	}
	errs = append(errs, validateReserved(p)...)
	declared := map[string]schema.Table{}
	for _, t := range p.Tables {
		declared[t.Name] = t
	}
	checkUses := func(fn string, u routes.Uses) {
		for _, t := range u.Tables() {
			if _, ok := declared[t.Name]; !ok {
				bad("function %s uses table %s, which is not declared in schema", fn, t.Name)
			}
		}
		for _, c := range u.Calls {
			switch t := declared[c.Table.Name]; {
			case c.Actions == 0:
				bad("function %s calls nothing on %s: declare the actions it calls", fn, c.Resource())
			case c.Index == "":
			case !slices.ContainsFunc(append(slices.Clone(t.LocalIndexes), t.GlobalIndexes...), func(i schema.Index) bool { return i.Name == c.Index }):
				bad("function %s reads index %s, which table %s does not declare", fn, c.Index, c.Table.Name)
			case c.Actions&^(routes.Query|routes.Scan) != 0:
				bad("function %s calls %v on index %s: an index takes Query and Scan only", fn, c.Actions, c.Resource())
			}
		}
	}
	// A function serves one route, or reads one or more streams: a
	// processor is declared once per stream it reads, all with the same
	// schedule.
	// Two routes share a function only as one endpoint offered to players
	// and to services (an HTTP API route has one authorizer).
	functions := map[string]bool{}
	routeFunctions := map[string]routes.Route{}
	routeKeys := map[string]bool{}
	for _, r := range p.Routes {
		if first, ok := routeFunctions[r.Function]; ok && (first.Method != r.Method || first.Auth == r.Auth) {
			bad("function %s serves %s and %s; a function serves one endpoint", r.Function, first.Key(), r.Key())
		} else if !ok {
			routeFunctions[r.Function] = r
		}
		functions[r.Function] = true
		checkUses(r.Function, r.Uses)
		if routeKeys[r.Key()] {
			bad("route %s is declared twice", r.Key())
		}
		routeKeys[r.Key()] = true
		if r.Auth != routes.Player && r.Auth != routes.Service {
			bad("route %s has no auth kind", r.Key())
		}
		if r.Auth == routes.Service && !slices.Contains(routes.Roles(), r.Role) {
			bad("service route %s declares no role (%q): routes.GameServer or routes.Operator", r.Key(), r.Role)
		}
	}
	for _, c := range p.Consumers {
		checkUses(c.Function, c.Uses)
		for _, t := range c.Uses.Streams {
			if !declared[t.Name].Stream {
				bad("consumer %s reads the stream of %s, which has none", c.Function, t.Name)
			}
		}
	}
	readers := map[string][]string{}
	ticks := map[string]time.Duration{}
	for _, proc := range p.Processors {
		if _, ok := routeFunctions[proc.Function]; ok {
			bad("function %s is declared as both a route and a processor", proc.Function)
		}
		if tick, ok := ticks[proc.Function]; ok && tick != proc.Tick {
			bad("processor %s: its declarations disagree on Tick (%s, %s); a function has one schedule",
				proc.Function, tick, proc.Tick)
		}
		ticks[proc.Function] = proc.Tick
		functions[proc.Function] = true
		checkUses(proc.Function, proc.Uses)
		src, ok := declared[proc.Source.Name]
		switch {
		case !ok:
			bad("processor %s reads table %s, which is not declared in schema", proc.Function, proc.Source.Name)
		case !src.Stream:
			bad("processor %s reads table %s, which declares no stream", proc.Function, src.Name)
		}
		if slices.Contains(readers[proc.Source.Name], proc.Function) {
			bad("processor %s reads the %s stream twice", proc.Function, proc.Source.Name)
		}
		readers[proc.Source.Name] = append(readers[proc.Source.Name], proc.Function)
		// Unbounded retries or record age would let one poison record block
		// its shard for up to the stream's 24 h retention.
		if proc.MaxRetries < 0 || proc.MaxRetries > 10000 {
			bad("processor %s: MaxRetries %d must be 0-10000", proc.Function, proc.MaxRetries)
		}
		if proc.MaxRecordAge < time.Minute || proc.MaxRecordAge > routes.MaxParkAge {
			bad("processor %s: MaxRecordAge %s must be 1m-%s (a parked batch must still be in the stream for its archiver)",
				proc.Function, proc.MaxRecordAge, routes.MaxParkAge)
		}
		if proc.BatchSize < 1 || proc.BatchSize > 10000 {
			bad("processor %s: BatchSize %d must be 1-10000", proc.Function, proc.BatchSize)
		}
		if proc.BatchWindow < 0 || proc.BatchWindow > 5*time.Minute {
			bad("processor %s: BatchWindow %s must be 0-5m", proc.Function, proc.BatchWindow)
		}
	}
	for _, t := range p.Tables {
		if fns := readers[t.Name]; len(fns) > MaxStreamReaders {
			bad("table %s has %d stream readers (%s); at most %d may read one DynamoDB stream: merge processors or fan out from one",
				t.Name, len(fns), strings.Join(fns, ", "), MaxStreamReaders)
		}
	}
	for fn := range functions {
		bootstrap := filepath.Join(p.BuildDir, fn, "bootstrap")
		if _, err := os.Stat(bootstrap); err != nil {
			bad("function %s has no build at %s (run make build): %v", fn, bootstrap, err)
		}
	}
	return errors.Join(errs...)
}

// Reserved is the reserved concurrency of every processor and queue
// consumer function: as declared beside it, or as p.Reserved overrides it.
func Reserved(p Props) map[string]int {
	out := map[string]int{}
	for _, proc := range p.Processors {
		out[proc.Function] = int(proc.Reserved)
	}
	for _, c := range p.Consumers {
		out[c.Function] = int(c.Reserved)
	}
	for fn, n := range p.Reserved {
		if _, ok := out[fn]; ok {
			out[fn] = n
		}
	}
	return out
}

// validateReserved checks the reservations: each names a processor or
// consumer, lets the function read every stream it is fed at once, and
// all of them leave the account's unreserved minimum.
func validateReserved(p Props) []error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidProps}, args...)...))
	}
	reserved := Reserved(p)
	for _, fn := range slices.Sorted(maps.Keys(p.Reserved)) {
		if _, ok := reserved[fn]; !ok {
			bad("reservedConcurrency names %s, which is no stream processor or queue consumer", fn)
		}
	}
	streams := map[string]int{}
	declared := map[string]int32{}
	for _, proc := range p.Processors {
		streams[proc.Function]++
		if first, ok := declared[proc.Function]; ok && first != proc.Reserved {
			bad("processor %s: its declarations disagree on Reserved (%d, %d); a function has one reservation",
				proc.Function, first, proc.Reserved)
		}
		declared[proc.Function] = proc.Reserved
	}
	total := 0
	for _, fn := range slices.Sorted(maps.Keys(reserved)) {
		n := reserved[fn]
		total += n
		switch {
		case n < 1:
			bad("function %s: reserved concurrency %d must be at least 1", fn, n)
		case n < streams[fn]:
			bad("function %s: reserved concurrency %d is less than the %d streams it reads (one invocation per shard)", fn, n, streams[fn])
		}
	}
	if most := p.AccountConcurrency - UnreservedMinimum; total > most {
		bad("the processors' reserved concurrency adds up to %d, but an account with %d concurrent executions may reserve at most %d "+
			"(Lambda keeps %d unreserved): lower reservedConcurrency or raise the quota and set accountConcurrency",
			total, p.AccountConcurrency, most, UnreservedMinimum)
	}
	return errs
}

// needsSecretsEndpoint reports whether any function runs in the VPC (it uses
// Redis) and reads a secret at start, as every function reads at least the
// log key: isolated subnets have no route to Secrets Manager without an
// interface endpoint.
func needsSecretsEndpoint(rs []routes.Route, ps []routes.Processor, cs []routes.Consumer) bool {
	var uses []routes.Uses
	for _, r := range rs {
		uses = append(uses, r.Uses)
	}
	for _, p := range ps {
		uses = append(uses, p.Uses)
	}
	for _, c := range cs {
		uses = append(uses, c.Uses)
	}
	return slices.ContainsFunc(uses, func(u routes.Uses) bool { return u.Redis && len(u.Keys()) > 0 })
}

func (s *Stack) addOutputs(p Props) {
	out := func(id string, value *string, description string) {
		awscdk.NewCfnOutput(s.Stack, jsii.String(id), &awscdk.CfnOutputProps{
			Value: value, Description: jsii.String(description),
		})
	}
	out("ApiUrl", s.API.URL, "Base URL of the Rally HTTP API")
	if s.API.UserPool != nil {
		out("UserPoolId", s.API.UserPool.UserPoolId(), "Cognito user pool that issues player tokens")
		out("UserPoolClientId", s.API.UserPoolClient.UserPoolClientId(), "App client id (the token audience) for game clients")
	}
	for _, t := range p.Tables {
		out("Table"+t.Name, s.Data.Table(t).TableName(), t.Name+" table: "+t.Purpose)
	}
	for _, fn := range s.Processors.Names() {
		out("Dlq"+routes.Camel(fn), s.Processors.DeadLetterQueue(fn).QueueUrl(),
			"Dead-letter queue of "+fn+": batches that exhausted their retries, from every stream it reads")
	}
	out("CacheEndpoint", s.Cache.URL, "ElastiCache Serverless endpoint (TLS)")
	out("AnalyticsBucket", s.Analytics.Bucket.BucketName(), "S3 bucket of the analytics export: events/ (Parquet), errors/, athena-results/")
	out("AnalyticsDatabase", s.Analytics.Database.Ref(), "Glue database of the analytics table "+analytics.Table)
	out("AnalyticsWorkgroup", s.Analytics.WorkGroup.Ref(), "Athena workgroup for analytics queries (named queries included)")
	out("AnalyticsDeliveryStream", s.Analytics.StreamName, "Firehose stream the analytics shipper sends events to")
	out("AlarmTopicArn", s.Observability.Topic.TopicArn(), "SNS topic every Rally alarm notifies")
	for _, sec := range routes.Secrets() {
		description := "Secret holding the key that " + sec.Purpose
		if sec == routes.LogKey {
			description += " (go run ./infra/loghash)"
		}
		out(sec.Name+"SecretArn", s.Functions.Secret(sec).SecretArn(), description)
	}
	if s.API.GameServerRole != nil {
		out("GameServerRoleArn", s.API.GameServerRole.RoleArn(), "Role game servers assume to call the game routes")
	}
	if s.API.OperatorRole != nil {
		out("OperatorRoleArn", s.API.OperatorRole.RoleArn(), "Role operators assume to call every service route, the operations (/v1/ops) included")
	}
}

// removal is the removal policy of stateful resources.
func removal(protect bool) awscdk.RemovalPolicy {
	if protect {
		return awscdk.RemovalPolicy_RETAIN
	}
	return awscdk.RemovalPolicy_DESTROY
}
