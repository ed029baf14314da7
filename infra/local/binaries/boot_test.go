package binaries_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/rallyhq/rally/infra/local/apitest"
	"github.com/rallyhq/rally/infra/local/awsapi"
	"github.com/rallyhq/rally/infra/local/binaries"
	"github.com/rallyhq/rally/infra/local/policy"
	"github.com/rallyhq/rally/infra/local/runtimeapi"
	"github.com/rallyhq/rally/infra/local/stack"
	"github.com/rallyhq/rally/infra/local/stacktest"
	"github.com/rallyhq/rally/infra/local/template"
	"github.com/rallyhq/rally/infra/local/template/synth"
	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const root = "../../.."

// samplePrincipals are the local principals of each role and the roles
// the service samples' callers assumed (events/*.service.json and the
// service routes' samples), each where its routes admit it.
func samplePrincipals() routes.Principals {
	p := stack.DefaultPrincipals()
	p[routes.GameServer] = append(p[routes.GameServer], "arn:aws:iam::123456789012:role/rally-dev-game-server")
	p[routes.Operator] = append(p[routes.Operator], "arn:aws:iam::123456789012:role/rally-dev-operator")
	return p
}

// booted is a local stack serving every function of the template through
// its binary, built for the host.
type booted struct {
	stack *stack.Stack
	tpl   *template.Template
	fns   map[string]template.Function
	bins  map[string]string
	log   *logs
}

// boot synthesizes the stack in process, builds every function for the
// host in one go build, and starts a local stack that serves every route,
// processor and consumer through its binary (`make dev ARGS=-binaries`),
// each started once with the environment the template gives it.
func boot(t *testing.T) *booted {
	t.Helper()
	ctx := context.Background()
	b := &booted{fns: map[string]template.Function{}, log: &logs{}}
	// The build runs beside the synthesis: both take a while.
	type built struct {
		bins map[string]string
		err  error
	}
	buildDone := make(chan built, 1)
	go func() {
		bins, err := binaries.BuildWith(ctx, root, t.TempDir(), binaries.Flags{Race: testenv.Race, Strip: true}, routes.Functions()...)
		buildDone <- built{bins, err}
	}()
	raw, err := synth.Template(root, "dev")
	if err != nil {
		t.Fatalf("synthesize the stack: %v", err)
	}
	if b.tpl, err = template.Parse(raw); err != nil {
		t.Fatal(err)
	}
	res := <-buildDone
	if res.err != nil {
		t.Fatal(res.err)
	}
	b.bins = res.bins
	// testenv gives the stack a table prefix of the test's own: a function
	// missing a RALLY_TABLE_* variable would look for the unprefixed name
	// and fail.
	//
	// The stack points the binaries at the local AWS endpoint, each with
	// its own credentials and its role's statements: a call a role does
	// not allow fails its sample here (AccessDeniedException).
	b.stack = stacktest.Start(t, stack.Options{
		Principals: samplePrincipals(),
		Binaries:   &stack.Binaries{Template: b.tpl, Built: b.bins, Instances: instances},
		Log:        b.log,
	})
	fns, err := b.tpl.Functions(b.stack.Endpoints().Local())
	if err != nil {
		t.Fatal(err)
	}
	for _, fn := range fns {
		b.fns[fn.Name] = fn
	}
	return b
}

// One stack and one build serve every part: building every function takes
// minutes on a small machine.
func TestEveryFunctionBootsFromTheTemplate(t *testing.T) {
	b := boot(t)
	inits := b.stack.Info().Inits
	if len(inits) != len(routes.Functions()) {
		t.Fatalf("%d functions started, want every declared one (%d)", len(inits), len(routes.Functions()))
	}
	logInits(t, inits)
	t.Run("and serves the API through them", func(t *testing.T) { servesTheAPI(t, b) })
	t.Run("and spreads concurrent requests over its instances", func(t *testing.T) { spreadsRequests(t, b) })
	t.Run("and answers its samples", func(t *testing.T) { answersSamples(t, b) })
	t.Run("but not with a broken environment", func(t *testing.T) { brokenEnvironments(t, b) })
}

