package faults_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"
	"github.com/redis/go-redis/v9"

	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/infra/local/testenv/await"
	"github.com/rallyhq/rally/shared/app"
	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/config"
	"github.com/rallyhq/rally/shared/deadletters"
	deadlettersbind "github.com/rallyhq/rally/shared/deadletters/bind"
	"github.com/rallyhq/rally/shared/privacy"
	privacybind "github.com/rallyhq/rally/shared/privacy/bind"
	"github.com/rallyhq/rally/shared/schema"
	"github.com/rallyhq/rally/shared/streamread"
	"github.com/rallyhq/rally/shared/streams"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// errCrash is what a call fails with once the process "died".
var errCrash = errors.New("faults: the process crashed here")

// crash makes a process die between two of its writes: armed with k, the
// k-th DynamoDB write from then on is never sent, and neither is anything
// after it (DynamoDB or Redis) until the invocation ends.
type crash struct {
	armed   atomic.Int64 // writes left before the crash; 0 = disarmed
	crashed atomic.Bool
	redis   atomic.Bool // Redis unreachable (an outage, not a crash)
}

var dynamoWrites = []string{"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"}

// apiOption fails DynamoDB calls once crashed (sends no request).
func (c *crash) apiOption(s *middleware.Stack) error {
	return s.Initialize.Add(middleware.InitializeMiddlewareFunc("FaultsCrash", func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (
		middleware.InitializeOutput, middleware.Metadata, error,
	) {
		if c.crashed.Load() {
			return middleware.InitializeOutput{}, middleware.Metadata{}, errCrash
		}
		if slices.Contains(dynamoWrites, middleware.GetOperationName(ctx)) && c.armed.Load() > 0 && c.armed.Add(-1) == 0 {
			c.crashed.Store(true)
			return middleware.InitializeOutput{}, middleware.Metadata{}, errCrash
		}
		return next.HandleInitialize(ctx, in)
	}), middleware.Before)
}

func (c *crash) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *crash) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if c.crashed.Load() || c.redis.Load() {
			cmd.SetErr(errCrash)
			return errCrash
		}
		return next(ctx, cmd)
	}
}

func (c *crash) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if c.crashed.Load() || c.redis.Load() {
			for _, cmd := range cmds {
				cmd.SetErr(errCrash)
			}
			return errCrash
		}
		return next(ctx, cmds)
	}
}

// rig is one sequence's world: fresh tables, a fresh redis-server, the
// real features bound over them, a settable clock.
type rig struct {
	t     *testing.T
	d     *app.Deps
	clk   *clock.Settable
	crash *crash
	log   []string
}

func newRig(t *testing.T) *rig {
	t.Helper()
	_, names, endpoint := testenv.DynamoDB(t)
	srv := testenv.Redis(t)
	r := &rig{t: t, clk: clock.NewSettable(), crash: &crash{}}
	// DynamoDB Local expires items against the wall clock: start near it.
	r.clk.Set(time.Now().UTC().Truncate(time.Hour).Add(10 * time.Minute))
	d, err := app.New(context.Background(), config.Config{
		Stage: "test", Region: testenv.Region, DynamoDBEndpoint: endpoint, Tables: names, RedisURL: srv.URL(),
		CursorKey: "k", LogKey: "k", ErasureKey: "k", LogLevel: "error", CacheCheckEvery: time.Millisecond,
	}, app.Options{
		Clock: r.clk, LogOutput: io.Discard,
		APIOptions: []func(*middleware.Stack) error{r.crash.apiOption}, RedisHooks: []redis.Hook{r.crash},
	})
	if err != nil {
		t.Fatal(err)
	}
	r.d = d
	return r
}

// noTrace fails if anything names a user erased: an item of tables, a
// record of a batch st parked, a Redis key.
func (r *rig) noTrace(st *stream, erased map[string]bool, tables ...schema.Table) {
	if len(erased) == 0 {
		return
	}
	ctx := context.Background()
	for _, table := range tables {
		for _, it := range testenv.TableItems(r.t, r.d.DB, r.d.Table(table)) {
			for u := range erased {
				if testenv.Mentions(&types.AttributeValueMemberM{Value: it}, u) {
					r.fatalf("%s still names erased %s: %v", table.Name, u, it)
				}
			}
		}
	}
	batches, err := st.archive.List(ctx, st.function)
	if err != nil {
		r.fatal(err)
	}
	for _, b := range batches {
		recs, err := st.archive.Records(ctx, b)
		if err != nil {
			r.fatal(err)
		}
		for _, u := range deadletters.UsersOf(recs) {
			if erased[u] {
				r.fatalf("parked batch %s still holds records of erased %s", b.ID, u)
			}
		}
	}
	for u := range erased {
		if keys, err := redisMentions(ctx, r.d.Redis, u); err != nil || len(keys) > 0 {
			r.fatalf("redis keys %v (%v) still name erased %s", keys, err, u)
		}
	}
}

