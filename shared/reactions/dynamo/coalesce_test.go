package dynamo_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/reactions"
	"github.com/rallyhq/rally/shared/reactions/dynamo"
	"github.com/rallyhq/rally/shared/schema"
)

// writeCounter is a DynamoDB client that counts, per item key, the writes
// that took effect, how many calls of each kind were made, and the write
// capacity units they cost by DynamoDB's pricing rules: a unit per KB of
// the item written (rounded up; an update of a small item is one, a
// delete costs the deleted item's size), twice that in a transaction
// (DynamoDB Local reports no per-item capacity). fail, when set, may fail
// a write before it is sent, as a crash there would.
type writeCounter struct {
	ddb.DB
	mu     sync.Mutex
	writes map[string]int // pk|sk → writes (puts and updates)
	drops  map[string]int // pk|sk → deletes
	calls  map[string]int // operation → calls
	// intentReads counts intent keys read (BatchGetItem).
	intentReads int
	sizes       map[string]int // pk|sk → bytes of the item last put
	wcu         int
	fail        func(op string, keys []string) error
}

func newWriteCounter(db ddb.DB) *writeCounter {
	return &writeCounter{DB: db, writes: map[string]int{}, drops: map[string]int{}, calls: map[string]int{}, sizes: map[string]int{}}
}

func units(bytes int) int { return max(1, (bytes+1023)/1024) }

// cost is the units of one write of key: a put's item, or (update,
// delete) the item last put there.
func (w *writeCounter) cost(key string, put map[string]types.AttributeValue) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	if put != nil {
		w.sizes[key] = ddb.ItemSize(put)
	}
	return units(w.sizes[key])
}

func itemKey(item map[string]types.AttributeValue) string {
	s := func(name string) string {
		if v, ok := item[name].(*types.AttributeValueMemberS); ok {
			return v.Value
		}
		return ""
	}
	return s(schema.AttrPK) + "|" + s(schema.AttrSK)
}

// before counts the call and asks fail whether it goes through.
func (w *writeCounter) before(op string, keys []string) error {
	w.mu.Lock()
	w.calls[op]++
	fail := w.fail
	w.mu.Unlock()
	if fail != nil {
		return fail(op, keys)
	}
	return nil
}

func (w *writeCounter) after(keys, deleted []string, wcu int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, k := range keys {
		w.writes[k]++
	}
	for _, k := range deleted {
		w.drops[k]++
	}
	w.wcu += wcu
}

func (w *writeCounter) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	var keys, deleted []string
	wcu := 0
	for _, it := range in.TransactItems {
		switch {
		case it.Put != nil:
			keys = append(keys, itemKey(it.Put.Item))
			wcu += 2 * w.cost(itemKey(it.Put.Item), it.Put.Item)
		case it.Update != nil:
			keys = append(keys, itemKey(it.Update.Key))
			wcu += 2 * w.cost(itemKey(it.Update.Key), nil)
		case it.Delete != nil:
			deleted = append(deleted, itemKey(it.Delete.Key))
			wcu += 2 * w.cost(itemKey(it.Delete.Key), nil)
		case it.ConditionCheck != nil:
			wcu += 2 * w.cost(itemKey(it.ConditionCheck.Key), nil)
		}
	}
	if err := w.before("TransactWriteItems", append(keys, deleted...)); err != nil {
		return nil, err
	}
	out, err := w.DB.TransactWriteItems(ctx, in, opts...)
	if err == nil {
		w.after(keys, deleted, wcu)
	}
	return out, err
}

func (w *writeCounter) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	keys := []string{itemKey(in.Item)}
	if err := w.before("PutItem", keys); err != nil {
		return nil, err
	}
	out, err := w.DB.PutItem(ctx, in, opts...)
	if err == nil || ddb.IsConditionFailed(err) {
		// A write refused by its condition costs as much as one done.
		w.after(nil, nil, w.cost(keys[0], in.Item))
	}
	if err == nil {
		w.after(keys, nil, 0)
	}
	return out, err
}

