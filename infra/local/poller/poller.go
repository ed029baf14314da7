// Package poller is the local event source mapping: for one stream
// processor it reads the source table's stream from DynamoDB Local and
// invokes the processor's Lambda handler with DynamoDBEvent batches, the
// way Lambda does: batch size and batching
// window, ReportBatchItemFailures (retry from the first failed sequence
// number), bisect on error, bounded retries with exponential backoff, a
// maximum record age, and an on-failure destination (the local stack
// archives what it receives, as the dlq-archiver does in AWS).
// Shards are read in parallel, each in order, one batch at a time.
//
// What it costs does not grow with the stream: the stream is described
// when a shard may have closed (one was read to its end, or WaitIdle
// asks), and otherwise once a minute; each shard keeps its iterator; a
// shard that keeps finding nothing is polled less and less often (from
// four times a second down to MaxPollInterval), and Wake polls it at once
// when a write lands on its table.
package poller

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"

	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/streamread"
	"github.com/rallyhq/rally/shared/streams"
)

// Options configures a Poller.
type Options struct {
	Processor routes.Processor
	// Handler is the processor's Lambda handler.
	Handler streams.Handler
	// Table is the physical name of the processor's source table.
	Table   string
	DB      *dynamodb.Client
	Streams streamread.Client
	// OnFailure is the on-failure destination: it receives where each
	// batch whose retries or record age are exhausted was (the record an
	// event source mapping sends its destination, without the records).
	// The local stack archives them, as the dlq-archiver does in AWS.
	OnFailure func(context.Context, streamread.Parked) error
	// Region fills awsRegion when the stream does not say (default us-east-1).
	Region string
	// AccountID is used in the function ARN (default 000000000000).
	AccountID string
	// PollInterval is the pause after the first empty poll (default 250ms,
	// Lambda's four polls a second); each further empty poll in a row
	// doubles it, up to MaxPollInterval (default 2s; set it to
	// PollInterval to poll at one rate). Wake and WaitIdle end a pause.
	PollInterval, MaxPollInterval time.Duration
	// Pages, when set, is shared with the other pollers of the same stream
	// (NewPages): each page is read from the stream once for all of them.
	Pages *Pages
	// DescribeEvery is how often the stream is described while no shard
	// has closed (default 1 minute): a shard read to its end, and WaitIdle,
	// describe it at once.
	DescribeEvery time.Duration
	// RetryBase and RetryMax bound the exponential backoff between retries
	// of a failing record (defaults 100ms and 5s).
	RetryBase, RetryMax time.Duration
	// Log receives failures and DLQ events; nil discards them.
	Log *slog.Logger
}

// maxBuffered bounds the records read ahead of delivery (while paused or
// while a batch is failing).
const maxBuffered = 10000

// Poller feeds one processor from one stream.
type Poller struct {
	opts      Options
	streamARN string

	mu           sync.Mutex
	shards       map[string]*shard
	paused       bool
	waiters      int       // WaitIdle calls in progress: batching windows end early
	described    time.Time // start of the last completed DescribeStream
	lastBatchAt  time.Time
	delivered    int64
	runErr       error         // why Run gave up, if it did
	changed      chan struct{} // closed and replaced on every state change
	wakeDescribe chan struct{}
}

type shard struct {
	id, parent string
	started    bool
	finished   bool
	pending    int       // read but not yet delivered
	oldest     time.Time // creation time of the oldest pending record
	emptyPoll  time.Time // start of the last poll that found nothing pending
	wake       chan struct{}
}

