package await_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rallyhq/rally/infra/local/testenv/await"
)

// recordingTB notes a failure instead of stopping the real test.
type recordingTB struct {
	testing.TB
	failed string
}

func (r *recordingTB) Helper()                           {}
func (r *recordingTB) Fatalf(format string, args ...any) { r.failed = fmt.Sprintf(format, args...) }

func TestUntilReturnsOnceTheConditionHolds(t *testing.T) {
	r := &recordingTB{TB: t}
	calls := 0
	await.Until(r, 10*time.Second, "the third call", func() bool { calls++; return calls == 3 })
	if r.failed != "" || calls != 3 {
		t.Fatalf("failed %q after %d calls, want success on the third", r.failed, calls)
	}
}

func TestATimeoutNamesWhatWasAwaitedAndWhyNot(t *testing.T) {
	r := &recordingTB{TB: t}
	start := time.Now()
	await.Until(r, 30*time.Millisecond, "lag of 5 records", func() bool { return false })
	if !strings.Contains(r.failed, "lag of 5 records") {
		t.Errorf("Until failed with %q; it should name what was awaited", r.failed)
	}
	if waited := time.Since(start); waited < 30*time.Millisecond || waited > 2*time.Second {
		t.Errorf("gave up after %v, want soon after 30ms", waited)
	}

	r = &recordingTB{TB: t}
	n := 0
	await.Success(r, 30*time.Millisecond, "Redis accepts writes", func() error { n++; return fmt.Errorf("attempt %d: %w", n, errors.New("connection refused")) })
	if !strings.Contains(r.failed, "Redis accepts writes") || !strings.Contains(r.failed, fmt.Sprintf("attempt %d: connection refused", n)) {
		t.Errorf("Success failed with %q; it should name what was awaited and the last error", r.failed)
	}
}
