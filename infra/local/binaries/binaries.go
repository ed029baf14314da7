// Package binaries runs the deployed artifact locally: each function's
// bootstrap binary, built for the host, with the environment and role the
// synthesized template gives it (infra/local/template), against a local
// Lambda Runtime API (infra/local/runtimeapi), its AWS endpoints and Redis
// pointed at a local stack. `make invoke` runs one function this way and
// `make dev ARGS=-binaries` serves every route and processor through them.
package binaries

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/rallyhq/rally/infra/local/policy"
	"github.com/rallyhq/rally/infra/local/runtimeapi"
	"github.com/rallyhq/rally/infra/local/template"
	"github.com/rallyhq/rally/shared/api"
	"github.com/rallyhq/rally/shared/app"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
	"github.com/rallyhq/rally/shared/streams"
)

// BuildTags are the tags `make build` builds the functions with.
const BuildTags = "lambda.norpc,grpcnotrace"

// Build compiles every named function for the host into dir/<name>
// (dir/<name>/bootstrap is not needed: the runtime execs the path) in one
// go build, which links them in parallel; it returns each one's path.
func Build(ctx context.Context, root, dir string, names ...string) (map[string]string, error) {
	return BuildWith(ctx, root, dir, Flags{}, names...)
}

// Flags are how Build compiles beyond `make build`'s tags.
type Flags struct {
	// Race builds with the race detector. A test built with -race builds
	// its binaries so: they reuse the packages its own build compiled
	// (instead of compiling every dependency a second time, minutes and
	// gigabytes on a small machine) and report a race as the tests do.
	Race bool
	// Strip leaves out the symbol table and debug information (-s -w, as
	// `make build` does): a stack trace still names every frame.
	Strip bool
}

// BuildWith is Build with flags.
func BuildWith(ctx context.Context, root, dir string, flags Flags, names ...string) (map[string]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("binaries: %w", err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("binaries: %w", err)
	}
	args := []string{"build", "-tags", BuildTags}
	if flags.Race {
		args = append(args, "-race")
	}
	if flags.Strip {
		args = append(args, "-ldflags=-s -w")
	}
	args = append(args, "-o", abs+string(filepath.Separator))
	for _, n := range names {
		args = append(args, "./functions/"+n)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("binaries: go build: %w\n%s", err, out)
	}
	out := map[string]string{}
	for _, n := range names {
		out[n] = filepath.Join(abs, n)
	}
	return out, nil
}

// Endpoints gives a function the environment that points it at the local
// stack: its template environment (already resolved for the local stack)
// plus where its AWS clients connect and with which credentials: Checked
// through the local AWS endpoint (per-function credentials, the role's
// statements checked on every call), Direct straight at DynamoDB Local.
type Endpoints interface {
	Environ(fn template.Function) (map[string]string, error)
}

// Direct points the functions straight at DynamoDB Local and the local
// stack's Invoke API with the local static credentials: what `make invoke`
// uses, since the stack's AWS endpoint lives in another process. Each
// secret a function reads is given as its key (routes.Secret KeyVar, what
// config reads when the secret's ARN is not set) and analytics go to the
// local export directory: a deployment still refuses to start without its
// secrets.
type Direct struct {
	// DynamoDB is DynamoDB Local's URL (DynamoDB and its streams).
	DynamoDB string
	// Lambda serves Lambda's Invoke API (the local stack's URL).
	Lambda string
	// Secrets maps the template's secret ARNs to their local values.
	Secrets map[string]string
	// AnalyticsDir receives the analytics export in place of Firehose.
	AnalyticsDir string
	// Principals are the local callers of each role: each function's
	// RALLY_SERVICE_ROLES admits those of the roles its routes admit,
	// besides the template's roles.
	Principals routes.Principals
	// ExportsDir holds export documents in place of the exports bucket,
	// linked through Lambda (the local stack's URL, which serves them).
	ExportsDir string
}

