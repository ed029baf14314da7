package freshness_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/freshness"
	"github.com/rallyhq/rally/shared/freshness/dynamo"
	"github.com/rallyhq/rally/shared/freshness/mirror"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var t0 = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

type copyUnderTest interface {
	freshness.Advancer
	freshness.Getter
}

// Both copies of the watermarks, Redis and DynamoDB, pass the same suite.
func copies(t *testing.T) map[string]copyUnderTest {
	db, names, _ := testenv.DynamoDB(t)
	srv := testenv.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	return map[string]copyUnderTest{
		"dynamodb": &dynamo.Store{DB: db, Table: names.Of(schema.Counters)},
		"redis":    mirror.Watermarks{Redis: rdb},
	}
}

func at(s int) freshness.Watermark {
	return freshness.Watermark{NewestChange: t0.Add(time.Duration(s) * time.Second), AppliedAt: t0.Add(time.Duration(s+1) * time.Second)}
}

// A watermark never moves back: an older or equal change leaves it, and of
// 20 processor instances racing, the newest change wins whatever the order.
func TestWatermarksOnlyMoveForward(t *testing.T) {
	ctx := context.Background()
	for name, c := range copies(t) {
		t.Run(name, func(t *testing.T) {
			const proc = "counter-processor"
			if _, found, err := c.Get(ctx, proc); err != nil || found {
				t.Fatalf("before any batch: found %v, %v", found, err)
			}
			steps := []struct {
				advance freshness.Watermark
				want    freshness.Watermark
			}{
				{at(10), at(10)},
				{at(5), at(10)}, // a lagging shard's older change
				{freshness.Watermark{NewestChange: at(10).NewestChange, AppliedAt: t0.Add(time.Hour)}, at(10)}, // a redelivery
				{at(11), at(11)},
			}
			for i, s := range steps {
				if err := c.Advance(ctx, proc, s.advance); err != nil {
					t.Fatal(err)
				}
				got, found, err := c.Get(ctx, proc)
				if err != nil || !found || !got.NewestChange.Equal(s.want.NewestChange) || !got.AppliedAt.Equal(s.want.AppliedAt) {
					t.Fatalf("step %d: got %+v (found %v, %v), want %+v", i, got, found, err, s.want)
				}
			}

			const racers = 20
			offsets := rand.Perm(racers)
			var wg sync.WaitGroup
			for _, off := range offsets {
				wg.Go(func() {
					if err := c.Advance(ctx, "race", at(100+off)); err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()
			got, _, err := c.Get(ctx, "race")
			if err != nil || !got.NewestChange.Equal(at(100+racers-1).NewestChange) {
				t.Fatalf("after the race: %+v, %v; want the newest, %v", got, err, at(100+racers-1).NewestChange)
			}
		})
	}
}

// Operations list every watermarked processor that applied something.
func TestListNamesEachWatermarkedProcessor(t *testing.T) {
	ctx := context.Background()
	db, names, _ := testenv.DynamoDB(t)
	s := &dynamo.Store{DB: db, Table: names.Of(schema.Counters)}
	if got, err := s.List(ctx); err != nil || len(got) != 0 {
		t.Fatalf("before any batch: %v, %v", got, err)
	}
	if err := s.Advance(ctx, routes.LeaderboardProcessor.Function, at(3)); err != nil {
		t.Fatal(err)
	}
	got, err := s.List(ctx)
	if err != nil || len(got) != 1 || !got[routes.LeaderboardProcessor.Function].NewestChange.Equal(at(3).NewestChange) {
		t.Fatalf("list %v, %v", got, err)
	}
	if lag := got[routes.LeaderboardProcessor.Function].Lag(); lag != time.Second {
		t.Fatalf("lag %v, want 1s", lag)
	}
}

type recorded struct {
	mu   sync.Mutex
	got  []freshness.Watermark
	fail bool
}

func (r *recorded) Advance(_ context.Context, _ string, w freshness.Watermark) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail {
		return errors.New("unreachable")
	}
	r.got = append(r.got, w)
	return nil
}

// A batch records its newest change once in each copy, stamped with the
// processor's clock; a tick records nothing; a copy that fails does not
// keep the other from recording.
func TestRecorderWritesEachCopyOncePerBatch(t *testing.T) {
	fast, durable := &recorded{fail: true}, &recorded{}
	r := &freshness.Recorder{Processor: "p", Fast: fast, Durable: durable, Clock: clock.Fixed(t0.Add(time.Minute))}
	r.Applied(context.Background(), time.Time{})
	if len(durable.got) != 0 {
		t.Fatalf("a tick recorded %v", durable.got)
	}
	r.Applied(context.Background(), t0)
	if len(durable.got) != 1 || !durable.got[0].NewestChange.Equal(t0) || !durable.got[0].AppliedAt.Equal(t0.Add(time.Minute)) {
		t.Fatalf("recorded %v", durable.got)
	}
	var none *freshness.Recorder
	none.Applied(context.Background(), t0) // processors built without one
}

type durableOnly map[string]freshness.Watermark

func (d durableOnly) Get(_ context.Context, p string) (freshness.Watermark, bool, error) {
	if p == "broken" {
		return freshness.Watermark{}, false, fmt.Errorf("unreachable")
	}
	w, ok := d[p]
	return w, ok, nil
}

// A read says the newest change it was served with; without one from
// Redis, the durable one; before any change (or when none can be read),
// the read time.
func TestReadsSayTheNewestChangeTheyInclude(t *testing.T) {
	ctx := context.Background()
	now := t0.Add(time.Hour)
	durable := durableOnly{"p": at(7)}
	for _, tc := range []struct {
		proc  string
		fetch time.Time
		want  time.Time
	}{
		{"p", at(9).NewestChange, at(9).NewestChange},
		{"p", time.Time{}, at(7).NewestChange},
		{"never", time.Time{}, now},
		{"broken", time.Time{}, now},
	} {
		r := freshness.Reads{Processor: tc.proc, Durable: durable, Clock: clock.Fixed(now)}
		if got := r.AsOf(ctx, tc.fetch); !got.Equal(tc.want) {
			t.Errorf("%s with %v fetched: as_of %v, want %v", tc.proc, tc.fetch, got, tc.want)
		}
	}
}
