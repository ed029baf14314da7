package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/errs"
	"github.com/rallyhq/rally/shared/idempotency"
	"github.com/rallyhq/rally/shared/schema"
)

func newStore(t *testing.T, c clock.Clock) *idempotency.Store {
	t.Helper()
	db, names, _ := testenv.DynamoDB(t)
	return &idempotency.Store{DB: db, Table: names.Of(schema.Idempotency), Clock: c, Wait: 2 * time.Second}
}

var key = idempotency.Key{Route: "favorite-game", Caller: "alice", Value: "k-1"}

func TestRetriesGetTheFirstResultAndRunNothing(t *testing.T) {
	s := newStore(t, clock.System{})
	ctx := context.Background()
	var runs atomic.Int32
	fn := func(context.Context) (idempotency.Result, error) {
		n := runs.Add(1)
		return idempotency.Result{Status: 200, Body: []byte(`{"n":` + string(rune('0'+n)) + `}`)}, nil
	}
	first, replayed, err := s.Run(ctx, key, "hash-a", fn)
	if err != nil || replayed {
		t.Fatalf("first run: replayed=%v err=%v", replayed, err)
	}
	for i := 0; i < 3; i++ {
		again, replayed, err := s.Run(ctx, key, "hash-a", fn)
		if err != nil || !replayed || string(again.Body) != string(first.Body) || again.Status != 200 {
			t.Fatalf("retry %d: %+v replayed=%v err=%v", i, again, replayed, err)
		}
	}
	if runs.Load() != 1 {
		t.Fatalf("ran %d times", runs.Load())
	}
}

// The payload hash is checked even when the record is already COMPLETED.
func TestSameKeyWithADifferentRequestIsRefused(t *testing.T) {
	s := newStore(t, clock.System{})
	ctx := context.Background()
	ok := func(context.Context) (idempotency.Result, error) {
		return idempotency.Result{Status: 200, Body: []byte(`{}`)}, nil
	}
	if _, _, err := s.Run(ctx, key, "hash-a", ok); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Run(ctx, key, "hash-b", ok); !errs.Is(err, errs.KeyReused) {
		t.Fatalf("got %v, want KeyReused", err)
	}
	other := key
	other.Caller = "bob"
	if _, replayed, err := s.Run(ctx, other, "hash-b", ok); err != nil || replayed {
		t.Fatalf("another caller's key must be independent: replayed=%v err=%v", replayed, err)
	}
}

// arrivals tells, through a DB that watches the store's claims, when
// requests found the key held by another: each request's context names it,
// and the first refused claim of each is an arrival.
type arrivals struct {
	ddb.DB
	mu      sync.Mutex
	arrived map[int]bool
	all     chan struct{} // closed once want requests arrived
	want    int
}

type requestKey struct{}

func (a *arrivals) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	out, err := a.DB.PutItem(ctx, in, o...)
	var refused *types.ConditionalCheckFailedException
	if id, ok := ctx.Value(requestKey{}).(int); ok && errors.As(err, &refused) {
		a.mu.Lock()
		if !a.arrived[id] {
			a.arrived[id] = true
			if len(a.arrived) == a.want {
				close(a.all)
			}
		}
		a.mu.Unlock()
	}
	return out, err
}

// Twenty requests with one key: the first claims it and works until every
// other has arrived and found the key in progress; all of them then get
// its answer, and the work ran once.
func TestConcurrentRequestsWithOneKeyRunOnceAndAllGetTheSameAnswer(t *testing.T) {
	s := newStore(t, clock.System{})
	s.Wait = 10 * time.Second // room for a loaded machine: no request should give up
	const requests = 20
	seen := &arrivals{DB: s.DB, arrived: map[int]bool{}, all: make(chan struct{}), want: requests - 1}
	s.DB = seen
	var runs atomic.Int32
	var wg sync.WaitGroup
	bodies := make([]string, requests)
	for i := range bodies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.WithValue(context.Background(), requestKey{}, i)
			res, _, err := s.Run(ctx, key, "h", func(context.Context) (idempotency.Result, error) {
				runs.Add(1)
				select { // the work lasts until the others wait for it
				case <-seen.all:
				case <-time.After(s.Wait / 2):
					seen.mu.Lock()
					t.Errorf("only %d of the other %d requests arrived while the work ran", len(seen.arrived), requests-1)
					seen.mu.Unlock()
				}
				return idempotency.Result{Status: 200, Body: []byte(`{"ok":true}`)}, nil
			})
			if err != nil {
				t.Error(err)
				return
			}
			bodies[i] = string(res.Body)
		}()
	}
	wg.Wait()
	if runs.Load() != 1 {
		t.Fatalf("ran %d times", runs.Load())
	}
	for i, b := range bodies {
		if b != `{"ok":true}` {
			t.Fatalf("request %d got %q", i, b)
		}
	}
}