func (w *writeCounter) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	keys := []string{itemKey(in.Key)}
	if err := w.before("UpdateItem", keys); err != nil {
		return nil, err
	}
	out, err := w.DB.UpdateItem(ctx, in, opts...)
	if err == nil || ddb.IsConditionFailed(err) {
		// A write refused by its condition costs as much as one done.
		w.after(nil, nil, w.cost(keys[0], nil))
	}
	if err == nil {
		w.after(keys, nil, 0)
	}
	return out, err
}

func (w *writeCounter) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	keys := []string{itemKey(in.Key)}
	if err := w.before("DeleteItem", keys); err != nil {
		return nil, err
	}
	out, err := w.DB.DeleteItem(ctx, in, opts...)
	if err == nil || ddb.IsConditionFailed(err) {
		w.after(nil, nil, w.cost(keys[0], nil))
	}
	if err == nil {
		w.after(nil, keys, 0)
	}
	return out, err
}

func (w *writeCounter) BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	w.mu.Lock()
	for _, ka := range in.RequestItems {
		for _, k := range ka.Keys {
			if pk, ok := k[schema.AttrPK].(*types.AttributeValueMemberS); ok && strings.HasPrefix(pk.Value, schema.CountersIntentPrefix) {
				w.intentReads++
			}
		}
	}
	w.mu.Unlock()
	return w.DB.BatchGetItem(ctx, in, opts...)
}

func (w *writeCounter) BatchWriteItem(ctx context.Context, in *dynamodb.BatchWriteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error) {
	var keys []string
	for _, reqs := range in.RequestItems {
		for _, r := range reqs {
			if r.PutRequest != nil {
				keys = append(keys, itemKey(r.PutRequest.Item))
			} else if r.DeleteRequest != nil {
				keys = append(keys, itemKey(r.DeleteRequest.Key))
			}
		}
	}
	if err := w.before("BatchWriteItem", keys); err != nil {
		return nil, err
	}
	out, err := w.DB.BatchWriteItem(ctx, in, opts...)
	if err == nil {
		unprocessed := map[string]bool{}
		for _, reqs := range out.UnprocessedItems {
			for _, r := range reqs {
				if r.PutRequest != nil {
					unprocessed[itemKey(r.PutRequest.Item)] = true
				} else if r.DeleteRequest != nil {
					unprocessed[itemKey(r.DeleteRequest.Key)] = true
				}
			}
		}
		var done, deleted []string
		wcu := 0
		for _, reqs := range in.RequestItems {
			for _, r := range reqs {
				switch {
				case r.PutRequest != nil && !unprocessed[itemKey(r.PutRequest.Item)]:
					done = append(done, itemKey(r.PutRequest.Item))
					wcu += w.cost(itemKey(r.PutRequest.Item), r.PutRequest.Item)
				case r.DeleteRequest != nil && !unprocessed[itemKey(r.DeleteRequest.Key)]:
					deleted = append(deleted, itemKey(r.DeleteRequest.Key))
					wcu += w.cost(itemKey(r.DeleteRequest.Key), nil)
				}
			}
		}
		w.after(done, deleted, wcu)
	}
	return out, err
}

// figures sums the writes by item family.
type figures struct {
	transactions, totals, markers, intents, buckets, intentsDeleted int
	wcu                                                             int
}

func (w *writeCounter) figures() figures {
	w.mu.Lock()
	defer w.mu.Unlock()
	f := figures{transactions: w.calls["TransactWriteItems"], wcu: w.wcu}
	for k, n := range w.drops {
		if strings.HasPrefix(k, schema.CountersIntentPrefix) {
			f.intentsDeleted += n
		}
	}
	for k, n := range w.writes {
		pk, sk, _ := strings.Cut(k, "|")
		switch {
		case strings.HasPrefix(pk, schema.CountersAppliedPrefix):
			f.markers += n
		case strings.HasPrefix(pk, schema.CountersIntentPrefix):
			f.intents += n
		case sk == schema.CountersTotalSK:
			f.totals += n
		default:
			f.buckets += n
		}
	}
	return f
}

func (w *writeCounter) writesOf(pk, sk string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.writes[pk+"|"+sk]
}