// logf records a step of the sequence, printed if it fails.
func (r *rig) logf(format string, args ...any) { r.log = append(r.log, fmt.Sprintf(format, args...)) }

// fatalf fails the sequence with its steps.
func (r *rig) fatalf(format string, args ...any) {
	r.t.Helper()
	r.t.Fatalf("%s\nsteps:\n  %s", fmt.Sprintf(format, args...), strings.Join(r.log, "\n  "))
}

// fault is what befalls one delivery.
type fault struct {
	// crashAt is the write the process dies before (0: none).
	crashAt int64
	// redisDown makes Redis unreachable for the delivery.
	redisDown bool
}

func (f fault) String() string {
	var parts []string
	if f.crashAt > 0 {
		parts = append(parts, fmt.Sprintf("crash before write %d", f.crashAt))
	}
	if f.redisDown {
		parts = append(parts, "redis down")
	}
	if len(parts) == 0 {
		return "no fault"
	}
	return strings.Join(parts, ", ")
}

// randomFault picks a fault for a delivery: most go through.
func randomFault(rng *rand.Rand) fault {
	var f fault
	if rng.IntN(4) == 0 {
		f.crashAt = 1 + rng.Int64N(8)
	}
	if rng.IntN(6) == 0 {
		f.redisDown = true
	}
	return f
}

// stream delivers one table's stream to one processor as an event source
// mapping does (batches from the head of each shard, retried until they
// apply, bisected, parked to the dead-letter archive), with the faults
// the test chooses, and redrives parked batches.
type stream struct {
	r        *rig
	function string
	handler  streams.Handler
	arn      string
	shards   map[string]*streamread.Shard
	order    []string
	pending  map[string][]events.DynamoDBEventRecord
	archive  *deadletters.Archive
	// written is how many records the table's writes put on the stream
	// (the test counts them), read the records pulled so far; exact when
	// the test counts every one (else written is a lower bound).
	written, read int
	exact         bool
	mu            sync.Mutex
	// redriveFault is what the invocations of the redrive under way suffer.
	redriveFault fault
	// Counts of what happened, for the report.
	delivered, crashed, parked, redriven int
}

func newStream(r *rig, table schema.Table, function string, handler streams.Handler) *stream {
	arn, err := streamread.StreamARN(context.Background(), r.d.DB, r.d.Table(table))
	if err != nil {
		r.t.Fatal(err)
	}
	return &stream{
		r: r, function: function, handler: handler, arn: arn,
		shards: map[string]*streamread.Shard{}, pending: map[string][]events.DynamoDBEventRecord{},
		archive: deadlettersbind.Archive(r.d), exact: true,
	}
}

// wrote counts n records the table's writes put on the stream.
func (s *stream) wrote(n int) { s.written += n }

// pull reads what the table wrote since the last pull: every record the
// test counted (DynamoDB Local shows a write on its stream a moment after
// it), so a sequence replays the same for the same seed.
func (s *stream) pull() {
	await.Until(s.r.t, time.Minute, fmt.Sprintf("%d records on the %s stream", s.written, s.function), func() bool {
		s.pullOnce()
		return s.read >= s.written
	})
	if s.read > s.written && s.exact {
		s.r.fatalf("%d records on the stream, the test wrote %d", s.read, s.written)
	}
}

func (s *stream) pullOnce() {
	ctx := context.Background()
	shards, err := streamread.Shards(ctx, s.r.d.Streams(), s.arn)
	if err != nil {
		s.r.t.Fatal(err)
	}
	for _, sh := range shards {
		id := *sh.ShardId
		if _, ok := s.shards[id]; !ok {
			s.shards[id] = &streamread.Shard{Client: s.r.d.Streams(), StreamARN: s.arn, ShardID: id, Region: testenv.Region}
			s.order = append(s.order, id)
		}
	}
	for _, id := range s.order {
		for sh := s.shards[id]; !sh.Closed(); {
			page, err := sh.Next(ctx)
			if err != nil {
				s.r.t.Fatal(err)
			}
			if len(page) == 0 {
				break
			}
			s.pending[id] = append(s.pending[id], page...)
			s.read += len(page)
		}
	}
}

// backlog is how many records wait to be delivered.
func (s *stream) backlog() int {
	n := 0
	for _, recs := range s.pending {
		n += len(recs)
	}
	return n
}