// New prepares a poller; Run starts it.
func New(opts Options) (*Poller, error) {
	if opts.Handler == nil || opts.DB == nil || opts.Streams == nil || opts.OnFailure == nil || opts.Table == "" {
		return nil, errors.New("poller: Handler, DB, Streams, OnFailure and Table are required")
	}
	if opts.Region == "" {
		opts.Region = "us-east-1"
	}
	if opts.AccountID == "" {
		opts.AccountID = "000000000000"
	}
	if opts.PollInterval == 0 {
		opts.PollInterval = 250 * time.Millisecond
	}
	if opts.MaxPollInterval == 0 {
		opts.MaxPollInterval = 2 * time.Second
	}
	opts.MaxPollInterval = max(opts.MaxPollInterval, opts.PollInterval)
	if opts.DescribeEvery == 0 {
		opts.DescribeEvery = time.Minute
	}
	if opts.RetryBase == 0 {
		opts.RetryBase = 100 * time.Millisecond
	}
	if opts.RetryMax == 0 {
		opts.RetryMax = 5 * time.Second
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Poller{
		opts:         opts,
		shards:       map[string]*shard{},
		changed:      make(chan struct{}),
		wakeDescribe: make(chan struct{}, 1),
	}, nil
}

// Function is the processor's function name.
func (p *Poller) Function() string { return p.opts.Processor.Function }

// Run polls until ctx ends. It fails only when the source table has no
// stream.
func (p *Poller) Run(ctx context.Context) error {
	if err := p.resolveStream(ctx); err != nil {
		p.mu.Lock()
		p.runErr = err
		p.broadcast()
		p.mu.Unlock()
		return err
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		start := time.Now()
		list, err := streamread.Shards(ctx, p.opts.Streams, p.streamARN)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			p.opts.Log.Warn("describe stream failed", "function", p.Function(), "error", err.Error())
		} else {
			for _, sh := range p.track(list, start) {
				wg.Go(func() { p.readShard(ctx, sh) })
			}
		}
		// A failed describe is tried again at the poll rate.
		every := p.opts.DescribeEvery
		if err != nil {
			every = p.opts.PollInterval
		}
		t := time.NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-p.wakeDescribe:
		case <-t.C:
		}
		t.Stop()
	}
}

func (p *Poller) resolveStream(ctx context.Context) error {
	arn, err := streamread.StreamARN(ctx, p.opts.DB, p.opts.Table)
	if err != nil {
		return fmt.Errorf("poller %s: %w", p.Function(), err)
	}
	p.streamARN = arn
	return nil
}

// track records newly seen shards and returns those that may start now: a
// child starts once its parent has been read to the end (or the parent has
// left the stream's retention), which keeps an item's changes in order.
func (p *Poller) track(list []types.Shard, describedAt time.Time) []*shard {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range list {
		id := aws.ToString(s.ShardId)
		if _, ok := p.shards[id]; !ok {
			p.shards[id] = &shard{id: id, parent: aws.ToString(s.ParentShardId), wake: make(chan struct{}, 1)}
		}
	}
	var ready []*shard
	for _, sh := range p.shards {
		if sh.started {
			continue
		}
		if parent, ok := p.shards[sh.parent]; ok && !parent.finished {
			continue
		}
		sh.started = true
		ready = append(ready, sh)
	}
	p.described = describedAt
	p.broadcast()
	return ready
}

// broadcast wakes WaitIdle callers; p.mu must be held.
func (p *Poller) broadcast() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// readShard reads one shard from its oldest record to its end, delivering
// batches in order.
func (p *Poller) readShard(ctx context.Context, sh *shard) {
	log := p.opts.Log.With("function", p.Function(), "shard", sh.id)
	reader := &streamread.Shard{
		Client: p.opts.Streams, StreamARN: p.streamARN, ShardID: sh.id, Region: p.opts.Region,
		// The stream no longer holds what follows the last record read:
		// those records are lost to every reader.
		Expired: func(after string) { log.Error("stream records expired before delivery", "after", after) },
		Skip:    func(err error) { log.Error("undecodable stream record skipped", "error", err.Error()) },
	}
	var (
		buf       []events.DynamoDBEventRecord
		windowAt  time.Time // when the first record of buf was read
		closed    bool
		batchSize = max(int(p.opts.Processor.BatchSize), 1)
		window    = p.opts.Processor.BatchWindow
		empty     int // polls in a row that found nothing
	)
	for ctx.Err() == nil {
		paused, waited := p.state()
		if !paused && len(buf) > 0 && (len(buf) >= batchSize || closed || waited || time.Since(windowAt) >= window) {
			n := min(len(buf), batchSize)
			p.deliver(ctx, sh, buf[:n])
			buf = buf[n:]
			p.setPending(sh, buf)
			continue
		}
		if closed && len(buf) == 0 {
			p.mu.Lock()
			sh.finished = true
			p.broadcast()
			p.mu.Unlock()
			// The children of this shard may start now.
			p.kickDescribe()
			return
		}
		got := 0
		if !closed && len(buf) < maxBuffered {
			pollStart := time.Now()
			page, err := p.opts.Pages.next(ctx, reader)
			if err != nil {
				if ctx.Err() == nil {
					log.Warn("read stream failed", "error", err.Error())
					p.sleep(ctx, sh, p.opts.PollInterval)
				}
				continue
			}
			if len(buf) == 0 && len(page) > 0 {
				windowAt = time.Now()
			}
			buf = append(buf, page...)
			got = len(page)
			closed = reader.Closed()
			p.setPending(sh, buf)
			empty++
			if got > 0 {
				empty = 0
			}
			if got == 0 && len(buf) == 0 {
				p.mu.Lock()
				sh.emptyPoll = pollStart
				p.broadcast()
				p.mu.Unlock()
			}
		}
		if got > 0 || (closed && len(buf) == 0) {
			continue
		}
		wait := p.opts.PollInterval
		if len(buf) == 0 {
			wait = p.idlePause(empty)
		} else if !paused && !waited {
			wait = min(wait, max(window-time.Since(windowAt), 0))
		}
		if p.sleep(ctx, sh, wait) {
			empty = 0
		}
	}
}