// zipfBatch is 1,000 favorites by 1,000 users: 500 of one game ("hot")
// and 500 of 200 other games drawn from a Zipf distribution, spread over
// two hours. want is each game's count once the batch is applied.
func zipfBatch() (batch []reactions.Change, want map[string]int64) {
	rng := rand.New(rand.NewPCG(7, 11))
	zipf := rand.NewZipf(rng, 1.2, 1, 199)
	want = map[string]int64{}
	for i := 0; i < 1000; i++ {
		user, game := fmt.Sprintf("fan-%04d", i), "hot"
		if i%2 == 1 {
			game = fmt.Sprintf("g%03d", zipf.Uint64())
		}
		at := t0.Add(time.Duration(i) * 7 * time.Second)
		batch = append(batch, change(user, game, 1, true, 1, at))
		want[game]++
	}
	rng.Shuffle(len(batch), func(i, j int) { batch[i], batch[j] = batch[j], batch[i] })
	return batch, want
}

// expectCounts fails unless every game's count is the one wanted.
func expectCounts(t *testing.T, c *dynamo.Counts, want map[string]int64) {
	t.Helper()
	for game, n := range want {
		if got := count(t, c, game); got != n {
			t.Fatalf("%s counts %d, want %d", game, got, n)
		}
	}
}

func newCountedCounts(t *testing.T) (*dynamo.Counts, *writeCounter) {
	t.Helper()
	db, names, _ := testenv.DynamoDB(t)
	w := newWriteCounter(db)
	return &dynamo.Counts{DB: w, Table: names.Of(schema.Counters)}, w
}

// A batch of 1,000 favorites of which 500 favorite one game writes that
// game's count once, with a constant number of intent records, and counts
// every favorite.
func TestAHotGameIsWrittenOncePerBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, w := newCountedCounts(t)
	batch, want := zipfBatch()
	n, err := c.Apply(ctx, batch, t0, nil)
	if err != nil || n != len(batch) {
		t.Fatalf("applied %d, %v", n, err)
	}
	f := w.figures()
	t.Logf("1,000 changes over %d games: %d transactions, %d total-item writes, %d bucket writes, %d marker writes, %d intents written and %d deleted, %d WCU; calls %v",
		len(want), f.transactions, f.totals, f.buckets, f.markers, f.intents, f.intentsDeleted, f.wcu, w.calls)
	expectCounts(t, c, want)
	if got := w.writesOf("favorite#hot", schema.CountersTotalSK); got != 1 {
		t.Fatalf("the hot game's count was written %d times, want once", got)
	}
	if f.totals != len(want) {
		t.Fatalf("%d total-item writes for %d games", f.totals, len(want))
	}
	if f.intents > f.transactions {
		t.Fatalf("%d intent writes for %d transactions", f.intents, f.transactions)
	}
	if n, err := c.Apply(ctx, batch, t0, nil); err != nil || n != 0 {
		t.Fatalf("redelivered: applied %d, %v", n, err)
	}
	expectCounts(t, c, want)
}

var errCrash = errors.New("the processor died here")

// pendingIntents counts the intents left in the table.
func pendingIntents(t *testing.T, c *dynamo.Counts) int {
	t.Helper()
	n := 0
	for _, it := range testenv.TableItems(t, c.DB, c.Table) {
		if pk, ok := it[schema.AttrPK].(*types.AttributeValueMemberS); ok && strings.HasPrefix(pk.Value, schema.CountersIntentPrefix) {
			n++
		}
	}
	return n
}

// failFirstMarker makes the first marker write fail, as a processor dying
// after its transaction committed would leave it.
func failFirstMarker(w *writeCounter) {
	var failed atomic.Bool
	w.fail = func(op string, keys []string) error {
		if (op == "PutItem" || op == "DeleteItem") && strings.HasPrefix(keys[0], schema.CountersAppliedPrefix) && failed.CompareAndSwap(false, true) {
			return errCrash
		}
		return nil
	}
}