// Environ implements Endpoints.
func (d Direct) Environ(fn template.Function) (map[string]string, error) {
	env := maps.Clone(fn.Env)
	env["AWS_ENDPOINT_URL_DYNAMODB"] = d.DynamoDB
	env["AWS_ENDPOINT_URL_DYNAMODB_STREAMS"] = d.DynamoDB
	if d.Lambda != "" {
		env["AWS_ENDPOINT_URL_LAMBDA"] = d.Lambda
	}
	env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"] = "local", "local"
	for _, sec := range routes.Secrets() {
		arn, ok := env[sec.ARNVar]
		if !ok {
			continue
		}
		value, known := d.Secrets[arn]
		if !known {
			return nil, fmt.Errorf("binaries: %s: %s %s is no secret the local stack holds", fn.Name, sec.ARNVar, arn)
		}
		delete(env, sec.ARNVar)
		env[sec.KeyVar] = value
	}
	if _, ok := env["RALLY_FIREHOSE_STREAM"]; ok {
		if d.AnalyticsDir == "" {
			return nil, fmt.Errorf("binaries: %s ships analytics, but the local stack gave no analytics directory", fn.Name)
		}
		delete(env, "RALLY_FIREHOSE_STREAM")
		env["RALLY_ANALYTICS_DIR"] = d.AnalyticsDir
	}
	admitLocal(env, fn, d.Principals)
	if err := localExports(env, fn.Name, d.ExportsDir, d.Lambda); err != nil {
		return nil, err
	}
	return env, nil
}

// localExports points a function given the exports bucket at the local
// stack's exports directory instead (the local stack keeps no buckets),
// its links at the stack, which serves them.
func localExports(env map[string]string, fn, dir, stackURL string) error {
	if _, ok := env["RALLY_EXPORT_BUCKET"]; !ok {
		return nil
	}
	if dir == "" {
		return fmt.Errorf("binaries: %s writes export documents, but the local stack gave no exports directory", fn)
	}
	delete(env, "RALLY_EXPORT_BUCKET")
	env["RALLY_EXPORTS_DIR"], env["RALLY_EXPORT_LINKS"] = dir, stackURL
	return nil
}

// Caller registers a function with the local AWS endpoint
// (infra/local/awsapi.Server): its role's statements, for fresh credentials.
type Caller interface {
	URL() string
	AddCaller(function string, statements []policy.Statement) aws.Credentials
}

// Checked points the functions at the local AWS endpoint, as Lambda gives
// each function its role: every function gets its own credentials, and
// each of its calls (DynamoDB, its streams, the secrets, the delivery
// stream, Invoke) is checked against its role's statements in the
// template; a call the role does not allow fails with
// AccessDeniedException.
type Checked struct {
	AWS Caller
	// Principals are added to each RALLY_SERVICE_ROLES, as in Direct.
	Principals routes.Principals
	// ExportsDir and StackURL stand in for the exports bucket, as in
	// Direct.
	ExportsDir, StackURL string
}

// Environ implements Endpoints.
func (c Checked) Environ(fn template.Function) (map[string]string, error) {
	env := maps.Clone(fn.Env)
	creds := c.AWS.AddCaller(fn.Name, fn.Statements)
	env["AWS_ENDPOINT_URL"] = c.AWS.URL()
	env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"], env["AWS_SESSION_TOKEN"] = creds.AccessKeyID, creds.SecretAccessKey, creds.SessionToken
	admitLocal(env, fn, c.Principals)
	if err := localExports(env, fn.Name, c.ExportsDir, c.StackURL); err != nil {
		return nil, err
	}
	return env, nil
}

// admitLocal adds to the template's allow-list of fn (RALLY_SERVICE_ROLES)
// the local principals of the roles its routes admit: the local operator
// on every service route, the local game server on the game routes alone.
func admitLocal(env map[string]string, fn template.Function, local routes.Principals) {
	roles, ok := env["RALLY_SERVICE_ROLES"]
	if !ok {
		return
	}
	if extra := local.Of(routes.AdmittedBy(routes.All(), fn.Name)); len(extra) > 0 {
		env["RALLY_SERVICE_ROLES"] = strings.Join(append(strings.Split(roles, ","), extra...), ",")
	}
}