// A favorite through the gateway reaches favorite-game's binary, its
// change reaches the counter processor's binary through the poller, and
// the count is read through count-favorites' binary.
func servesTheAPI(t *testing.T, b *booted) {
	api := apitest.New(t, b.stack)
	api.Player("bianca", "POST", "/v1/favorites/binary-race", nil).Expect(t, http.StatusOK)
	if err := b.stack.WaitIdle(context.Background()); err != nil {
		t.Fatal(err)
	}
	var count struct {
		Count int `json:"count"`
	}
	api.Player("bianca", "GET", "/v1/games/binary-race/favorites/count", nil).Expect(t, http.StatusOK).JSON(t, &count)
	if count.Count != 1 {
		t.Errorf("favorites of binary-race: %d, want 1\n%s", count.Count, b.log.of("counter-processor"))
	}
}

// instances is how many instances of each function the booted stack may
// run at once (make dev ARGS="-binaries -instances=2").
const instances = 2

// Concurrent requests to one route, more than one instance takes at once,
// are served by as many processes as the stack allows, and no more: one
// warm, the others started for them.
func spreadsRequests(t *testing.T, b *booted) {
	pool, _ := b.stack.Binaries().Pool(routes.TopGames.Function)
	if n := pool.Instances(); n != 1 {
		t.Fatalf("%s runs %d instances before the requests, want the one started warm", routes.TopGames.Function, n)
	}
	api := apitest.New(t, b.stack)
	var wg sync.WaitGroup
	statuses := make([]int, 4*instances)
	for i := range statuses {
		wg.Go(func() {
			r, err := api.Try(apitest.Call{Method: "GET", Path: "/v1/games/top", As: fmt.Sprintf("spread-%d", i)})
			if err != nil {
				t.Error(err)
			}
			statuses[i] = r.Status
		})
	}
	wg.Wait()
	for i, status := range statuses {
		if status != http.StatusOK {
			t.Errorf("request %d: status %d", i, status)
		}
	}
	if n := pool.Instances(); n != instances {
		t.Errorf("%d concurrent requests ran in %d instances of %s, want %d", len(statuses), n, routes.TopGames.Function, instances)
	}
}

func answersSamples(t *testing.T, b *booted) {
	// The erasure samples erase alice, whom the other samples act as (the
	// shipper, say, no longer gives her a pseudonym): they run last.
	names := routes.Functions()
	erasure := func(name string) bool {
		return slices.ContainsFunc(routes.All(), func(r routes.Route) bool { return r.Function == name && r.Feature == routes.Privacy }) ||
			slices.ContainsFunc(routes.Processors(), func(p routes.Processor) bool { return p.Function == name && p.Feature == routes.Privacy })
	}
	sort.SliceStable(names, func(i, j int) bool { return !erasure(names[i]) && erasure(names[j]) })
	for _, name := range names {
		samples, _ := filepath.Glob(filepath.Join(root, "events", name+".*json"))
		if len(samples) == 0 {
			t.Errorf("%s has no sample in events/", name)
		}
		for _, sample := range samples {
			t.Run(name+"/"+filepath.Base(sample), func(t *testing.T) {
				pool, _ := b.stack.Binaries().Pool(name)
				event, err := os.ReadFile(sample)
				if err != nil {
					t.Fatal(err)
				}
				event = localize(t, b, name, event)
				mark := b.log.mark()
				res, err := pool.Invoke(context.Background(), event)
				if err != nil {
					t.Fatalf("invoke: %v\nlogs meanwhile:\n%s", err, b.log.since(mark))
				}
				if res.Error != nil {
					t.Fatalf("the function returned an error: %v\nlogs meanwhile:\n%s", res.Error, b.log.since(mark))
				}
				checkResponse(t, name, event, res)
				if t.Failed() {
					t.Logf("logs meanwhile:\n%s", b.log.since(mark))
				}
			})
		}
	}
}