// head picks a shard with records waiting.
func (s *stream) head(rng *rand.Rand) (string, bool) {
	var ready []string
	for _, id := range s.order {
		if len(s.pending[id]) > 0 {
			ready = append(ready, id)
		}
	}
	if len(ready) == 0 {
		return "", false
	}
	return ready[rng.IntN(len(ready))], true
}

// invoke runs the processor with records under fault f, as Lambda
// invokes it; ok reports whether every record applied, and applied how
// many from the head did.
func (s *stream) invoke(records []events.DynamoDBEventRecord, f fault) (applied int, ok bool) {
	c := s.r.crash
	c.armed.Store(f.crashAt)
	c.redis.Store(f.redisDown)
	resp, err := s.handler(context.Background(), events.DynamoDBEvent{Records: records})
	crashed := c.crashed.Load()
	c.armed.Store(0)
	c.crashed.Store(false)
	c.redis.Store(false)
	if crashed {
		s.crashed++
		return 0, false
	}
	if err != nil {
		return 0, false
	}
	if len(resp.BatchItemFailures) == 0 {
		return len(records), true
	}
	first := resp.BatchItemFailures[0].ItemIdentifier
	for i, rec := range records {
		if rec.Change.SequenceNumber == first {
			return i, false
		}
	}
	return 0, false
}

// Invoke implements deadletters.Invoker for redrives, under no fault.
func (s *stream) Invoke(_ context.Context, function string, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
	if function != s.function {
		return events.DynamoDBEventResponse{}, fmt.Errorf("no processor %s here", function)
	}
	s.mu.Lock()
	f := s.redriveFault
	s.mu.Unlock()
	applied, ok := s.invoke(ev.Records, f)
	if ok {
		return events.DynamoDBEventResponse{}, nil
	}
	if applied == 0 && f.crashAt > 0 {
		return events.DynamoDBEventResponse{}, errCrash
	}
	return events.DynamoDBEventResponse{BatchItemFailures: []events.DynamoDBBatchItemFailure{{ItemIdentifier: ev.Records[applied].Change.SequenceNumber}}}, nil
}

// step delivers the next batch of a shard under a random fault, or parks
// it, or delivers it in halves, or twice.
func (s *stream) step(rng *rand.Rand) {
	s.pull()
	id, ok := s.head(rng)
	if !ok {
		return
	}
	recs := s.pending[id]
	n := min(len(recs), 1+rng.IntN(4))
	batch := recs[:n]
	switch k := rng.IntN(10); {
	case k == 0: // retries exhausted: parked
		s.park(id, batch, "RetryAttemptsExhausted")
		return
	case k == 1 && n > 1: // bisected: the first half alone
		batch = batch[:n/2]
		s.r.logf("%s: deliver the first half (%d of %d)", s.function, len(batch), n)
	}
	f := randomFault(rng)
	applied, done := s.invoke(batch, f)
	s.delivered++
	s.r.logf("%s: deliver %d records (%s): applied %d, done %v", s.function, len(batch), f, applied, done)
	s.pending[id] = s.pending[id][applied:]
	if done && rng.IntN(5) == 0 {
		// Lambda may deliver a batch it already delivered.
		again, _ := s.invoke(batch, randomFault(rng))
		s.r.logf("%s: redeliver the same %d records: applied %d", s.function, len(batch), again)
	}
}

// park archives a batch the mapping gave up on and moves past it.
func (s *stream) park(id string, batch []events.DynamoDBEventRecord, reason string) {
	b := deadletters.Batch{
		Function: s.function, StreamARN: s.arn, ShardID: id, Reason: reason, ParkedAt: s.r.clk.Now(),
		First: batch[0].Change.SequenceNumber, Last: batch[len(batch)-1].Change.SequenceNumber,
	}
	if _, err := s.archive.Put(context.Background(), b, batch); err != nil {
		s.r.t.Fatal(err)
	}
	s.pending[id] = s.pending[id][len(batch):]
	s.parked++
	s.r.logf("%s: park %d records (%s … %s)", s.function, len(batch), b.First, b.Last)
}

// redriveFault is the fault the next redrive's invocations suffer.
func (s *stream) setRedriveFault(f fault) {
	s.mu.Lock()
	s.redriveFault = f
	s.mu.Unlock()
}

