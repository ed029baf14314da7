package cachegen_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/shared/cachegen"
	"github.com/rallyhq/rally/shared/schema"
)

func TestRedisIsTrustedOnlyWhileItsGenerationKeepsUp(t *testing.T) {
	ctx := context.Background()
	db, names, _ := testenv.DynamoDB(t)
	srv := testenv.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	tr := &cachegen.Tracker{DB: db, Table: names.Of(schema.Counters), Redis: rdb, Scope: "test", CheckEvery: time.Nanosecond}

	if tr.Fresh(ctx) {
		t.Fatal("a Redis that was never built is trusted")
	}
	if err := tr.Advance(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if !tr.Fresh(ctx) {
		t.Fatal("a Redis at the current generation is not trusted")
	}
	now := time.Now()
	if err := tr.MarkDirty(ctx, []string{"target#a", "user#b", "target#a"}, now); err != nil {
		t.Fatal(err)
	}
	if tr.Fresh(ctx) {
		t.Fatal("Redis is trusted after a lost write")
	}
	st, err := tr.State(ctx)
	if err != nil || st.Durable != 1 || st.Mirror != 0 {
		t.Fatalf("state %+v, %v", st, err)
	}
	markers, err := tr.Dirty(ctx, 10)
	if err != nil || len(markers) != 2 {
		t.Fatalf("dirty markers %+v, %v", markers, err)
	}
	// A key marked again after it was read stays dirty when cleared.
	if err := tr.MarkDirty(ctx, []string{"user#b"}, now.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := tr.Clear(ctx, markers); err != nil {
		t.Fatal(err)
	}
	left, _ := tr.Dirty(ctx, 10)
	if len(left) != 1 || left[0].Key != "user#b" {
		t.Fatalf("after clearing: %+v", left)
	}
	// Advancing never moves the generation back.
	if err := tr.Advance(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if err := tr.Advance(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if st, _ := tr.State(ctx); st.Mirror != 2 || !tr.Fresh(ctx) {
		t.Fatalf("state %+v", st)
	}
	// A Redis that lost its data has no generation: not trusted.
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if tr.Fresh(ctx) {
		t.Fatal("an emptied Redis is trusted")
	}
}