// idlePause is the pause after empty polls in a row that found nothing:
// PollInterval after the first, doubling up to MaxPollInterval.
func (p *Poller) idlePause(empty int) time.Duration {
	d := p.opts.PollInterval << min(max(empty-1, 0), 20)
	if d > p.opts.MaxPollInterval || d <= 0 {
		d = p.opts.MaxPollInterval
	}
	return d
}

// sleep pauses the shard for d, or until it is woken (then it reports
// true) or ctx ends.
func (p *Poller) sleep(ctx context.Context, sh *shard, d time.Duration) (woken bool) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-sh.wake:
		return true
	case <-t.C:
	}
	return false
}

func (p *Poller) setPending(sh *shard, buf []events.DynamoDBEventRecord) {
	p.mu.Lock()
	defer p.mu.Unlock()
	sh.pending = len(buf)
	sh.oldest = time.Time{}
	if len(buf) > 0 {
		sh.oldest = created(buf[0])
	}
	p.broadcast()
}

// created is when the record was written, by the stream's clock.
func created(r events.DynamoDBEventRecord) time.Time {
	return r.Change.ApproximateCreationDateTime.Time
}

// attempt is a slice of a batch being retried, with the retries spent on
// it; bisecting does not spend retries, as with Lambda.
type attempt struct {
	records []events.DynamoDBEventRecord
	retries int
	invokes int
	lastErr string
	fnError bool
}

// deliver invokes the handler until every record of batch is applied or
// parked in the DLQ.
func (p *Poller) deliver(ctx context.Context, sh *shard, batch []events.DynamoDBEventRecord) {
	proc := p.opts.Processor
	queue := []attempt{{records: batch}}
	for len(queue) > 0 && ctx.Err() == nil {
		a := queue[0]
		queue = queue[1:]
		if proc.MaxRecordAge > 0 && time.Since(created(a.records[0])) > proc.MaxRecordAge {
			p.park(ctx, sh, a, streamread.MaximumRecordAgeExceeded)
			continue
		}
		resp, err := invoke(ctx, p.opts.Handler, a.records)
		if ctx.Err() != nil {
			return // shutting down; the stack re-reads the stream on start
		}
		a.invokes++
		from := failedFrom(a.records, resp, err)
		if from < 0 {
			p.done(len(a.records))
			continue
		}
		a.fnError = err != nil
		if err != nil {
			a.lastErr = err.Error()
		} else {
			a.lastErr = "batch item failure at sequence number " + a.records[from].Change.SequenceNumber
		}
		p.opts.Log.Warn("stream batch failed", "function", p.Function(), "shard", sh.id,
			"records", len(a.records), "failed_from", from, "retries", a.retries, "error", a.lastErr)
		p.done(from)
		rest := attempt{records: a.records[from:], retries: a.retries, invokes: a.invokes, lastErr: a.lastErr, fnError: a.fnError}
		switch {
		case from > 0:
			// Progress: retry the rest at once, from the named record.
			queue = append([]attempt{rest}, queue...)
		case len(rest.records) > 1:
			half := len(rest.records) / 2
			first, second := rest, rest
			first.records, second.records = rest.records[:half], rest.records[half:]
			queue = append([]attempt{first, second}, queue...)
		case rest.retries >= int(proc.MaxRetries):
			p.park(ctx, sh, rest, streamread.RetryAttemptsExhausted)
		default:
			p.backoff(ctx, rest.retries)
			rest.retries++
			queue = append([]attempt{rest}, queue...)
		}
	}
}