// redrive replays one parked batch, chosen at random, under a random
// fault; false when none is parked.
func (s *stream) redrive(rng *rand.Rand, faulty bool) bool {
	ctx := context.Background()
	batches, err := s.archive.List(ctx, s.function)
	if err != nil {
		s.r.t.Fatal(err)
	}
	if len(batches) == 0 {
		return false
	}
	b := batches[rng.IntN(len(batches))]
	f := fault{}
	if faulty {
		f = randomFault(rng)
	}
	s.setRedriveFault(f)
	out, err := s.archive.Redrive(ctx, s, s.function, b.ID)
	s.setRedriveFault(fault{})
	if err != nil && !errors.Is(err, errCrash) {
		s.r.fatalf("redrive %s: %v", b.ID, err)
	}
	s.redriven++
	s.r.logf("%s: redrive %d records (%s): %+v %v", s.function, b.Size, f, out, err)
	return true
}

// tick invokes the processor with no records, as its schedule does (it
// repairs what Redis lost).
func (s *stream) tick() {
	if _, err := s.handler(context.Background(), events.DynamoDBEvent{}); err != nil {
		s.r.fatalf("%s tick: %v", s.function, err)
	}
}

// drain delivers everything pending and redrives everything parked, with
// no fault, until nothing is left.
func (s *stream) drain(rng *rand.Rand) {
	for round := 0; ; round++ {
		if round == 200 {
			s.r.fatalf("%s: %d records still pending after %d rounds", s.function, s.backlog(), round)
		}
		s.pull()
		for id, recs := range s.pending {
			for len(recs) > 0 {
				n := min(len(recs), 10)
				applied, _ := s.invoke(recs[:n], fault{})
				if applied == 0 {
					s.r.fatalf("%s: a batch of %d fails without a fault", s.function, n)
				}
				recs = recs[applied:]
			}
			s.pending[id] = nil
		}
		for s.redrive(rng, false) {
		}
		s.pull()
		if s.backlog() == 0 {
			return
		}
	}
}

// erasures carries out erasures with the real job, its parts given.
type erasures struct {
	r       *rig
	job     *privacy.Job
	records *privacy.Records
	pending []string
	// afterRun is told of each run of each erasure (the test counts the
	// deletions it wrote).
	afterRun func(user string)
}

func newErasures(r *rig, parts ...privacy.Part) *erasures {
	records := privacybind.Records(r.d)
	return &erasures{r: r, records: records, job: &privacy.Job{
		Records: records, Parts: parts, Clock: r.clk, Log: r.d.Log, Metrics: r.d.Metrics,
	}}
}

// request records an erasure of user.
func (e *erasures) request(user string) {
	if _, err := e.records.Request(context.Background(), user, e.r.clk.Now()); err != nil {
		e.r.t.Fatal(err)
	}
	e.pending = append(e.pending, user)
	e.r.logf("erasure of %s requested", user)
}

// run gives every pending erasure a run; the ones that complete leave.
func (e *erasures) run() {
	var still []string
	for _, u := range e.pending {
		err := e.job.Run(context.Background(), e.records.Hasher.Hash(u))
		if e.afterRun != nil {
			e.afterRun(u)
		}
		if err == nil {
			e.r.logf("erasure of %s completed", u)
			continue
		}
		// Waiting on a processor, or failing (Redis down, its circuit
		// open): the erasure processor's next tick resumes it.
		if !errors.Is(err, privacy.ErrNotYet) {
			e.r.logf("erasure of %s: %v", u, err)
		}
		still = append(still, u)
	}
	e.pending = still
}

// envInt reads a positive integer from the environment, or def.
func envInt(name string, def int) int {
	var n int
	if _, err := fmt.Sscan(os.Getenv(name), &n); err != nil || n <= 0 {
		return def
	}
	return n
}

// redisMentions lists the Redis keys whose name or value names s.
func redisMentions(ctx context.Context, rdb redis.UniversalClient, s string) ([]string, error) {
	keys, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		return nil, err
	}
	var found []string
	for _, k := range keys {
		var values []string
		switch typ, err := rdb.Type(ctx, k).Result(); {
		case err != nil:
			return nil, err
		case typ == "string":
			v, _ := rdb.Get(ctx, k).Result()
			values = []string{v}
		case typ == "zset":
			values, _ = rdb.ZRange(ctx, k, 0, -1).Result()
		case typ == "set":
			values, _ = rdb.SMembers(ctx, k).Result()
		case typ == "hash":
			h, _ := rdb.HGetAll(ctx, k).Result()
			for f, v := range h {
				values = append(values, f, v)
			}
		case typ == "list":
			values, _ = rdb.LRange(ctx, k, 0, -1).Result()
		}
		if strings.Contains(k, s) || slices.ContainsFunc(values, func(v string) bool { return strings.Contains(v, s) }) {
			found = append(found, k)
		}
	}
	return found, nil
}