// A processor that dies after a transaction committed, before its markers
// are written, leaves the counts right and an intent behind; whatever
// touches its targets next (the redelivered batch, or another batch)
// finishes it, and no change is counted twice.
func TestACrashBeforeTheMarkersCountsNothingTwice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	batch, want := zipfBatch()
	// late is a new favorite of every game, by a user of its own.
	var late []reactions.Change
	for game := range want {
		late = append(late, change("late-"+game, game, 1, true, 1, t0))
	}
	for name, next := range map[string][]reactions.Change{"the batch redelivered": batch, "another batch": late} {
		t.Run(name, func(t *testing.T) {
			c, w := newCountedCounts(t)
			failFirstMarker(w)
			n, err := c.Apply(ctx, batch, t0, nil)
			if !errors.Is(err, errCrash) || n == 0 || n == len(batch) {
				t.Fatalf("the crashed delivery applied %d, %v; want some changes and the crash", n, err)
			}
			if got := pendingIntents(t, c); got != 1 {
				t.Fatalf("%d intents pending after the crash, want 1", got)
			}
			counted := int64(0)
			for game := range want {
				counted += count(t, c, game)
			}
			if counted != int64(n) {
				t.Fatalf("the crashed delivery counted %d favorites and reported %d", counted, n)
			}
			if _, err := c.Apply(ctx, next, t0, nil); err != nil {
				t.Fatal(err)
			}
			if got := pendingIntents(t, c); got != 0 {
				t.Fatalf("%d intents pending after the next batch, want 0", got)
			}
			if _, err := c.Apply(ctx, append(batch, late...), t0, nil); err != nil {
				t.Fatal(err)
			}
			for game := range want {
				want[game]++
			}
			defer func() {
				for game := range want {
					want[game]--
				}
			}()
			expectCounts(t, c, want)
			if n, err := c.Apply(ctx, append(batch, late...), t0, nil); err != nil || n != 0 {
				t.Fatalf("redelivered once more: applied %d, %v", n, err)
			}
			expectCounts(t, c, want)
		})
	}
}

// Two processors applying the same batch at once (a redelivery racing the
// first delivery) count each change once between them.
func TestRacingProcessorsCountEachChangeOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newCounts(t)
	batch, want := zipfBatch()
	var wg sync.WaitGroup
	applied := make([]int, 2)
	errs := make([]error, 2)
	for i := range applied {
		wg.Add(1)
		go func() {
			defer wg.Done()
			applied[i], errs[i] = c.Apply(ctx, batch, t0, nil)
		}()
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil || applied[0]+applied[1] != len(batch) {
		t.Fatalf("the racers applied %v (%v), want %d between them", applied, errs, len(batch))
	}
	expectCounts(t, c, want)
	if got := pendingIntents(t, c); got != 0 {
		t.Fatalf("%d intents pending, want 0", got)
	}
	if n, err := c.Apply(ctx, batch, t0, nil); err != nil || n != 0 {
		t.Fatalf("redelivered: applied %d, %v", n, err)
	}
}

// A batch bisected after a failure is applied in halves, then delivered
// whole again: every change counts once.
func TestBisectedBatchesCountEachChangeOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newCounts(t)
	batch, want := zipfBatch()
	for _, part := range []struct {
		changes []reactions.Change
		new     int
	}{
		{batch[:250], 250}, {batch[:500], 250}, {batch[500:], 500}, {batch, 0}, {batch[250:750], 0},
	} {
		if n, err := c.Apply(ctx, part.changes, t0, nil); err != nil || n != part.new {
			t.Fatalf("applied %d of %d, %v; want %d", n, len(part.changes), err, part.new)
		}
	}
	expectCounts(t, c, want)
}

// A processor that stalls after its transaction committed, while another
// finishes its intent and counts a newer change of the same edge, cannot
// set the edge's marker back when it resumes: the newer change, delivered
// again, is not counted twice.
func TestAStalledFinisherNeverSetsAMarkerBack(t *testing.T) {
	ctx := context.Background()
	db, names, _ := testenv.DynamoDB(t)
	stalled, resume := make(chan struct{}), make(chan struct{})
	slow := newWriteCounter(db)
	var once sync.Once
	slow.fail = func(op string, keys []string) error {
		if op == "PutItem" && strings.HasPrefix(keys[0], schema.CountersAppliedPrefix) {
			once.Do(func() { close(stalled) })
			<-resume
		}
		return nil
	}
	a := &dynamo.Counts{DB: slow, Table: names.Of(schema.Counters)}
	b := &dynamo.Counts{DB: db, Table: names.Of(schema.Counters)}
	first := change("fan", "g1", 1, true, 1, t0)
	both := []reactions.Change{first, change("fan", "g1", 2, false, -1, t0.Add(time.Minute))}
	done := make(chan error, 1)
	go func() {
		_, err := a.Apply(ctx, []reactions.Change{first}, t0, nil)
		done <- err
	}()
	<-stalled
	// a committed the favorite and stalls before its marker: b finishes
	// a's intent, then counts the unfavorite.
	if n, err := b.Apply(ctx, both, t0, nil); err != nil || n != 1 {
		t.Fatalf("applied %d, %v; want the unfavorite alone", n, err)
	}
	close(resume)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n, err := b.Apply(ctx, both, t0, nil); err != nil || n != 0 || count(t, b, "g1") != 0 {
		t.Fatalf("redelivered: applied %d (count %d), %v; want nothing and 0", n, count(t, b, "g1"), err)
	}
}

