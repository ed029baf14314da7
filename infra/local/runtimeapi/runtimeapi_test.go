package runtimeapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rallyhq/rally/infra/local/runtimeapi"
	"github.com/rallyhq/rally/infra/local/testenv"
)

// build compiles a main package into dir once per test binary.
var builds sync.Map

func build(t *testing.T, pkg string, tags ...string) string {
	t.Helper()
	if bin, ok := builds.Load(pkg); ok {
		return bin.(string)
	}
	dir, err := os.MkdirTemp("", "runtimeapi-test")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, filepath.Base(pkg))
	args := []string{"build", "-o", bin}
	if testenv.Race {
		// Reuses what the test build compiled.
		args = append(args, "-race")
	}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	cmd := exec.Command("go", append(args, pkg)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	builds.Store(pkg, bin)
	return bin
}

func TestMain(m *testing.M) {
	code := m.Run()
	builds.Range(func(_, bin any) bool {
		os.RemoveAll(filepath.Dir(bin.(string)))
		return true
	})
	os.Exit(code)
}

type reply struct {
	Echo     string `json:"echo"`
	Env      string `json:"env"`
	PID      int    `json:"pid"`
	Deadline string `json:"deadline"`
	ARN      string `json:"arn"`
	Trace    string `json:"trace"`
}

