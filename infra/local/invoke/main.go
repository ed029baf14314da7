// Command invoke runs one function's real binary against the running local
// stack, as `sam local invoke` would without Docker (`make invoke
// FN=<name> EVENT=events/<file>`): it builds functions/<name> for the host,
// reads the function's environment and role from the synthesized template
// (cdk.out, or an in-process synthesis when cdk.out is missing or older
// than the stack code), points its AWS endpoints and Redis at the stack
// `make dev` started (found through .local/endpoints.json), runs it against
// a local Lambda Runtime API with the event, and prints the response and
// the init and invoke milliseconds.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/rallyhq/rally/infra/local/binaries"
	"github.com/rallyhq/rally/infra/local/template"
	"github.com/rallyhq/rally/infra/local/template/synth"
	"github.com/rallyhq/rally/shared/routes"
)

// main does not call jsii.Close after an in-process synthesis: the runtime
// already waits on its node process, and a second wait loses the race and
// prints "Runtime process exited abnormally: waitid: no child processes".
// Node exits when this process's pipe to it closes, as for the CDK app and
// make dev -binaries.
func main() {
	fn := flag.String("fn", "", "function to run (a directory of functions/)")
	eventPath := flag.String("event", "", "event file (default events/<fn>.json)")
	stage := flag.String("stage", "dev", "stage of the template (cdk.out/Rally-<stage>.template.json)")
	stateDir := flag.String("state", ".local", "state directory of the running local stack")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, *fn, *eventPath, *stage, *stateDir))
}

func run(ctx context.Context, fn, eventPath, stage, stateDir string) int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "rally invoke:", err)
		return 1
	}
	if !slices.Contains(routes.Functions(), fn) {
		return fail(fmt.Errorf("FN=%q is not a function; one of: %s", fn, strings.Join(routes.Functions(), ", ")))
	}
	if eventPath == "" {
		eventPath = filepath.Join("events", fn+".json")
	}
	event, err := os.ReadFile(eventPath)
	if err != nil {
		return fail(err)
	}
	if !json.Valid(event) {
		return fail(fmt.Errorf("%s is not JSON", eventPath))
	}
	local, err := binaries.ReadStack(stateDir)
	if err != nil {
		return fail(err)
	}
	if err := alive(ctx, local.URL); err != nil {
		return fail(fmt.Errorf("the local stack of %s/%s does not answer at %s (%v): start it with `make dev`", stateDir, binaries.EndpointsFile, local.URL, err))
	}
	tpl, err := synth.Load(".", stage, stateDir, os.Stderr)
	if err != nil {
		return fail(err)
	}
	f, err := tpl.Function(fn, local.Local())
	if err != nil {
		return fail(err)
	}
	began := time.Now()
	bins, err := binaries.Build(ctx, ".", filepath.Join(stateDir, "bin"), fn)
	if err != nil {
		return fail(err)
	}
	fmt.Fprintf(os.Stderr, "rally invoke: built %s for the host in %.1fs\n", fn, time.Since(began).Seconds())
	set, err := binaries.NewSet(binaries.Options{
		Functions: []template.Function{f}, Binaries: bins, Endpoints: local.Endpoints(tpl),
		Region: local.Region, AccountID: local.AccountID, Log: os.Stderr,
	})
	if err != nil {
		return fail(err)
	}
	defer set.Close()
	pool, _ := set.Pool(fn)
	res, err := pool.Invoke(ctx, event)
	if err != nil {
		return fail(err)
	}
	var pretty bytes.Buffer
	if json.Indent(&pretty, res.Payload, "", "  ") != nil {
		pretty.Reset()
		pretty.Write(res.Payload)
	}
	fmt.Println(pretty.String())
	fmt.Fprintf(os.Stderr, "rally invoke: %s init %d ms, invoke %d ms (timeout %s, %d MB)\n",
		fn, res.Init.Milliseconds(), res.Duration.Milliseconds(), f.Timeout, f.MemoryMB)
	if res.Error != nil {
		fmt.Fprintln(os.Stderr, "rally invoke: the function returned an error:", res.Error)
		return 2
	}
	return 0
}

// alive checks the stack's health endpoint.
func alive(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/_local/health", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}
