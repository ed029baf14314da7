package obs

import (
	"encoding/json"
	"io"
	"sync"
	"time"
)

// Unit is a CloudWatch metric unit.
type Unit string

// Units Rally emits.
const (
	Count        Unit = "Count"
	Milliseconds Unit = "Milliseconds"
	Seconds      Unit = "Seconds"
	Bytes        Unit = "Bytes"
)

// Namespace is the CloudWatch namespace of every Rally metric.
const Namespace = "Rally"

// Metric names every feature emits the same way.
const (
	// MetricCacheHits counts reads answered from a cache: Redis, or the
	// in-process hot cache in front of it.
	MetricCacheHits = "CacheHits"
	// MetricCacheMisses counts reads that fell through to DynamoDB: read
	// through on a miss, or served degraded without Redis.
	MetricCacheMisses = "CacheMisses"
)

// Metrics writes CloudWatch Embedded Metric Format lines; CloudWatch Logs
// turns them into metrics without an API call on the hot path.
//
// Every value is published twice: per function (Function plus the
// metric's own dimensions) and once for all of Rally, with no dimension at
// all. An alarm on a signal of the whole service (degraded reads, drift
// found by a job) then watches one metric, whichever functions emit it.
type Metrics struct {
	mu       sync.Mutex
	w        io.Writer
	function string
	now      func() time.Time
}

// NewMetrics returns a metrics writer that tags every metric with the
// function name.
func NewMetrics(w io.Writer, function string) *Metrics {
	return &Metrics{w: w, function: function, now: time.Now}
}

// Emit writes one metric value. Extra dimensions are added to Function;
// the total for all of Rally has none.
func (m *Metrics) Emit(name string, value float64, unit Unit, dims map[string]string) {
	if m == nil || m.w == nil {
		return
	}
	keys := []string{"Function"}
	doc := map[string]any{"Function": m.function, name: value}
	for k, v := range dims {
		keys = append(keys, k)
		doc[k] = v
	}
	doc["_aws"] = map[string]any{
		"Timestamp": m.now().UnixMilli(),
		"CloudWatchMetrics": []any{map[string]any{
			"Namespace":  Namespace,
			"Dimensions": [][]string{keys, {}},
			"Metrics":    []any{map[string]any{"Name": name, "Unit": unit}},
		}},
	}
	line, err := json.Marshal(doc)
	if err != nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	_, _ = m.w.Write(append(line, '\n'))
}

// Count emits a count metric.
func (m *Metrics) Count(name string, n int, dims map[string]string) {
	m.Emit(name, float64(n), Count, dims)
}

// CacheReads counts the reads of one answer that a cache served (hits) and
// that fell through to DynamoDB (misses). Both are written, zeros too, so
// the hit ratio hits/(hits+misses) has both terms in every period.
func (m *Metrics) CacheReads(hits, misses int) {
	m.Count(MetricCacheHits, hits, nil)
	m.Count(MetricCacheMisses, misses, nil)
}
