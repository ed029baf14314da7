package obs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

func TestLogLinesCarryTheRequestID(t *testing.T) {
	var buf bytes.Buffer
	log := NewLogger(&buf, "info", []byte("k"))
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
		cw[0].Metrics[0].Name != "ChangesApplied" || cw[0].Metrics[0].Unit != "Count" ||
		doc.Function != "counter-processor" || doc.Kind != "favorite" || doc.ChangesApplied != 3 {
		t.Fatalf("EMF document %s", buf.String())
	}
	// Per function with its own dimensions, and once for all of Rally.
	if sets := cw[0].Dimensions; len(sets) != 2 || !slices.Equal(sets[0], []string{"Function", "Kind"}) || len(sets[1]) != 0 {
		t.Fatalf("dimension sets %v", sets)
	}
}

// A hit ratio needs both of its terms in every period, zeros included.
func TestCacheReadsWriteHitsAndMissesEvenWhenZero(t *testing.T) {
	var buf bytes.Buffer
	NewMetrics(&buf, "count-likes").CacheReads(0, 1)
	got := map[string]float64{}
	for _, line := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
		var doc map[string]any
		if err := json.Unmarshal(line, &doc); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		for _, name := range []string{MetricCacheHits, MetricCacheMisses} {
			if v, ok := doc[name].(float64); ok {
				got[name] = v
			}
		}
	}
	if len(got) != 2 || got[MetricCacheHits] != 0 || got[MetricCacheMisses] != 1 {
		t.Fatalf("emitted %v from %s", got, buf.String())
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

// A log line names users only by their keyed hash: attributes made with
// User or keyed as a user id, and every occurrence in the message, strings
// and errors of the ids the context is about, with a letter or digit of a
// longer word left alone.
func TestLogsWriteUserIdsAsTheirKeyedHash(t *testing.T) {
	var buf bytes.Buffer
	key := []byte("deployment-key")
	log := NewLogger(&buf, "info", key)
	ctx := WithUsers(context.Background(), "ann", "ann.smith", "")
	log.With("player_id", "carl").InfoContext(ctx, "scores of ann.smith failed",
		User("bob"), "user", "dee", "error", errors.New("decode score b/p/ann: boom"), "note", "annex of annie")
	line := buf.String()
	for _, id := range []string{`"bob"`, `"dee"`, `"carl"`, "ann.smith", "b/p/ann:"} {
		if strings.Contains(line, id) {
			t.Errorf("the line holds %s: %s", id, line)
		}
	}
	for _, id := range []string{"bob", "dee", "carl", "ann", "ann.smith"} {
		if !strings.Contains(line, "user:"+UserHash(key, id)) {
			t.Errorf("the line lacks %s's hash: %s", id, line)
		}
	}
	if !strings.Contains(line, "annex of annie") {
		t.Errorf("words that hold an id were changed: %s", line)
	}
	if UserHash(key, "ann") == UserHash([]byte("other-key"), "ann") || len(UserHash(key, "ann")) != UserHashLen {
		t.Error("the hash does not depend on the key, or has the wrong length")
	}
}
