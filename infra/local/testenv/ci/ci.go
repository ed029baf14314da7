// Package ci owns the one rule for a test whose dependency (DynamoDB Local,
// redis-server, curl) is missing: outside CI the test is skipped with the
// reason; with CI=true it fails, so a pipeline can never pass by skipping.
// It is a leaf so that every test helper (testenv, redistest) applies the
// same rule.
package ci

import (
	"os"
	"strconv"
	"testing"
)

// On reports whether CI=true (or any true value: 1, TRUE, ...) is set.
func On() bool {
	v, err := strconv.ParseBool(os.Getenv("CI"))
	return err == nil && v
}

// Require stops the test when a dependency is missing: t.Skip with the
// reason outside CI, t.Fatal in CI. It does nothing when err is nil.
func Require(t testing.TB, what string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if On() {
		t.Fatalf("%s is required (CI=true, so this is a failure, not a skip): %v", what, err)
		return
	}
	t.Skipf("skipping: %s is not available: %v", what, err)
}
