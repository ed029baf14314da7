// Package runtimeapi runs a function's real binary as Lambda does: it
// serves the Lambda Runtime API (/2018-06-01/runtime/...) the binary's
// runtime client polls, starts the process with the function's environment,
// hands it one invocation at a time, enforces the function's timeout (the
// instance is killed and the next invocation starts a new one) and reports
// how long init and each invocation took. It is what `make invoke` and
// `make dev ARGS=-binaries` run the `bootstrap` binaries with.
//
// The AWS Lambda Runtime Interface Emulator resolves from the module proxy
// and builds, but it is a command, not a library (its packages are
// internal): a container's entrypoint running one instance with two ports
// of its own, its init and invoke times only in its log, taking one
// invocation at a time (a concurrent second one crashed it rather than
// wait). The stack needs a pool of instances per function that queues,
// kills an instance that times out and reports each init.
package runtimeapi

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Function is one Lambda function as the template deploys it.
type Function struct {
	// Name is the function's name (functions/<name>); it is also the name
	// it is invoked by locally.
	Name string
	// Binary is the built bootstrap.
	Binary string
	// Env is the function's environment (the template's, resolved for the
	// local stack). The process gets it and the variables Lambda sets,
	// nothing of the caller's environment.
	Env map[string]string
	// Timeout is the function's timeout (default 3s, Lambda's).
	Timeout time.Duration
	// MemoryMB is AWS_LAMBDA_FUNCTION_MEMORY_SIZE (default 128).
	MemoryMB int
	// Region and AccountID make the invoked function's ARN (defaults
	// us-east-1 and 000000000000).
	Region, AccountID string
	// InitTimeout bounds init, from exec to the first request for an
	// invocation (default 10s, Lambda's init phase).
	InitTimeout time.Duration
	// MaxInstances is how many instances may run at once; invocations
	// beyond them queue (default 1: one warm instance).
	MaxInstances int
	// Log receives what the process prints, line by line (default
	// stderr).
	Log io.Writer
}

// Result is one invocation's outcome.
type Result struct {
	// Payload is the function's response: what it posted to
	// /invocation/{id}/response, or the error document it posted to
	// /invocation/{id}/error.
	Payload []byte
	// Error is set when the function reported an error for the invocation
	// (a handler returning an error, a panic): the function ran, the
	// invocation failed, and the instance stays warm.
	Error *FunctionError
	// Init is how long this invocation's cold start took (exec to the
	// first request for an invocation); zero when an instance was warm.
	Init time.Duration
	// Duration is the invocation's own time, from handing the event to
	// the instance to its response.
	Duration time.Duration
}

// FunctionError is an error the function reported through the Runtime
// API, in Lambda's shape.
type FunctionError struct {
	Type    string   `json:"errorType"`
	Message string   `json:"errorMessage"`
	Trace   []string `json:"stackTrace,omitempty"`
}

func (e *FunctionError) Error() string {
	if e.Type == "" {
		return e.Message
	}
	return e.Type + ": " + e.Message
}

// Errors an invocation can end with besides the function's own.
var (
	// ErrInit means the instance never became ready: the process could
	// not start, crashed, exited or reported /init/error during init, or
	// init outlasted InitTimeout.
	ErrInit = errors.New("runtimeapi: init failed")
	// ErrTimeout means the invocation outlasted the function's timeout;
	// the instance was killed, as Lambda does.
	ErrTimeout = errors.New("runtimeapi: task timed out")
	// ErrCrashed means the process exited during an invocation.
	ErrCrashed = errors.New("runtimeapi: runtime exited")
	// ErrClosed means the pool was closed.
	ErrClosed = errors.New("runtimeapi: closed")
)

// ProcessError is an init failure or a crash, with what the process
// printed: the first thing to read when a binary will not start.
type ProcessError struct {
	Function string
	// Kind is ErrInit, ErrTimeout or ErrCrashed.
	Kind error
	// Reason says what happened (the exit status, the /init/error body).
	Reason string
	// Output is the tail of the process's stdout and stderr.
	Output string
}

