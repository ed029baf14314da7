package testenv_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/rallyhq/rally/infra/local/testenv"
)

// recordingTB notes whether Require skipped or failed instead of stopping
// the real test.
type recordingTB struct {
	testing.TB
	skipped, failed string
}

func (r *recordingTB) Helper()                           {}
func (r *recordingTB) Skipf(format string, args ...any)  { r.skipped = fmt.Sprintf(format, args...) }
func (r *recordingTB) Fatalf(format string, args ...any) { r.failed = fmt.Sprintf(format, args...) }

func TestAMissingDependencySkipsLocallyAndFailsInCI(t *testing.T) {
	missing := errors.New("java not found")
	for _, c := range []struct {
		ci         string
		skip, fail bool
	}{{"", true, false}, {"false", true, false}, {"true", false, true}, {"1", false, true}} {
		t.Run("CI="+c.ci, func(t *testing.T) {
			t.Setenv("CI", c.ci)
			r := &recordingTB{TB: t}
			testenv.Require(r, "DynamoDB Local", missing)
			if (r.skipped != "") != c.skip || (r.failed != "") != c.fail {
				t.Fatalf("skipped %q, failed %q", r.skipped, r.failed)
			}
			if msg := r.skipped + r.failed; !strings.Contains(msg, "DynamoDB Local") || !strings.Contains(msg, "java not found") {
				t.Errorf("message %q should name the dependency and the reason", msg)
			}
		})
	}
	r := &recordingTB{TB: t}
	testenv.Require(r, "anything", nil)
	if r.skipped != "" || r.failed != "" {
		t.Fatal("Require acted on a nil error")
	}
}

func TestTableNamesAreUniquePerCall(t *testing.T) {
	a, b := testenv.Names(t), testenv.Names(t)
	for name, physical := range a {
		if b[name] == physical {
			t.Fatalf("two calls share the table name %s", physical)
		}
	}
}
