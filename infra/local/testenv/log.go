package testenv

import (
	"bytes"
	"encoding/json"
	"io"
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

// Emitted is a log destination that also adds up the metric values the
// handlers emit (Embedded Metric Format lines), by metric name, and passes
// every line on to next.
type Emitted struct {
	next io.Writer
	mu   sync.Mutex
	sums map[string]float64
}

// NewEmitted returns an Emitted passing lines on to next.
func NewEmitted(next io.Writer) *Emitted {
	return &Emitted{next: next, sums: map[string]float64{}}
}

// Write reads the metrics of the lines in p; each write is whole lines, as
// loggers and obs.Metrics write them.
func (e *Emitted) Write(p []byte) (int, error) {
	for _, line := range bytes.Split(p, []byte("\n")) {
		var doc struct {
			AWS struct {
				CloudWatchMetrics []struct {
					Metrics []struct{ Name string }
				}
			} `json:"_aws"`
		}
		if len(line) == 0 || json.Unmarshal(line, &doc) != nil {
			continue
		}
		var values map[string]any
		_ = json.Unmarshal(line, &values)
		e.mu.Lock()
		for _, cw := range doc.AWS.CloudWatchMetrics {
			for _, m := range cw.Metrics {
				if v, ok := values[m.Name].(float64); ok {
					e.sums[m.Name] += v
				}
			}
		}
		e.mu.Unlock()
	}
	return e.next.Write(p)
}

// Sum is the total of the values emitted under name so far.
func (e *Emitted) Sum(name string) float64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.sums[name]
}
