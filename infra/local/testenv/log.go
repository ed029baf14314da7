package testenv

import (
	"sync"
	"testing"
)

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if len(b.buf) > b.max {
		b.buf = append(b.buf[:0], b.buf[len(b.buf)-b.max:]...)
	}
	return len(p), nil
}

// FailureLog is a log destination for a stack or handler under test: it
// stays quiet while the test passes and prints the last 64 KiB of logs if
// the test fails.
func FailureLog(t testing.TB) *tailBuffer {
	b := &tailBuffer{max: 64 << 10}
	t.Cleanup(func() {
		if t.Failed() {
			b.mu.Lock()
			defer b.mu.Unlock()
			t.Logf("last logs of the failed test:\n%s", b.buf)
		}
	})
	return b
}