func (e *ProcessError) Error() string {
	msg := fmt.Sprintf("%s: %v: %s", e.Function, e.Kind, e.Reason)
	if out := strings.TrimSpace(e.Output); out != "" {
		msg += "\noutput:\n" + out
	}
	return msg
}

func (e *ProcessError) Unwrap() error { return e.Kind }

// Pool runs the instances of one function: Invoke hands each invocation to
// an idle instance, starts one while fewer than MaxInstances run, or waits
// for one to come free. An instance that timed out or crashed is gone; the
// next invocation starts another (a cold start).
type Pool struct {
	fn   Function
	idle chan *instance
	// slots holds one token per instance that may still be started.
	slots chan struct{}

	mu        sync.Mutex
	instances map[*instance]bool
	closed    chan struct{}
	closeOnce sync.Once
}

// NewPool checks fn and returns its pool; no instance runs until Start or
// the first Invoke.
func NewPool(fn Function) (*Pool, error) {
	if fn.Name == "" {
		return nil, errors.New("runtimeapi: a function needs a name")
	}
	if _, err := os.Stat(fn.Binary); err != nil {
		return nil, fmt.Errorf("runtimeapi: %s: binary: %w", fn.Name, err)
	}
	if fn.Timeout <= 0 {
		fn.Timeout = 3 * time.Second
	}
	if fn.MemoryMB <= 0 {
		fn.MemoryMB = 128
	}
	if fn.Region == "" {
		fn.Region = "us-east-1"
	}
	if fn.AccountID == "" {
		fn.AccountID = "000000000000"
	}
	if fn.InitTimeout <= 0 {
		fn.InitTimeout = 10 * time.Second
	}
	if fn.MaxInstances <= 0 {
		fn.MaxInstances = 1
	}
	if fn.Log == nil {
		fn.Log = os.Stderr
	}
	p := &Pool{
		fn: fn, idle: make(chan *instance, fn.MaxInstances), slots: make(chan struct{}, fn.MaxInstances),
		instances: map[*instance]bool{}, closed: make(chan struct{}),
	}
	for range fn.MaxInstances {
		p.slots <- struct{}{}
	}
	return p, nil
}

// Function is the function the pool runs, with its defaults applied.
func (p *Pool) Function() Function { return p.fn }

// ARN is the function's ARN in the local account.
func (p *Pool) ARN() string {
	return "arn:aws:lambda:" + p.fn.Region + ":" + p.fn.AccountID + ":function:" + p.fn.Name
}

// Start starts an instance now (a warm-up) and returns how long its init
// took; an init failure is a *ProcessError.
func (p *Pool) Start(ctx context.Context) (time.Duration, error) {
	select {
	case <-p.slots:
	case <-p.closed:
		return 0, ErrClosed
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	inst, err := p.start(ctx)
	if err != nil {
		p.slots <- struct{}{}
		return 0, err
	}
	p.idle <- inst
	return inst.init, nil
}

// Invoke runs one invocation with payload on an instance and returns its
// result. The error is a *ProcessError for an init failure, a crash or a
// timeout, and ctx's error when ctx ended first (the invocation, if handed
// over, runs on until its own timeout).
func (p *Pool) Invoke(ctx context.Context, payload []byte) (Result, error) {
	var inst *instance
	var cold time.Duration
	select {
	case inst = <-p.idle: // a warm instance first
	default:
	}
	if inst != nil {
		return p.run(inst, 0, payload)
	}
	select {
	case inst = <-p.idle:
	case <-p.closed:
		return Result{}, ErrClosed
	case <-ctx.Done():
		return Result{}, ctx.Err()
	case <-p.slots:
		var err error
		if inst, err = p.start(ctx); err != nil {
			p.slots <- struct{}{}
			return Result{}, err
		}
		cold = inst.init
	}
	return p.run(inst, cold, payload)
}

// run invokes inst and puts it back, or frees its slot when it died.
func (p *Pool) run(inst *instance, cold time.Duration, payload []byte) (Result, error) {
	res, err := inst.invoke(payload)
	res.Init = cold
	if inst.alive() {
		p.idle <- inst
	} else {
		p.forget(inst)
		p.slots <- struct{}{}
	}
	return res, err
}

func (p *Pool) start(ctx context.Context) (*instance, error) {
	inst := &instance{fn: &p.fn, arn: p.ARN()}
	p.mu.Lock()
	select {
	case <-p.closed:
		p.mu.Unlock()
		return nil, ErrClosed
	default:
	}
	p.instances[inst] = true
	p.mu.Unlock()
	if err := inst.start(ctx); err != nil {
		p.forget(inst)
		return nil, err
	}
	return inst, nil
}

// Instances is how many instances are running (or starting).
func (p *Pool) Instances() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.instances)
}