func (p *Poller) backoff(ctx context.Context, retries int) {
	d := p.opts.RetryBase << min(retries, 20)
	if d > p.opts.RetryMax || d <= 0 {
		d = p.opts.RetryMax
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func (p *Poller) done(n int) {
	if n == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delivered += int64(n)
	p.lastBatchAt = time.Now()
	p.broadcast()
}

func (p *Poller) park(ctx context.Context, sh *shard, a attempt, condition string) {
	entry := streamread.Parked{
		RequestContext: streamread.RequestContext{
			RequestID:              newUUID(),
			FunctionARN:            fmt.Sprintf("arn:aws:lambda:%s:%s:function:%s", p.opts.Region, p.opts.AccountID, p.Function()),
			Condition:              condition,
			ApproximateInvokeCount: a.invokes,
		},
		ResponseContext: streamread.ResponseContext{StatusCode: 200, ExecutedVersion: "$LATEST"},
		Version:         "1.0",
		Timestamp:       time.Now().UTC().Format("2006-01-02T15:04:05.000Z"),
		BatchInfo:       batchInfo(sh.id, p.streamARN, a.records),
	}
	if a.fnError {
		entry.ResponseContext.FunctionError = "Unhandled"
	}
	p.opts.Log.Error("batch parked", "function", p.Function(), "shard", sh.id,
		"condition", condition, "records", len(a.records), "error", a.lastErr)
	if err := p.opts.OnFailure(context.WithoutCancel(ctx), entry); err != nil {
		// Nowhere left to put it: say so loudly rather than block the shard.
		p.opts.Log.Error("could not archive the parked batch", "function", p.Function(),
			"shard", sh.id, "records", len(a.records), "error", err.Error())
	}
	p.done(len(a.records))
}

func batchInfo(shardID, streamARN string, recs []events.DynamoDBEventRecord) streamread.BatchInfo {
	first, last := recs[0], recs[len(recs)-1]
	return streamread.BatchInfo{
		ShardID:                         shardID,
		StartSequenceNumber:             first.Change.SequenceNumber,
		EndSequenceNumber:               last.Change.SequenceNumber,
		ApproximateArrivalOfFirstRecord: created(first).UTC().Format(time.RFC3339),
		ApproximateArrivalOfLastRecord:  created(last).UTC().Format(time.RFC3339),
		BatchSize:                       len(recs),
		StreamARN:                       streamARN,
	}
}

// invoke runs the handler like the Lambda runtime: a panic is a function
// error.
func invoke(ctx context.Context, h streams.Handler, recs []events.DynamoDBEventRecord) (resp events.DynamoDBEventResponse, err error) {
	// Lambda gives every invocation its function's timeout as a deadline.
	ctx, cancel := context.WithTimeout(ctx, routes.ProcessorTimeout)
	defer cancel()
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return h(ctx, events.DynamoDBEvent{Records: recs})
}

// failedFrom returns the index of the first record to retry, or -1 when
// the whole batch succeeded. A function error, or a failure naming no
// record of the batch, fails the whole batch, as Lambda treats them.
func failedFrom(recs []events.DynamoDBEventRecord, resp events.DynamoDBEventResponse, err error) int {
	if err != nil {
		return 0
	}
	if len(resp.BatchItemFailures) == 0 {
		return -1
	}
	index := make(map[string]int, len(recs))
	for i, r := range recs {
		index[r.Change.SequenceNumber] = i
	}
	from := len(recs)
	for _, f := range resp.BatchItemFailures {
		i, ok := index[f.ItemIdentifier]
		if !ok {
			return 0
		}
		from = min(from, i)
	}
	return from
}

func newUUID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// state reports whether the poller is paused and whether a WaitIdle call
// is waiting.
func (p *Poller) state() (paused, waited bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused, p.waiters > 0
}

// Pause stops invoking the processor; records keep being read (up to a
// bound), so lag shows in Status. Resume delivers them.
func (p *Poller) Pause() {
	p.mu.Lock()
	p.paused = true
	p.broadcast()
	p.mu.Unlock()
}

// Resume undoes Pause.
func (p *Poller) Resume() {
	p.mu.Lock()
	p.paused = false
	p.broadcast()
	p.mu.Unlock()
	p.kick()
}

func (p *Poller) kickDescribe() {
	select {
	case p.wakeDescribe <- struct{}{}:
	default:
	}
}

// kick makes the describer and every shard poll now instead of at their
// next tick.
func (p *Poller) kick() {
	p.kickDescribe()
	p.Wake()
}

// Wake makes every shard poll now, and at the poll rate again if it was
// backing off: what wrote to the source table calls it, so a write is
// read at once however long the stream has been quiet.
func (p *Poller) Wake() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, sh := range p.shards {
		select {
		case sh.wake <- struct{}{}:
		default:
		}
	}
}

// WaitIdle returns once every record written to the stream before the call
// has been delivered (applied or parked), at once when paused, and with
// Run's error when the poller could not start. It polls every shard
// immediately rather than waiting for the next tick, and while it waits a
// batching window ends as soon as its records are read: the window only
// bounds how long a batch may be held (Lambda too invokes early once a
// batch is full), and whoever waits for idle wants the records applied.
func (p *Poller) WaitIdle(ctx context.Context) error {
	since := time.Now()
	p.mu.Lock()
	p.waiters++
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.waiters--
		p.mu.Unlock()
	}()
	p.kick()
	for {
		p.mu.Lock()
		idle, changed, runErr := p.paused || p.idleSince(since), p.changed, p.runErr
		p.mu.Unlock()
		if runErr != nil {
			return runErr
		}
		if idle {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("poller %s: wait idle: %w", p.Function(), ctx.Err())
		case <-changed:
		}
	}
}