// SecretValue is the local value of a template secret: the key of the
// routes.Secret whose construct it is (<Name>Secret) as the local stack
// uses it in process (its KeyVar when set, else its local key), so that
// the binaries sign cursors and hash users (in logs, in erasure records)
// as the in-process handlers do.
func SecretValue(s template.Secret) string {
	for _, sec := range routes.Secrets() {
		if !strings.Contains(s.Name, sec.Name+"Secret") {
			continue
		}
		if v := os.Getenv(sec.KeyVar); v != "" {
			return v
		}
		return sec.Local
	}
	return "local-" + s.Name
}

// Stack is what a running local stack offers the binaries; it writes it to
// <state>/endpoints.json on start (and serves it at GET
// /_local/endpoints), which is how `make invoke` finds it.
type Stack struct {
	// URL is the gateway (and the Invoke API).
	URL string `json:"url"`
	// DynamoDB is DynamoDB Local's URL.
	DynamoDB string `json:"dynamodb"`
	// Redis is the local Redis's URL; RedisCluster whether it is a cluster.
	Redis        string `json:"redis"`
	RedisCluster bool   `json:"redis_cluster"`
	// Tables are the physical table names.
	Tables schema.Names `json:"tables"`
	// AnalyticsDir is the analytics export's directory (absolute).
	AnalyticsDir string `json:"analytics_dir"`
	// ExportsDir holds the export documents (absolute: the state
	// directory, documents under exports/).
	ExportsDir string `json:"exports_dir"`
	Region     string `json:"region"`
	AccountID  string `json:"account_id"`
	// Principals are the local callers of each role, admitted besides
	// the template's roles.
	Principals routes.Principals `json:"principals"`
	// PID is the local stack's process.
	PID int `json:"pid"`
}

// EndpointsFile is where in the state directory a running stack writes
// its Stack.
const EndpointsFile = "endpoints.json"

// ReadStack reads the endpoints a running local stack wrote in stateDir.
func ReadStack(stateDir string) (Stack, error) {
	var s Stack
	raw, err := os.ReadFile(filepath.Join(stateDir, EndpointsFile))
	if errors.Is(err, os.ErrNotExist) {
		return s, fmt.Errorf("binaries: no local stack is running (%s is missing): start one with `make dev`", filepath.Join(stateDir, EndpointsFile))
	}
	if err != nil {
		return s, fmt.Errorf("binaries: %w", err)
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return s, fmt.Errorf("binaries: %s: %w", filepath.Join(stateDir, EndpointsFile), err)
	}
	return s, nil
}

// Write writes s to stateDir/endpoints.json.
func (s Stack) Write(stateDir string) error {
	raw, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(stateDir, EndpointsFile), append(raw, '\n'), 0o644)
}

// Local is what the template's resources resolve to in this stack.
func (s Stack) Local() template.Local {
	return template.Local{
		Tables: s.Tables, RedisURL: s.Redis, RedisCluster: s.RedisCluster,
		Region: s.Region, AccountID: s.AccountID, SecretValue: SecretValue,
	}
}

// Endpoints points binaries run beside this stack (`make invoke`) at it:
// Direct, since its AWS endpoint is in the stack's process.
func (s Stack) Endpoints(tpl *template.Template) Endpoints {
	secrets := map[string]string{}
	for _, sec := range tpl.Secrets(s.Local()) {
		secrets[sec.ARN] = sec.Value
	}
	return Direct{DynamoDB: s.DynamoDB, Lambda: s.URL, Secrets: secrets, AnalyticsDir: s.AnalyticsDir, ExportsDir: s.ExportsDir, Principals: s.Principals}
}