// An erasure waiting for a user's deletions to be counted finishes what a
// dead processor committed but left unmarked: the markers the deletions
// delete are then gone, and nothing in Counters names the user.
func TestFinishPendingCompletesWhatADeadProcessorLeft(t *testing.T) {
	ctx := context.Background()
	c, w := newCountedCounts(t)
	const ann = "erased-ann"
	var favorites, deletions []reactions.Change
	var targets []reactions.Target
	for i, game := range []string{"g1", "g2", "g3"} {
		favorites = append(favorites, change(ann, game, int64(1+i), true, 1, t0))
		d := change(ann, game, int64(2+i), false, -1, t0)
		d.Deleted = true
		deletions = append(deletions, d)
		targets = append(targets, d.Target())
	}
	if _, err := c.Apply(ctx, favorites, t0, nil); err != nil {
		t.Fatal(err)
	}
	failFirstMarker(w)
	if _, err := c.Apply(ctx, deletions, t0, nil); !errors.Is(err, errCrash) {
		t.Fatalf("applied with %v, want the crash", err)
	}
	if got, err := c.Markers(ctx, ann); err != nil || len(got) == 0 {
		t.Fatalf("markers %v (%v) all gone before anything finished them", got, err)
	}
	if err := c.FinishPending(ctx, targets, t0, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Markers(ctx, ann); err != nil || len(got) != 0 {
		t.Fatalf("markers %v (%v), want none", got, err)
	}
	for _, it := range testenv.TableItems(t, c.DB, c.Table) {
		if testenv.Mentions(&types.AttributeValueMemberM{Value: it}, ann) {
			t.Fatalf("an item still names the erased user: %v", it)
		}
	}
	for _, game := range []string{"g1", "g2", "g3"} {
		if got := count(t, c, game); got != 0 {
			t.Fatalf("%s counts %d, want the favorite counted and taken back once (0)", game, got)
		}
	}
}

// A processor instance that finished a target's last intent itself reads
// no intent before counting that target again: the extra read is only for
// intents another instance (or a crash) may have left.
func TestAnInstanceDoesNotReadIntentsItFinished(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, w := newCountedCounts(t)
	batch, want := zipfBatch()
	if _, err := c.Apply(ctx, batch, t0, nil); err != nil {
		t.Fatal(err)
	}
	var late []reactions.Change
	for game := range want {
		late = append(late, change("late-"+game, game, 1, true, 1, t0))
	}
	w.mu.Lock()
	w.intentReads = 0
	w.mu.Unlock()
	if n, err := c.Apply(ctx, late, t0, nil); err != nil || n != len(late) {
		t.Fatalf("second batch applied %d of %d: %v", n, len(late), err)
	}
	if w.intentReads != 0 {
		t.Fatalf("%d intents read that this instance had finished", w.intentReads)
	}
	other := &dynamo.Counts{DB: w, Table: c.Table}
	if _, err := other.Apply(ctx, []reactions.Change{change("third", "hot", 1, true, 1, t0)}, t0, nil); err != nil {
		t.Fatal(err)
	}
	if w.intentReads == 0 {
		t.Fatal("another instance did not check the intent the total names")
	}
	for game, n := range want {
		if game == "hot" {
			n++ // the third favorite
		}
		if got := count(t, c, game); got != n+1 {
			t.Errorf("%s: count %d, want %d", game, got, n+1)
		}
	}
}
