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
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/aws/jsii-runtime-go"

	"github.com/rallyhq/rally/infra/local/binaries"
	"github.com/rallyhq/rally/infra/local/template"
	"github.com/rallyhq/rally/infra/local/template/synth"
	"github.com/rallyhq/rally/shared/routes"
)

func main() {
	fn := flag.String("fn", "", "function to run (a directory of functions/)")
	eventPath := flag.String("event", "", "event file (default events/<fn>.json)")
	stage := flag.String("stage", "dev", "stage of the template (cdk.out/Rally-<stage>.template.json)")
	stateDir := flag.String("state", ".local", "state directory of the running local stack")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	code := run(ctx, *fn, *eventPath, *stage, *stateDir)
	jsii.Close()
	os.Exit(code)
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
	tpl, err := loadTemplate(stage, stateDir)
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

// stackSources are what the template is synthesized from: a template
// older than any of them may be stale.
var stackSources = []string{"infra/stack", "infra/main.go", "shared/routes", "shared/schema", "cdk.json"}

// loadTemplate reads cdk.out/Rally-<stage>.template.json when it is newer
// than the stack code; otherwise it synthesizes the stack in process into
// <state>/synth (reused while it is newer than the code), and says so.
func loadTemplate(stage, stateDir string) (*template.Template, error) {
	name := "Rally-" + stage + ".template.json"
	code, err := newest(stackSources)
	if err != nil {
		return nil, err
	}
	for _, dir := range []string{"cdk.out", filepath.Join(stateDir, "synth")} {
		path := filepath.Join(dir, name)
		if st, err := os.Stat(path); err == nil && st.ModTime().After(code) {
			fmt.Fprintf(os.Stderr, "rally invoke: environment and role from %s\n", path)
			return template.Read(path)
		}
	}
	out := filepath.Join(stateDir, "synth", name)
	fmt.Fprintf(os.Stderr, "rally invoke: cdk.out/%s is missing or older than the stack code; synthesizing Rally-%s in process into %s (about a minute)\n", name, stage, out)
	raw, err := synth.Template(".", stage)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(out, raw, 0o644); err != nil {
		return nil, err
	}
	return template.Parse(raw)
}

// newest is the latest modification time of the files under paths.
func newest(paths []string) (time.Time, error) {
	var latest time.Time
	for _, root := range paths {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if info, err := d.Info(); err == nil && !d.IsDir() && info.ModTime().After(latest) {
				latest = info.ModTime()
			}
			return nil
		})
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return latest, err
		}
	}
	return latest, nil
}