func (p *Pool) forget(inst *instance) {
	p.mu.Lock()
	delete(p.instances, inst)
	p.mu.Unlock()
}

// Close stops every instance: SIGTERM, then SIGKILL after a short grace,
// as Lambda's shutdown does.
func (p *Pool) Close() error {
	p.closeOnce.Do(func() { close(p.closed) })
	p.mu.Lock()
	insts := make([]*instance, 0, len(p.instances))
	for inst := range p.instances {
		insts = append(insts, inst)
	}
	p.instances = map[*instance]bool{}
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, inst := range insts {
		wg.Go(func() { inst.stop(500 * time.Millisecond) })
	}
	wg.Wait()
	return nil
}

// instance is one process of a function, with its own Runtime API
// endpoint (AWS_LAMBDA_RUNTIME_API).
type instance struct {
	fn  *Function
	arn string

	ln     net.Listener
	server *http.Server
	cmd    *exec.Cmd
	out    *output
	init   time.Duration

	// next hands an invocation to the runtime's pending /next request.
	next      chan *invocation
	ready     chan struct{}
	readyOnce sync.Once
	initError chan []byte
	// exited is closed once the process has exited; exitErr says how.
	exited  chan struct{}
	exitErr error

	mu      sync.Mutex
	pending map[string]*invocation
	dead    bool
}

type invocation struct {
	id       string
	payload  []byte
	deadline time.Time
	done     chan outcome
}

type outcome struct {
	body   []byte
	failed bool
}

// start execs the binary and waits for its first /next: init is over.
func (i *instance) start(ctx context.Context) error {
	var err error
	if i.ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		return fmt.Errorf("runtimeapi: %s: listen: %w", i.fn.Name, err)
	}
	i.next = make(chan *invocation)
	i.ready = make(chan struct{})
	i.initError = make(chan []byte, 1)
	i.exited = make(chan struct{})
	i.pending = map[string]*invocation{}
	i.out = &output{log: i.fn.Log, max: 16 << 10}
	i.server = &http.Server{Handler: i.routes(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = i.server.Serve(i.ln) }()

	i.cmd = exec.Command(i.fn.Binary)
	i.cmd.Env = i.environ()
	i.cmd.Stdout = i.out
	i.cmd.Stderr = i.out
	i.cmd.SysProcAttr = sysProcAttr()
	began := time.Now()
	if err := i.cmd.Start(); err != nil {
		_ = i.server.Close()
		return &ProcessError{Function: i.fn.Name, Kind: ErrInit, Reason: err.Error()}
	}
	go func() {
		i.exitErr = i.cmd.Wait()
		i.out.flush()
		i.mu.Lock()
		i.dead = true
		i.mu.Unlock()
		close(i.exited)
	}()
	timer := time.NewTimer(i.fn.InitTimeout)
	defer timer.Stop()
	fail := func(reason string) error {
		i.stop(0)
		return &ProcessError{Function: i.fn.Name, Kind: ErrInit, Reason: reason, Output: i.out.tail()}
	}
	select {
	case <-i.ready:
		i.init = time.Since(began)
		return nil
	case body := <-i.initError:
		return fail("the runtime reported an init error: " + describe(body))
	case <-i.exited:
		return fail(exitReason(i.exitErr) + " during init")
	case <-timer.C:
		return fail(fmt.Sprintf("init did not finish within %s", i.fn.InitTimeout))
	case <-ctx.Done():
		i.stop(0)
		return ctx.Err()
	}
}

