// Command testrun runs go test and shows what a person reads from it, while
// reading what a program can: it runs `go test -json` with the arguments it
// is given and prints, as go test would without -v, each package's result
// line, the whole output of every failed test (its logs, the failure, a
// panic's stack), build errors and anything a test binary printed outside a
// test when its package failed. At the end it lists the tests that were
// skipped, with their reasons. With CI=true a skipped test fails the run,
// as a missing test dependency does (infra/local/testenv/ci): a pipeline
// never passes by not running a test. `make test` runs every test through it:
//
//	go run ./infra/testrun -race -count=1 ./...
//
// The exit status is go test's when it failed, 1 when tests were skipped
// under CI, 0 otherwise. GO names the go command (default "go").
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"

	"github.com/rallyhq/rally/infra/local/testenv/ci"
)

func main() {
	goCmd := os.Getenv("GO")
	if goCmd == "" {
		goCmd = "go"
	}
	cmd := exec.Command(goCmd, append([]string{"test", "-json"}, os.Args[1:]...)...)
	cmd.Stdin, cmd.Stderr = os.Stdin, os.Stderr
	events, err := cmd.StdoutPipe()
	if err != nil {
		fatal(err)
	}
	if err := cmd.Start(); err != nil {
		fatal(err)
	}
	r, readErr := report(events, os.Stdout)
	if readErr != nil {
		// Keep draining so go test is not blocked on a full pipe.
		_, _ = io.Copy(io.Discard, events)
	}
	waitErr := cmd.Wait()
	r.summarize(os.Stdout, ci.On())
	switch {
	case readErr != nil:
		fatal(fmt.Errorf("read go test -json: %w", readErr))
	case waitErr != nil:
		var exit *exec.ExitError
		if errors.As(waitErr, &exit) {
			os.Exit(max(1, exit.ExitCode()))
		}
		fatal(waitErr)
	case ci.On() && len(r.skipped) > 0:
		os.Exit(1)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "testrun:", err)
	os.Exit(1)
}

// event is one line of `go test -json` (see go doc test2json); build
// output comes with ImportPath instead of Package.
type event struct {
	Action     string
	Package    string
	ImportPath string
	Test       string
	Output     string
}

// skip is a skipped test and what it said.
type skip struct {
	pkg, test, reason string
}

// run is what report saw.
type run struct {
	skipped        []skip
	passed, failed int
	failedPackages []string
}

// pkgState holds a package's output until it is known to matter: each
// running test's, what the package printed outside any test, and its
// result line, printed last.
type pkgState struct {
	tests  map[string][]string
	own    []string
	result string
}

// report reads go test -json events and writes the console's view of them
// to out. It returns what it saw; an error only when the stream cannot be
// read.
func report(events io.Reader, out io.Writer) (*run, error) {
	r := &run{}
	pkgs := map[string]*pkgState{}
	state := func(pkg string) *pkgState {
		p := pkgs[pkg]
		if p == nil {
			p = &pkgState{tests: map[string][]string{}}
			pkgs[pkg] = p
		}
		return p
	}
	sc := bufio.NewScanner(events)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if err := json.Unmarshal(line, &e); err != nil || e.Action == "" {
			// Not an event (go test prints some errors as plain text).
			fmt.Fprintf(out, "%s\n", line)
			continue
		}
		switch {
		case e.Action == "build-output":
			fmt.Fprint(out, e.Output)
		case e.Action == "build-fail":
		case e.Test != "":
			p := state(e.Package)
			switch e.Action {
			case "output":
				p.tests[e.Test] = append(p.tests[e.Test], e.Output)
			case "pass":
				r.passed++
				delete(p.tests, e.Test)
			case "fail":
				r.failed++
				fmt.Fprint(out, strings.Join(p.tests[e.Test], ""))
				delete(p.tests, e.Test)
			case "skip":
				r.skipped = append(r.skipped, skip{pkg: e.Package, test: e.Test, reason: reasonOf(p.tests[e.Test])})
				delete(p.tests, e.Test)
			}
		default: // the package's own events
			p := state(e.Package)
			switch e.Action {
			case "output":
				if isResult(e.Output) {
					p.result = e.Output
				} else {
					p.own = append(p.own, e.Output)
				}
			case "fail":
				r.failedPackages = append(r.failedPackages, e.Package)
				// A binary that died (a panic, a timeout, TestMain) leaves
				// tests unfinished and output outside them: show both.
				for _, name := range slices.Sorted(maps.Keys(p.tests)) {
					fmt.Fprintf(out, "--- %s did not finish:\n%s", name, strings.Join(p.tests[name], ""))
				}
				fmt.Fprint(out, strings.Join(p.own, ""), p.result)
				delete(pkgs, e.Package)
			case "pass", "skip":
				fmt.Fprint(out, p.result)
				delete(pkgs, e.Package)
			}
		}
	}
	return r, sc.Err()
}

// isResult reports whether a package's output line is its result, the
// line go test prints for every package: "ok", "FAIL", or "?" with no
// tests.
func isResult(line string) bool {
	return strings.HasPrefix(line, "ok  \t") || strings.HasPrefix(line, "FAIL\t") || strings.HasPrefix(line, "?   \t")
}

// reasonOf is what a skipped test logged, without the lines go test adds
// around it.
func reasonOf(lines []string) string {
	var kept []string
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- SKIP") {
			continue
		}
		kept = append(kept, t)
	}
	return strings.Join(kept, " ")
}

// summarize writes the counts, the failed packages and the skipped tests;
// under CI a skip is a failure and says so.
func (r *run) summarize(out io.Writer, inCI bool) {
	fmt.Fprintf(out, "testrun: %d tests passed, %d failed, %d skipped\n", r.passed, r.failed, len(r.skipped))
	if len(r.failedPackages) > 0 {
		fmt.Fprintf(out, "testrun: failed packages: %s\n", strings.Join(r.failedPackages, " "))
	}
	if len(r.skipped) == 0 {
		return
	}
	if inCI {
		fmt.Fprintf(out, "testrun: %d tests skipped under CI=true, which fails the run:\n", len(r.skipped))
	} else {
		fmt.Fprintf(out, "testrun: %d tests skipped (under CI=true this fails the run):\n", len(r.skipped))
	}
	for _, s := range r.skipped {
		fmt.Fprintf(out, "  %s %s: %s\n", s.pkg, s.test, s.reason)
	}
}
