package hotcache

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestConcurrentMissesShareOneLoad(t *testing.T) {
	c := New[int](time.Minute)
	var loads, started atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			started.Add(1)
			v, _, err := c.Get(context.Background(), "top", func(context.Context) (int, error) {
				loads.Add(1)
				// Hold the load until every reader has asked, so that
				// without single-flight they would all be loading too.
				for started.Load() < 50 {
					time.Sleep(time.Millisecond)
				}
				return 42, nil
			})
			if err != nil || v != 42 {
				t.Errorf("got %d, %v", v, err)
			}
		}()
	}
	wg.Wait()
	if n := loads.Load(); n != 1 {
		t.Fatalf("%d loads for concurrent misses, want 1", n)
	}
	if _, hit, _ := c.Get(context.Background(), "top", func(context.Context) (int, error) { return 0, errors.New("should not load") }); !hit {
		t.Fatal("second read was not a hit")
	}
}

func TestEntriesExpireAndFailuresAreNotCached(t *testing.T) {
	now := time.Unix(0, 0)
	c := New[string](250 * time.Millisecond)
	c.now = func() time.Time { return now }
	if _, _, err := c.Get(context.Background(), "k", func(context.Context) (string, error) { return "", errors.New("redis down") }); err == nil {
		t.Fatal("error swallowed")
	}
	v, hit, _ := c.Get(context.Background(), "k", func(context.Context) (string, error) { return "a", nil })
	if hit || v != "a" {
		t.Fatalf("after a failed load: %q hit=%v", v, hit)
	}
	now = now.Add(300 * time.Millisecond)
	v, hit, _ = c.Get(context.Background(), "k", func(context.Context) (string, error) { return "b", nil })
	if hit || v != "b" {
		t.Fatalf("after expiry: %q hit=%v", v, hit)
	}
}

// The reader whose miss started a load may give up (its request was
// cancelled): the load goes on, and the other readers waiting on it get
// its value rather than the first reader's cancellation.
func TestACancelledFirstReaderDoesNotFailTheOthers(t *testing.T) {
	c := New[int](time.Minute)
	first, cancel := context.WithCancel(context.Background())
	started, release := make(chan struct{}), make(chan struct{})
	firstDone := make(chan error, 1)
	go func() {
		_, _, err := c.Get(first, "top", func(ctx context.Context) (int, error) {
			close(started)
			<-release
			return 7, ctx.Err() // a load that honours its context
		})
		firstDone <- err
	}()
	<-started
	second := make(chan int, 1)
	go func() {
		v, _, err := c.Get(context.Background(), "top", func(context.Context) (int, error) { return 0, errors.New("a second load") })
		if err != nil {
			t.Errorf("the waiting reader failed: %v", err)
		}
		second <- v
	}()
	cancel()
	if err := <-firstDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled reader got %v, want its cancellation", err)
	}
	close(release)
	if v := <-second; v != 7 {
		t.Fatalf("the waiting reader got %d, want the shared load's 7", v)
	}
}