// localize points a sample at the local stack where it names a deployed
// resource: the analytics shipper's records name the tables of a "dev"
// stage (Rally-dev-<Table>), here the test's.
func localize(t *testing.T, b *booted, name string, event []byte) []byte {
	if name != routes.AnalyticsShipper.Function {
		return event
	}
	tables := b.stack.Tables()
	for logical, physical := range tables {
		event = []byte(strings.ReplaceAll(string(event), "table/Rally-dev-"+logical+"/", "table/"+physical+"/"))
	}
	if strings.Contains(string(event), "Rally-dev-") {
		t.Fatalf("the shipper's sample names a table the schema does not declare")
	}
	return event
}

// checkResponse checks what a function answered its sample: a route a
// documented 2xx (or the 4xx its sample is meant to get), a processor or
// consumer no failed records.
func checkResponse(t *testing.T, name string, event []byte, res runtimeapi.Result) {
	t.Helper()
	switch {
	case isRoute(name):
		var resp events.APIGatewayV2HTTPResponse
		if err := json.Unmarshal(res.Payload, &resp); err != nil {
			t.Fatalf("response %s: %v", res.Payload, err)
		}
		if resp.StatusCode/100 != 2 && resp.StatusCode/100 != 4 || resp.StatusCode/100 == 4 && !slices.Contains(notFoundYet, name) {
			t.Errorf("status %d: %s", resp.StatusCode, resp.Body)
		}
	case name == routes.DlqArchiver.Function:
		// The sample's on-failure record points at records no stream
		// holds: the archiver reports it failed, so it stays queued.
		var ev events.SQSEvent
		_ = json.Unmarshal(event, &ev)
		var resp events.SQSEventResponse
		if err := json.Unmarshal(res.Payload, &resp); err != nil || len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != ev.Records[0].MessageId {
			t.Errorf("response %s (%v), want the sample's message reported failed", res.Payload, err)
		}
	default:
		var resp events.DynamoDBEventResponse
		if err := json.Unmarshal(res.Payload, &resp); err != nil || len(resp.BatchItemFailures) > 0 {
			t.Errorf("response %s (%v), want every record applied", res.Payload, err)
		}
	}
}

// notFoundYet are the routes whose sample reads what no other sample
// creates (a job by id, an export by id: the export sample's gets an id of
// its own), so a 404 problem is its sane answer.
var notFoundYet = []string{routes.GetJob.Function, routes.ExportStatus.Function}

func isRoute(name string) bool {
	return slices.ContainsFunc(routes.All(), func(r routes.Route) bool { return r.Function == name })
}

