package main

import (
	"os"
	"strings"
	"testing"
)

// testdata/events.json is go test -json over five small packages: one
// passing with skipped tests (one a parallel subtest), one with a failing
// subtest, one whose TestMain prints and whose test panics, one that does
// not compile, and one without tests.
func TestTheConsoleShowsFailuresAndTheRunListsSkips(t *testing.T) {
	f, err := os.Open("testdata/events.json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out strings.Builder
	r, err := report(f, &out)
	if err != nil {
		t.Fatal(err)
	}
	console := out.String()
	for _, want := range []string{
		// failed tests, whole
		"fail_test.go:7: the board differs from the model", "fail_test.go:6: what the test saw", "--- FAIL: TestBroken (",
		// a panic, and what the binary printed outside tests
		"dies_test.go:15: before the panic", "panic: assignment to entry in nil map", "starting DynamoDB Local failed: java not found",
		// a build failure
		"broken/broken_test.go:5:41: undefined: undefinedThing", "FAIL\texample.com/sample/broken [build failed]",
		// every package's result
		"FAIL\texample.com/sample/fail\t", "FAIL\texample.com/sample/dies\t", "ok  \texample.com/sample/pass\t", "?   \texample.com/sample/none\t[no test files]",
	} {
		if !strings.Contains(console, want) {
			t.Errorf("the console lacks %q:\n%s", want, console)
		}
	}
	for _, quiet := range []string{"a passing test's log is not shown", "=== RUN   TestQuiet", "=== RUN   TestFine"} {
		if strings.Contains(console, quiet) {
			t.Errorf("the console shows a passing test's output (%q):\n%s", quiet, console)
		}
	}
	// The failing test's output comes before its package's result line.
	if strings.Index(console, "the board differs") > strings.Index(console, "FAIL\texample.com/sample/fail\t") {
		t.Errorf("the failure follows its package's result:\n%s", console)
	}
	if r.passed != 3 || r.failed != 3 || strings.Join(r.failedPackages, " ") != "example.com/sample/broken example.com/sample/dies example.com/sample/fail" {
		t.Errorf("passed %d, failed %d, failed packages %v", r.passed, r.failed, r.failedPackages)
	}

	for _, inCI := range []bool{false, true} {
		var sum strings.Builder
		r.summarize(&sum, inCI)
		for _, want := range []string{
			"3 tests passed, 3 failed, 2 skipped",
			"example.com/sample/pass TestSkipped: pass_test.go:7: redis-server is not available",
			"example.com/sample/pass TestParent/child: pass_test.go:10: not on this machine",
		} {
			if !strings.Contains(sum.String(), want) {
				t.Errorf("CI=%v: the summary lacks %q:\n%s", inCI, want, sum.String())
			}
		}
		if got := strings.Contains(sum.String(), "fails the run:"); got != inCI {
			t.Errorf("CI=%v: the summary says the skips fail the run: %v\n%s", inCI, got, sum.String())
		}
	}
}

// A run with nothing skipped says so and lists nothing.
func TestARunWithoutSkipsListsNone(t *testing.T) {
	events := `{"Action":"run","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Test":"TestA","Output":"=== RUN   TestA\n"}
{"Action":"pass","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Output":"ok  \tp\t0.1s\n"}
{"Action":"pass","Package":"p"}
`
	var out, sum strings.Builder
	r, err := report(strings.NewReader(events), &out)
	if err != nil {
		t.Fatal(err)
	}
	r.summarize(&sum, true)
	if out.String() != "ok  \tp\t0.1s\n" || len(r.skipped) != 0 || sum.String() != "testrun: 1 tests passed, 0 failed, 0 skipped\n" {
		t.Fatalf("console %q, skipped %v, summary %q", out.String(), r.skipped, sum.String())
	}
}
