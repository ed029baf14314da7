// Package await waits, in tests, for what happens asynchronously — a
// processor catching up, Redis coming back, a stream showing its records —
// by polling a condition with a short backoff until it holds or a deadline
// passes, and failing the test with what was awaited (and the last error)
// when it does not. It is a leaf: internal tests (package foo) and the
// test helpers (testenv, redistest) import it without a cycle.
//
// A sleep that lets time pass because the passing is what is tested (a TTL,
// a batching window) is not a wait for a condition and does not belong here.
package await

import (
	"errors"
	"testing"
	"time"
)

// First and longest pause between polls: short enough that a test waits
// little past the moment the condition holds, long enough not to hammer a
// local server.
const (
	firstPause = 5 * time.Millisecond
	maxPause   = 50 * time.Millisecond
)

var errNotYet = errors.New("condition not met")

// Until polls cond until it holds; if within passes first, it fails t with
// what was awaited. Call it from the test's goroutine.
func Until(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	if err := poll(within, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	}); err != nil {
		t.Fatalf("%s: not within %v", what, within)
	}
}

// Success polls try until it returns nil; if within passes first, it fails
// t with what was awaited and try's last error, which should say why the
// condition does not hold yet. Call it from the test's goroutine.
func Success(t testing.TB, within time.Duration, what string, try func() error) {
	t.Helper()
	if err := poll(within, try); err != nil {
		t.Fatalf("%s: not within %v: %v", what, within, err)
	}
}

// poll calls try until it returns nil, and returns its last error once
// within has passed.
func poll(within time.Duration, try func() error) error {
	deadline := time.Now().Add(within)
	pause := firstPause
	for {
		err := try()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(pause)
		pause = min(2*pause, maxPause)
	}
}