// A function whose environment lacks what it needs must not start, and
// the failure must name the variable: what a CDK change forgetting it
// would do after `cdk deploy`.
func brokenEnvironments(t *testing.T, b *booted) {
	local := b.stack.Endpoints()
	// As the stack runs them: through the local AWS endpoint, each call
	// checked against the function's statements.
	endpoints := binaries.Checked{AWS: b.stack.AWS(), Principals: local.Principals}
	newSet := func(fn template.Function) *binaries.Set {
		set, err := binaries.NewSet(binaries.Options{
			Functions: []template.Function{fn}, Binaries: b.bins, Endpoints: endpoints,
			Region: local.Region, AccountID: local.AccountID, Log: b.log,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = set.Close() })
		return set
	}
	start := func(fn template.Function) error {
		return newSet(fn).Start(context.Background(), 1)[0].Err
	}
	// answer invokes fn's sample on a fresh instance of it.
	answer := func(fn template.Function) events.APIGatewayV2HTTPResponse {
		pool, _ := newSet(fn).Pool(fn.Name)
		event, err := os.ReadFile(filepath.Join(root, "events", fn.Name+".json"))
		if err != nil {
			t.Fatal(err)
		}
		res, err := pool.Invoke(context.Background(), event)
		if err != nil {
			t.Fatal(err)
		}
		var resp events.APIGatewayV2HTTPResponse
		if err := json.Unmarshal(res.Payload, &resp); err != nil {
			t.Fatalf("%s answered %s: %v", fn.Name, res.Payload, err)
		}
		return resp
	}
	without := func(name, variable string) template.Function {
		fn := b.fns[name]
		if _, ok := fn.Env[variable]; !ok {
			t.Fatalf("%s has no %s in the template", name, variable)
		}
		fn.Env = maps.Clone(fn.Env)
		delete(fn.Env, variable)
		return fn
	}
	t.Run("missing cursor secret", func(t *testing.T) {
		err := start(without(routes.ListFavorites.Function, "RALLY_SECRET_ARN"))
		if !errors.Is(err, runtimeapi.ErrInit) || !strings.Contains(err.Error(), "RALLY_SECRET_ARN") {
			t.Fatalf("list-favorites without RALLY_SECRET_ARN: %v, want an init failure naming it", err)
		}
	})
	t.Run("missing log key", func(t *testing.T) {
		err := start(without(routes.FavoriteGame.Function, routes.LogKey.ARNVar))
		if !errors.Is(err, runtimeapi.ErrInit) || !strings.Contains(err.Error(), routes.LogKey.ARNVar) {
			t.Fatalf("favorite-game without %s: %v, want an init failure naming it", routes.LogKey.ARNVar, err)
		}
	})
	t.Run("missing erasure key", func(t *testing.T) {
		err := start(without(routes.ErasureStatus.Function, routes.ErasureKey.ARNVar))
		if !errors.Is(err, runtimeapi.ErrInit) || !strings.Contains(err.Error(), routes.ErasureKey.ARNVar) {
			t.Fatalf("erasure-status without %s: %v, want an init failure naming it", routes.ErasureKey.ARNVar, err)
		}
	})
	t.Run("missing secret grant", func(t *testing.T) {
		// The role may no longer read the erasure key's secret: the
		// function reads it at init, and does not start.
		fn := b.fns[routes.ErasureStatus.Function]
		secret := fn.Env[routes.ErasureKey.ARNVar]
		var kept []policy.Statement
		removed := 0
		for _, st := range fn.Statements {
			n := len(st.Resources)
			st.Resources = slices.DeleteFunc(slices.Clone(st.Resources), func(r string) bool { return r == secret })
			removed += n - len(st.Resources)
			if len(st.Resources) > 0 {
				kept = append(kept, st)
			}
		}
		if removed == 0 {
			t.Fatalf("erasure-status's role grants nothing on %s", secret)
		}
		fn.Statements = kept
		err := start(fn)
		if !errors.Is(err, runtimeapi.ErrInit) || !strings.Contains(err.Error(), "AccessDenied") {
			t.Fatalf("erasure-status without its grant on the erasure key's secret: %v, want an init failure denied the secret", err)
		}
	})
	t.Run("crash at init", func(t *testing.T) {
		fn := b.fns[routes.SubmitScore.Function]
		fn.Env = maps.Clone(fn.Env)
		fn.Env["RALLY_BUDGETS"] = "score=lots"
		err := start(fn)
		var perr *runtimeapi.ProcessError
		if !errors.As(err, &perr) || !errors.Is(err, runtimeapi.ErrInit) || !strings.Contains(perr.Output, "RALLY_BUDGETS") {
			t.Fatalf("submit-score with a bad RALLY_BUDGETS: %v, want an init failure with the process's message", err)
		}
	})
	t.Run("missing table", func(t *testing.T) {
		err := start(without(routes.FavoriteGame.Function, "RALLY_TABLE_REACTIONS"))
		if !errors.Is(err, runtimeapi.ErrInit) || !strings.Contains(err.Error(), "RALLY_TABLE_REACTIONS") {
			t.Fatalf("favorite-game without RALLY_TABLE_REACTIONS: %v, want an init failure naming it", err)
		}
	})
	t.Run("missing mapping grant", func(t *testing.T) {
		// The role may no longer read its stream or park a failed batch:
		// the pollers, which run the mappings as the function's role,
		// refuse it as Lambda does.
		fn := b.fns[routes.CounterProcessor.Function]
		if err := fn.CheckMappings(); err != nil {
			t.Fatalf("the counter processor as the template has it: %v", err)
		}
		for _, action := range []string{"dynamodb:GetRecords", "sqs:SendMessage"} {
			without := fn
			without.Statements = nil
			for _, st := range fn.Statements {
				st.Actions = slices.DeleteFunc(slices.Clone(st.Actions), func(a string) bool { return a == action })
				if len(st.Actions) > 0 {
					without.Statements = append(without.Statements, st)
				}
			}
			if err := without.CheckMappings(); err == nil || !strings.Contains(err.Error(), action) {
				t.Errorf("the counter processor without %s: %v, want an error naming it", action, err)
			}
		}
	})
	t.Run("missing grant", func(t *testing.T) {
		// The role loses its grant on the Reactions table: the write is
		// refused as IAM refuses it, and the sample fails.
		fn := b.fns[routes.FavoriteGame.Function]
		reactions := awsapi.TableARN(b.stack.Tables().Of(schema.Reactions))
		var kept []policy.Statement
		removed := 0
		for _, st := range fn.Statements {
			n := len(st.Resources)
			st.Resources = slices.DeleteFunc(slices.Clone(st.Resources), func(r string) bool { return strings.HasPrefix(r, reactions) })
			removed += n - len(st.Resources)
			if len(st.Resources) > 0 {
				kept = append(kept, st)
			}
		}
		if removed == 0 {
			t.Fatalf("favorite-game's role grants nothing on %s", reactions)
		}
		fn.Statements = kept
		mark := b.log.mark()
		if resp := answer(fn); resp.StatusCode < 500 {
			t.Fatalf("favorite-game without its grant on Reactions answered %d %s, want a 5xx", resp.StatusCode, resp.Body)
		}
		// The function's output reaches the log through a pipe, after its
		// answer: wait for the line.
		denied := func(logs string) bool {
			return strings.Contains(logs, "AccessDeniedException") || strings.Contains(logs, "is not authorized to perform")
		}
		if logs, ok := b.log.await(mark, denied, 10*time.Second); !ok {
			t.Fatalf("no denied call logged:\n%s", logs)
		}
	})
}