func TestAFailedRunReleasesTheKey(t *testing.T) {
	s := newStore(t, clock.System{})
	ctx := context.Background()
	if _, _, err := s.Run(ctx, key, "h", func(context.Context) (idempotency.Result, error) {
		return idempotency.Result{}, errors.New("store down")
	}); err == nil {
		t.Fatal("error swallowed")
	}
	res, replayed, err := s.Run(ctx, key, "h", func(context.Context) (idempotency.Result, error) {
		return idempotency.Result{Status: 201, Body: []byte(`{}`)}, nil
	})
	if err != nil || replayed || res.Status != 201 {
		t.Fatalf("retry after failure: %+v replayed=%v err=%v", res, replayed, err)
	}
}

// A request that crashed while holding the key blocks retries only until
// its lease runs out; an expired record no longer replays.
func TestLeasesAndExpiry(t *testing.T) {
	clk := clock.NewSettable()
	s := newStore(t, clk)
	s.Wait = time.Millisecond
	ctx := context.Background()
	if _, _, err := s.Begin(ctx, key, "h"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Begin(ctx, key, "h"); !errs.Is(err, errs.Conflict) {
		t.Fatalf("while leased: %v, want Conflict", err)
	}
	clk.Advance(31 * time.Second)
	claim, stored, err := s.Begin(ctx, key, "h")
	if err != nil || stored != nil || claim == nil {
		t.Fatalf("after the lease: claim=%v stored=%v err=%v", claim, stored, err)
	}
	if err := s.Complete(ctx, claim, idempotency.Result{Status: 200, Body: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(25 * time.Hour)
	if claim, stored, err := s.Begin(ctx, key, "other-hash"); err != nil || stored != nil || claim == nil {
		t.Fatalf("after expiry the key is free again: claim=%v stored=%v err=%v", claim, stored, err)
	}
}

func TestEraseOwnerDeletesEveryRecordOfTheUserAndNoOtherUsers(t *testing.T) {
	ctx := context.Background()
	db, names, _ := testenv.DynamoDB(t)
	// Pages of two: an erasure that trusted one page would leave records
	// behind.
	s := &idempotency.Store{DB: &testenv.SmallPages{Client: db}, Table: names.Of(schema.Idempotency), Clock: clock.System{}, Wait: time.Millisecond}
	done := func(context.Context) (idempotency.Result, error) {
		return idempotency.Result{Status: 200, Body: []byte(`{"favorite":"g1"}`)}, nil
	}
	var erased []idempotency.Key
	for i := range 5 {
		k := idempotency.Key{Route: "favorite-game", Caller: "erased-ann", Value: fmt.Sprintf("k-%d", i)}
		if _, _, err := s.Run(ctx, k, "h", done); err != nil {
			t.Fatal(err)
		}
		erased = append(erased, k)
	}
	// One more still in progress, on another route.
	inProgress := idempotency.Key{Route: "toggle-like", Caller: "erased-ann", Value: "k-9"}
	if _, _, err := s.Begin(ctx, inProgress, "h"); err != nil {
		t.Fatal(err)
	}
	erased = append(erased, inProgress)
	kept := idempotency.Key{Route: "favorite-game", Caller: "kept-bob", Value: "k-0"}
	if _, _, err := s.Run(ctx, kept, "h", done); err != nil {
		t.Fatal(err)
	}

	n, err := s.EraseOwner(ctx, "erased-ann")
	if err != nil || n != len(erased) {
		t.Fatalf("erased %d records (%v), want %d", n, err, len(erased))
	}
	for _, k := range erased {
		// With the record gone the key is free: a new request claims it
		// instead of getting the stored response.
		claim, stored, err := s.Begin(ctx, k, "other-hash")
		if err != nil || stored != nil || claim == nil {
			t.Fatalf("key %s after erasure: claim=%v stored=%v err=%v", k.Value, claim, stored, err)
		}
		if err := s.Release(ctx, claim); err != nil {
			t.Fatal(err)
		}
	}
	if _, replayed, err := s.Run(ctx, kept, "h", done); err != nil || !replayed {
		t.Fatalf("another user's record: replayed=%v err=%v, want it kept", replayed, err)
	}
	if n, err := s.EraseOwner(ctx, "erased-ann"); err != nil || n != 0 {
		t.Fatalf("a second erasure deleted %d records (%v), want 0", n, err)
	}
}