// environ is what Lambda gives a provided.al2023 function: its own
// variables, the runtime's, and nothing of the caller's.
func (i *instance) environ() []string {
	lambda := map[string]string{
		"PATH":                            "/usr/local/bin:/usr/bin:/bin",
		"LANG":                            "en_US.UTF-8",
		"TZ":                              ":UTC",
		"HOME":                            os.TempDir(),
		"AWS_EC2_METADATA_DISABLED":       "true",
		"AWS_REGION":                      i.fn.Region,
		"AWS_DEFAULT_REGION":              i.fn.Region,
		"AWS_EXECUTION_ENV":               "AWS_Lambda_provided.al2023",
		"AWS_LAMBDA_FUNCTION_NAME":        i.fn.Name,
		"AWS_LAMBDA_FUNCTION_VERSION":     "$LATEST",
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": strconv.Itoa(i.fn.MemoryMB),
		"AWS_LAMBDA_LOG_GROUP_NAME":       "/aws/lambda/" + i.fn.Name,
		"AWS_LAMBDA_LOG_STREAM_NAME":      "local/" + randomHex(16),
		"AWS_LAMBDA_INITIALIZATION_TYPE":  "on-demand",
		"AWS_LAMBDA_RUNTIME_API":          i.ln.Addr().String(),
		"_HANDLER":                        "bootstrap",
	}
	env := make([]string, 0, len(lambda)+len(i.fn.Env))
	for k, v := range i.fn.Env {
		if _, reserved := lambda[k]; !reserved {
			env = append(env, k+"="+v)
		}
	}
	for k, v := range lambda {
		env = append(env, k+"="+v)
	}
	return env
}

const api = "/2018-06-01/runtime"

func (i *instance) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+api+"/invocation/next", i.serveNext)
	mux.HandleFunc("POST "+api+"/invocation/{id}/response", func(w http.ResponseWriter, r *http.Request) {
		i.finish(w, r, false)
	})
	mux.HandleFunc("POST "+api+"/invocation/{id}/error", func(w http.ResponseWriter, r *http.Request) {
		i.finish(w, r, true)
	})
	mux.HandleFunc("POST "+api+"/init/error", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		select {
		case i.initError <- body:
		default:
		}
		writeStatus(w, http.StatusAccepted)
	})
	return mux
}

// serveNext blocks until an invocation is handed over (Lambda's freeze
// between invocations), then sends it with Lambda's headers.
func (i *instance) serveNext(w http.ResponseWriter, r *http.Request) {
	i.readyOnce.Do(func() { close(i.ready) })
	var inv *invocation
	select {
	case inv = <-i.next:
	case <-r.Context().Done():
		return
	case <-i.exited:
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Lambda-Runtime-Aws-Request-Id", inv.id)
	h.Set("Lambda-Runtime-Deadline-Ms", strconv.FormatInt(inv.deadline.UnixMilli(), 10))
	h.Set("Lambda-Runtime-Invoked-Function-Arn", i.arn)
	h.Set("Lambda-Runtime-Trace-Id", traceID(inv.deadline))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(inv.payload)
}

func (i *instance) finish(w http.ResponseWriter, r *http.Request, failed bool) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 6<<20+1))
	if err != nil {
		writeStatus(w, http.StatusBadRequest)
		return
	}
	if len(body) > 6<<20 {
		// Lambda's synchronous response limit.
		body, failed = []byte(`{"errorType":"Function.ResponseSizeTooLarge","errorMessage":"Response payload size exceeded maximum allowed payload size (6291556 bytes)."}`), true
	}
	i.mu.Lock()
	inv, ok := i.pending[r.PathValue("id")]
	delete(i.pending, r.PathValue("id"))
	i.mu.Unlock()
	if !ok {
		writeStatus(w, http.StatusBadRequest)
		return
	}
	inv.done <- outcome{body: body, failed: failed}
	writeStatus(w, http.StatusAccepted)
}