// Options configures a Set.
type Options struct {
	// Functions are the template's functions to run.
	Functions []template.Function
	// Binaries maps each function to its built binary.
	Binaries map[string]string
	// Endpoints points them at the local stack.
	Endpoints Endpoints
	// Region and AccountID make the functions' ARNs.
	Region, AccountID string
	// MaxInstances per function (default 1: one warm instance).
	MaxInstances int
	// Log receives the processes' output.
	Log io.Writer
}

// Set is the pools of a template's functions.
type Set struct {
	pools map[string]*runtimeapi.Pool
	order []string
}

// NewSet prepares a pool per function; none starts until Start or its
// first invocation.
func NewSet(opts Options) (*Set, error) {
	s := &Set{pools: map[string]*runtimeapi.Pool{}}
	for _, fn := range opts.Functions {
		env, err := opts.Endpoints.Environ(fn)
		if err != nil {
			return nil, err
		}
		bin, ok := opts.Binaries[fn.Name]
		if !ok {
			return nil, fmt.Errorf("binaries: %s is not built", fn.Name)
		}
		p, err := runtimeapi.NewPool(runtimeapi.Function{
			Name: fn.Name, Binary: bin, Env: env, Timeout: fn.Timeout, MemoryMB: fn.MemoryMB,
			Region: opts.Region, AccountID: opts.AccountID, MaxInstances: opts.MaxInstances, Log: opts.Log,
		})
		if err != nil {
			return nil, err
		}
		s.pools[fn.Name] = p
		s.order = append(s.order, fn.Name)
	}
	return s, nil
}

// Pool is the named function's pool.
func (s *Set) Pool(name string) (*runtimeapi.Pool, bool) {
	p, ok := s.pools[name]
	return p, ok
}

// Names lists the functions, in the template's order.
func (s *Set) Names() []string { return slices.Clone(s.order) }

// Init is one function's cold start.
type Init struct {
	Function string
	Took     time.Duration
	Err      error
}

// Start starts one instance of every function, a few at a time, and
// reports each one's init.
func (s *Set) Start(ctx context.Context, parallel int) []Init {
	out := make([]Init, len(s.order))
	sem := make(chan struct{}, max(parallel, 1))
	var wg sync.WaitGroup
	for i, name := range s.order {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			took, err := s.pools[name].Start(ctx)
			out[i] = Init{Function: name, Took: took, Err: err}
		})
	}
	wg.Wait()
	return out
}

// Close stops every instance.
func (s *Set) Close() error {
	var wg sync.WaitGroup
	for _, p := range s.pools {
		wg.Go(func() { _ = p.Close() })
	}
	wg.Wait()
	return nil
}

// invoke runs ev through pool and decodes its response into out: a
// function error or a process failure is an error, as the Lambda service
// reports it to API Gateway or an event source mapping.
func invoke(ctx context.Context, p *runtimeapi.Pool, ev, out any) error {
	payload, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	res, err := p.Invoke(ctx, payload)
	if err != nil {
		return err
	}
	if res.Error != nil {
		return fmt.Errorf("%s: %w", p.Function().Name, res.Error)
	}
	if err := json.Unmarshal(res.Payload, out); err != nil {
		return fmt.Errorf("%s: response %.200s: %w", p.Function().Name, res.Payload, err)
	}
	return nil
}

// HTTP serves a route through the function's binary.
func HTTP(p *runtimeapi.Pool) api.Handler {
	return func(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		var resp events.APIGatewayV2HTTPResponse
		err := invoke(ctx, p, ev, &resp)
		return resp, err
	}
}

// Stream hands a processor's batches to the function's binary; the
// partial batch failures come back from it.
func Stream(p *runtimeapi.Pool) streams.Handler {
	return func(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		var resp events.DynamoDBEventResponse
		err := invoke(ctx, p, ev, &resp)
		return resp, err
	}
}

// Queue hands a queue consumer's messages to the function's binary.
func Queue(p *runtimeapi.Pool) app.QueueHandler {
	return func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		var resp events.SQSEventResponse
		err := invoke(ctx, p, ev, &resp)
		return resp, err
	}
}