func fake(t *testing.T, fn runtimeapi.Function) *runtimeapi.Pool {
	t.Helper()
	fn.Binary = build(t, "./testdata/fake")
	if fn.Name == "" {
		fn.Name = "fake"
	}
	if fn.Log == nil {
		fn.Log = &lines{}
	}
	p, err := runtimeapi.NewPool(fn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func invoke(t *testing.T, p *runtimeapi.Pool, event string) (runtimeapi.Result, reply) {
	t.Helper()
	res, err := p.Invoke(context.Background(), []byte(event))
	if err != nil {
		t.Fatalf("invoke %s: %v", event, err)
	}
	var r reply
	if res.Error == nil {
		if err := json.Unmarshal(res.Payload, &r); err != nil {
			t.Fatalf("response %s: %v", res.Payload, err)
		}
	}
	return res, r
}

func TestInvocationsReachOneWarmInstanceWithLambdasHeaders(t *testing.T) {
	p := fake(t, runtimeapi.Function{Timeout: 5 * time.Second, AccountID: "000000000000"})
	before := time.Now()
	first, r1 := invoke(t, p, `{"echo":"one"}`)
	second, r2 := invoke(t, p, `{"echo":"two"}`)

	if r1.Echo != "one" || r2.Echo != "two" {
		t.Errorf("responses echo %q and %q, want one and two", r1.Echo, r2.Echo)
	}
	if first.Init <= 0 || second.Init != 0 {
		t.Errorf("init of the first invocation %s (want > 0), of the second %s (want 0: warm)", first.Init, second.Init)
	}
	if r1.PID != r2.PID {
		t.Errorf("the second invocation ran in process %d, not the warm %d", r2.PID, r1.PID)
	}
	if want := "arn:aws:lambda:us-east-1:000000000000:function:fake"; r1.ARN != want {
		t.Errorf("invoked function ARN %q, want %q", r1.ARN, want)
	}
	ms, err := strconv.ParseInt(r1.Deadline, 10, 64)
	if deadline := time.UnixMilli(ms); err != nil || deadline.Before(before.Add(4*time.Second)) || deadline.After(time.Now().Add(5*time.Second)) {
		t.Errorf("deadline %q is not the invocation's start plus the 5s timeout", r1.Deadline)
	}
	if !strings.HasPrefix(r1.Trace, "Root=1-") {
		t.Errorf("trace header %q is not an X-Ray trace id", r1.Trace)
	}
}

func TestTheProcessGetsTheFunctionsEnvironmentAndLambdasOnly(t *testing.T) {
	t.Setenv("RALLY_CALLER_ONLY", "leaked")
	p := fake(t, runtimeapi.Function{Name: "favorite-game", MemoryMB: 512, Env: map[string]string{"RALLY_TABLE_REACTIONS": "Reactions"}})
	for variable, want := range map[string]string{
		"RALLY_TABLE_REACTIONS":           "Reactions",
		"AWS_LAMBDA_FUNCTION_NAME":        "favorite-game",
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "512",
		"AWS_REGION":                      "us-east-1",
		"_HANDLER":                        "bootstrap",
		"AWS_LAMBDA_FUNCTION_VERSION":     "$LATEST",
		"RALLY_CALLER_ONLY":               "",
	} {
		if _, r := invoke(t, p, `{"env":"`+variable+`"}`); r.Env != want {
			t.Errorf("%s=%q in the function, want %q", variable, r.Env, want)
		}
	}
}

func TestAFunctionErrorKeepsTheInstanceWarm(t *testing.T) {
	p := fake(t, runtimeapi.Function{})
	_, warm := invoke(t, p, `{}`)
	res, _ := invoke(t, p, `{"fail":"game not found"}`)
	if res.Error == nil || res.Error.Message != "game not found" || res.Error.Type != "errorString" {
		t.Fatalf("function error %+v, want errorString: game not found", res.Error)
	}
	if _, after := invoke(t, p, `{}`); after.PID != warm.PID {
		t.Errorf("after a function error the instance was replaced (%d, was %d)", after.PID, warm.PID)
	}
}

func TestATimeoutKillsTheInstanceAndTheNextInvocationStartsCold(t *testing.T) {
	p := fake(t, runtimeapi.Function{Timeout: 300 * time.Millisecond})
	_, warm := invoke(t, p, `{}`)
	started := time.Now()
	_, err := p.Invoke(context.Background(), []byte(`{"sleep":"10s"}`))
	if !errors.Is(err, runtimeapi.ErrTimeout) {
		t.Fatalf("invocation past the timeout: %v, want ErrTimeout", err)
	}
	if took := time.Since(started); took > 3*time.Second {
		t.Errorf("the timed-out invocation returned after %s, not at the 300ms timeout", took)
	}
	if process, _ := os.FindProcess(warm.PID); process.Signal(syscall.Signal(0)) == nil {
		t.Errorf("process %d still runs after its invocation timed out", warm.PID)
	}
	res, next := invoke(t, p, `{}`)
	if res.Init == 0 || next.PID == warm.PID {
		t.Errorf("after a timeout the next invocation ran warm in %d (init %s), want a new instance", next.PID, res.Init)
	}
}

func TestACrashDuringAnInvocationIsReportedWithItsOutput(t *testing.T) {
	p := fake(t, runtimeapi.Function{})
	_, err := p.Invoke(context.Background(), []byte(`{"exit":true}`))
	var perr *runtimeapi.ProcessError
	if !errors.As(err, &perr) || !errors.Is(err, runtimeapi.ErrCrashed) || !strings.Contains(perr.Output, "exiting mid-invocation") {
		t.Fatalf("crash: %v, want ErrCrashed with the process's output", err)
	}
	if res, r := invoke(t, p, `{"echo":"again"}`); r.Echo != "again" || res.Init == 0 {
		t.Errorf("after a crash: %+v (init %s), want a fresh instance answering", r, res.Init)
	}
}

func TestInitFailuresAreErrorsWithTheProcessOutput(t *testing.T) {
	for mode, want := range map[string]string{
		"crash": "FAKE_SETTING is not set",                  // printed to stderr before exit 3
		"error": "Runtime.ConfigError: FAKE_SETTING is not", // posted to /init/error
		"hang":  "init did not finish within 500ms",
	} {
		t.Run(mode, func(t *testing.T) {
			p := fake(t, runtimeapi.Function{InitTimeout: 500 * time.Millisecond, Env: map[string]string{"FAKE_INIT": mode}})
			_, err := p.Start(context.Background())
			if !errors.Is(err, runtimeapi.ErrInit) || !strings.Contains(err.Error(), want) {
				t.Fatalf("start: %v, want ErrInit mentioning %q", err, want)
			}
			if _, err := p.Invoke(context.Background(), nil); !errors.Is(err, runtimeapi.ErrInit) {
				t.Errorf("invoke after an init failure: %v, want ErrInit again", err)
			}
		})
	}
}

func TestConcurrentInvocationsQueueForOneInstanceOrSpreadUpToTheLimit(t *testing.T) {
	run := func(p *runtimeapi.Pool, n int) (pids map[int]bool, took time.Duration) {
		if _, err := p.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		pids = map[int]bool{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		started := time.Now()
		for range n {
			wg.Go(func() {
				_, r := invoke(t, p, `{"sleep":"300ms"}`)
				mu.Lock()
				pids[r.PID] = true
				mu.Unlock()
			})
		}
		wg.Wait()
		return pids, time.Since(started)
	}
	pids, took := run(fake(t, runtimeapi.Function{}), 3)
	if len(pids) != 1 || took < 900*time.Millisecond {
		t.Errorf("one instance: 3 invocations of 300ms ran in %d processes in %s, want 1 process, one after another", len(pids), took)
	}
	two := fake(t, runtimeapi.Function{MaxInstances: 2})
	if pids, _ := run(two, 4); len(pids) != 2 || two.Instances() != 2 {
		t.Errorf("up to two instances: 4 concurrent invocations ran in %d processes (%d running), want 2", len(pids), two.Instances())
	}
}

func TestTheProcessOutputGoesToTheLog(t *testing.T) {
	log := &lines{}
	p := fake(t, runtimeapi.Function{Name: "put-game", Log: log})
	invoke(t, p, `{}`)
	if !strings.Contains(log.String(), `{"msg":"init","function":"put-game"}`) {
		t.Errorf("log %q lacks the line the function printed at init", log.String())
	}
}

// A real function: its bootstrap built as `make build` builds it (for the
// host), answering an API Gateway event through the Runtime API.
func TestARealFunctionAnswersThroughTheRuntimeAPI(t *testing.T) {
	event, err := os.ReadFile("../../../events/put-game.json")
	if err != nil {
		t.Fatal(err)
	}
	var ev map[string]any
	if err := json.Unmarshal(event, &ev); err != nil {
		t.Fatal(err)
	}
	ev["body"] = `{"title": 42}`
	event, _ = json.Marshal(ev)
	p, err := runtimeapi.NewPool(runtimeapi.Function{
		Name:    "put-game",
		Binary:  build(t, "../../../functions/put-game", "lambda.norpc", "grpcnotrace"),
		Timeout: 10 * time.Second,
		Env: map[string]string{
			"RALLY_STAGE":         "local",
			"RALLY_FUNCTION":      "put-game",
			"RALLY_TRACING":       "false",
			"RALLY_SERVICE_ROLES": "arn:aws:iam::123456789012:role/rally-dev-game-server",
			// Nothing listens here: a refused body must not reach DynamoDB.
			"RALLY_DYNAMODB_ENDPOINT": "http://127.0.0.1:9",
		},
		Log: &lines{},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	res, err := p.Invoke(context.Background(), event)
	if err != nil || res.Error != nil {
		t.Fatalf("invoke: %v %v", err, res.Error)
	}
	var resp struct {
		StatusCode int               `json:"statusCode"`
		Headers    map[string]string `json:"headers"`
		Body       string            `json:"body"`
	}
	if err := json.Unmarshal(res.Payload, &resp); err != nil {
		t.Fatalf("response %s: %v", res.Payload, err)
	}
	if resp.StatusCode != 400 || resp.Headers["Content-Type"] != "application/problem+json" {
		t.Errorf("a game titled 42: %d %v %s, want 400 application/problem+json", resp.StatusCode, resp.Headers, resp.Body)
	}
	if res.Init <= 0 || res.Duration <= 0 {
		t.Errorf("init %s and duration %s, want both measured", res.Init, res.Duration)
	}
}

// lines is a log that tests read.
type lines struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