// invoke hands payload to the instance and waits for its outcome, the
// function's timeout or the process's exit.
func (i *instance) invoke(payload []byte) (Result, error) {
	if payload == nil {
		payload = []byte("{}")
	}
	began := time.Now()
	inv := &invocation{id: requestID(), payload: payload, deadline: began.Add(i.fn.Timeout), done: make(chan outcome, 1)}
	i.mu.Lock()
	i.pending[inv.id] = inv
	i.mu.Unlock()
	timer := time.NewTimer(i.fn.Timeout)
	defer timer.Stop()
	crashed := func() (Result, error) {
		return Result{Duration: time.Since(began)}, &ProcessError{
			Function: i.fn.Name, Kind: ErrCrashed, Reason: exitReason(i.exitErr) + " during the invocation", Output: i.out.tail(),
		}
	}
	select {
	case i.next <- inv:
	case <-i.exited:
		return crashed()
	case <-timer.C:
		i.stop(0)
		return Result{Duration: time.Since(began)}, &ProcessError{Function: i.fn.Name, Kind: ErrTimeout,
			Reason: fmt.Sprintf("the runtime did not ask for the invocation within the timeout (%s)", i.fn.Timeout), Output: i.out.tail()}
	}
	select {
	case o := <-inv.done:
		res := Result{Payload: o.body, Duration: time.Since(began)}
		if o.failed {
			res.Error = &FunctionError{}
			if err := json.Unmarshal(o.body, res.Error); err != nil || res.Error.Message == "" && res.Error.Type == "" {
				res.Error = &FunctionError{Type: "Unknown", Message: string(o.body)}
			}
		}
		return res, nil
	case <-i.exited:
		return crashed()
	case <-timer.C:
		i.stop(0)
		return Result{Duration: time.Since(began)}, &ProcessError{Function: i.fn.Name, Kind: ErrTimeout,
			Reason: fmt.Sprintf("Task timed out after %.2f seconds", i.fn.Timeout.Seconds()), Output: i.out.tail()}
	}
}

func (i *instance) alive() bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	return !i.dead
}

// stop ends the process (SIGTERM, then SIGKILL after grace) and its
// Runtime API endpoint.
func (i *instance) stop(grace time.Duration) {
	i.mu.Lock()
	i.dead = true
	i.mu.Unlock()
	if i.cmd != nil && i.cmd.Process != nil {
		pgid := -i.cmd.Process.Pid
		if grace > 0 {
			_ = syscall.Kill(pgid, syscall.SIGTERM)
			select {
			case <-i.exited:
			case <-time.After(grace):
			}
		}
		_ = syscall.Kill(pgid, syscall.SIGKILL)
		<-i.exited
	}
	if i.server != nil {
		_ = i.server.Close()
	}
}

func writeStatus(w http.ResponseWriter, status int) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = fmt.Fprintf(w, `{"status":%q}`, http.StatusText(status))
}

// describe renders an error document posted by the runtime.
func describe(body []byte) string {
	var fe FunctionError
	if err := json.Unmarshal(body, &fe); err == nil && (fe.Message != "" || fe.Type != "") {
		return fe.Error()
	}
	return strings.TrimSpace(string(body))
}

func exitReason(err error) string {
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return "the process exited (" + exit.ProcessState.String() + ")"
	}
	if err != nil {
		return "the process exited (" + err.Error() + ")"
	}
	return "the process exited (status 0)"
}

func requestID() string {
	h := randomHex(16)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// traceID is an X-Ray trace header for one invocation, not sampled (no
// daemon receives segments locally).
func traceID(at time.Time) string {
	return fmt.Sprintf("Root=1-%08x-%s;Parent=%s;Sampled=0", at.Unix(), randomHex(12), randomHex(8))
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// output copies what a process prints to the log, a line at a time, and
// keeps its last max bytes for error reports.
type output struct {
	mu      sync.Mutex
	log     io.Writer
	max     int
	partial []byte
	kept    bytes.Buffer
}

func (o *output) Write(b []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.kept.Write(b)
	if extra := o.kept.Len() - o.max; extra > 0 {
		o.kept.Next(extra)
	}
	o.partial = append(o.partial, b...)
	if n := bytes.LastIndexByte(o.partial, '\n'); n >= 0 {
		_, _ = o.log.Write(o.partial[:n+1])
		o.partial = append(o.partial[:0], o.partial[n+1:]...)
	}
	return len(b), nil
}

// flush writes a last line without its newline.
func (o *output) flush() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.partial) > 0 {
		_, _ = o.log.Write(append(o.partial, '\n'))
		o.partial = nil
	}
}

func (o *output) tail() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.kept.String()
}