// logInits prints each function's init time, slowest first.
func logInits(t *testing.T, inits []binaries.Init) {
	sorted := slices.Clone(inits)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Took > sorted[j].Took })
	var sb strings.Builder
	w := tabwriter.NewWriter(&sb, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "function\tinit ms\t")
	var total time.Duration
	for _, in := range sorted {
		fmt.Fprintf(w, "%s\t%d\t\n", in.Function, in.Took.Milliseconds())
		total += in.Took
	}
	_ = w.Flush()
	t.Logf("init per function (two started at a time, on a shared machine), slowest first; mean %d ms:\n%s",
		(total / time.Duration(max(len(inits), 1))).Milliseconds(), sb.String())
}

// logs keeps every function's output, to show with a failure.
type logs struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (l *logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// mark is where the log is now, for since.
func (l *logs) mark() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Len()
}

// since is what was logged after mark (by every process).
func (l *logs) since(mark int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()[mark:]
}

// await waits up to timeout until what was logged after mark satisfies
// ok, and returns it.
func (l *logs) await(mark int, ok func(string) bool, timeout time.Duration) (string, bool) {
	deadline := time.Now().Add(timeout)
	for {
		logs := l.since(mark)
		if ok(logs) || time.Now().After(deadline) {
			return logs, ok(logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// of is the lines that name function (its logs and metrics do).
func (l *logs) of(function string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range strings.Split(l.buf.String(), "\n") {
		if strings.Contains(line, function) {
			out = append(out, line)
		}
	}
	if len(out) > 40 {
		out = out[len(out)-40:]
	}
	return strings.Join(out, "\n")
}
