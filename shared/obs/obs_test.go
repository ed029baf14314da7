package obs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
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

// Tracing must never turn a cache miss into anything else for the caller:
// go-redis sets whatever a hook returns on the command, so a hook that
// swallowed redis.Nil would make every miss read as an empty hit.
func TestRedisTracingKeepsMissesAsMisses(t *testing.T) {
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer c.Close()
	c.AddHook(RedisTracing{})
	ctx := context.Background()
	if err := c.Get(ctx, "missing").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("a traced GET of a missing key returned %v, want redis.Nil", err)
	}
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("a traced GET of a key returned %q, %v", v, err)
	}
	pipe := c.Pipeline()
	hit, miss := pipe.Get(ctx, "k"), pipe.Get(ctx, "missing")
	if _, err := pipe.Exec(ctx); !errors.Is(err, redis.Nil) {
		t.Fatalf("a traced pipeline with a miss returned %v, want redis.Nil", err)
	}
	if hit.Val() != "v" || !errors.Is(miss.Err(), redis.Nil) {
		t.Fatalf("pipelined hit %q, miss %v", hit.Val(), miss.Err())
	}
}