// idleSince: p.mu must be held.
func (p *Poller) idleSince(t time.Time) bool {
	if !p.described.After(t) {
		return false
	}
	for _, sh := range p.shards {
		if sh.finished {
			continue
		}
		if !sh.started || sh.pending > 0 || !sh.emptyPoll.After(t) {
			return false
		}
	}
	return true
}

// Status is a processor's health as the local stack reports it.
type Status struct {
	Function string `json:"function"`
	// Source is the table whose stream the poller reads (a function may
	// read several).
	Source string `json:"source"`
	// LagRecords counts records read from the stream but not yet delivered.
	LagRecords int `json:"lag_records"`
	// IteratorAgeMS is the age of the oldest undelivered record, like
	// Lambda's IteratorAge metric.
	IteratorAgeMS int64      `json:"iterator_age_ms"`
	LastBatchAt   *time.Time `json:"last_batch_at"`
	Delivered     int64      `json:"delivered_records"`
	Shards        int        `json:"shards"`
	Paused        bool       `json:"paused"`
}

// Status reports lag and progress.
func (p *Poller) Status() Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := Status{Function: p.Function(), Source: p.opts.Processor.Source.Name, Paused: p.paused, Delivered: p.delivered}
	var oldest time.Time
	for _, sh := range p.shards {
		if sh.finished {
			continue
		}
		s.Shards++
		s.LagRecords += sh.pending
		if sh.pending > 0 && (oldest.IsZero() || sh.oldest.Before(oldest)) {
			oldest = sh.oldest
		}
	}
	if !oldest.IsZero() {
		s.IteratorAgeMS = max(time.Since(oldest).Milliseconds(), 0)
	}
	if !p.lastBatchAt.IsZero() {
		t := p.lastBatchAt.UTC()
		s.LastBatchAt = &t
	}
	return s
}

// Invoke runs the processor's handler with records once, with the
// function's timeout, as Lambda's Invoke would (a redrive).
func (p *Poller) Invoke(ctx context.Context, records []events.DynamoDBEventRecord) (events.DynamoDBEventResponse, error) {
	return invoke(ctx, p.opts.Handler, records)
}
