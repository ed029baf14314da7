package obs

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestLogLinesCarryTheRequestID(t *testing.T) {
	var buf bytes.Buffer
	log := NewLogger(&buf, "info")
	log.InfoContext(WithRequestID(context.Background(), "req-7"), "hello", "n", 1)
	log.DebugContext(context.Background(), "hidden below the level")
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("not one JSON line: %q", buf.String())
	}
	if line["request_id"] != "req-7" || line["msg"] != "hello" {
		t.Fatalf("line %v", line)
	}
}

// CloudWatch turns a log line into a metric only if it follows the
// Embedded Metric Format exactly.
func TestMetricsAreEmbeddedMetricFormat(t *testing.T) {
	var buf bytes.Buffer
	m := NewMetrics(&buf, "counter-processor")
	m.now = func() time.Time { return time.UnixMilli(1795346400000) }
	m.Count("ChangesApplied", 3, map[string]string{"Kind": "favorite"})
	var doc struct {
		AWS struct {
			Timestamp         int64
			CloudWatchMetrics []struct {
				Namespace  string
				Dimensions [][]string
				Metrics    []struct{ Name, Unit string }
			}
		} `json:"_aws"`
		Function       string
		Kind           string
		ChangesApplied float64
	}
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	cw := doc.AWS.CloudWatchMetrics
	if doc.AWS.Timestamp != 1795346400000 || len(cw) != 1 || cw[0].Namespace != Namespace ||
		len(cw[0].Dimensions) != 1 || len(cw[0].Dimensions[0]) != 2 || cw[0].Metrics[0].Name != "ChangesApplied" ||
		cw[0].Metrics[0].Unit != "Count" || doc.Function != "counter-processor" || doc.Kind != "favorite" || doc.ChangesApplied != 3 {
		t.Fatalf("EMF document %s", buf.String())
	}
}

// Tracing must never turn a cache miss into an error for the caller.
func TestRedisTracingKeepsMissesAsMisses(t *testing.T) {
	h := RedisTracing{}.ProcessHook(func(_ context.Context, cmd redis.Cmder) error {
		cmd.SetErr(redis.Nil)
		return redis.Nil
	})
	cmd := redis.NewStringCmd(context.Background(), "get", "k")
	if err := h(context.Background(), cmd); err != redis.Nil && err != nil {
		t.Fatalf("got %v", err)
	}
	if cmd.Err() != redis.Nil {
		t.Fatalf("the command lost its miss: %v", cmd.Err())
	}
}
