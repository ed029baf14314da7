package poller

import (
	"context"
	"sync"

	"github.com/aws/aws-lambda-go/events"

	"github.com/rallyhq/rally/shared/streamread"
)

// Pages shares what is read from one stream among the pollers that read
// it (a table whose stream feeds several functions), so that each record
// is read from the stream once: a poller takes what another has read past
// where it stands, waits for a read from where it stands that is under
// way, and otherwise reads for itself and keeps the page for the others.
// The last pages of each shard are kept: a poller far behind the others
// (paused, or held up by a failing batch) reads for itself.
//
// The pollers' handlers receive the same records: as in AWS, where each
// function gets a copy of its own, a handler must not change them.
type Pages struct {
	mu     sync.Mutex
	shards map[string]*sharedShard
}

type sharedShard struct {
	pages   []keptPage               // oldest first, at most maxKeptPages
	kept    int                      // records in pages, at most maxKeptRecords
	reading map[string]chan struct{} // reads under way, by where they start
}

// keptPage is a page read from a shard and where it starts: after the
// record with sequence number after ("" at the shard's start).
type keptPage struct {
	after   string
	records []events.DynamoDBEventRecord
	closed  bool // the shard's last page
}

// maxKeptPages and maxKeptRecords bound what is kept per shard: a poller
// further behind reads for itself.
const (
	maxKeptPages   = 256
	maxKeptRecords = 5000
)

// NewPages shares a stream among the pollers given it.
func NewPages() *Pages { return &Pages{shards: map[string]*sharedShard{}} }

// next returns r's next page.
func (ps *Pages) next(ctx context.Context, r *streamread.Shard) ([]events.DynamoDBEventRecord, error) {
	if ps == nil {
		return r.Next(ctx)
	}
	after := r.After()
	ps.mu.Lock()
	sh := ps.shards[r.ShardID]
	if sh == nil {
		sh = &sharedShard{reading: map[string]chan struct{}{}}
		ps.shards[r.ShardID] = sh
	}
	for {
		if page, closed, ok := sh.find(after); ok {
			ps.mu.Unlock()
			r.Advance(page, closed)
			return page, nil
		}
		ready, busy := sh.reading[after]
		if !busy {
			break
		}
		ps.mu.Unlock()
		select {
		case <-ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		// That read kept a page, or found nothing as of when it was made:
		// look again, and read for this poller when nothing is kept (a
		// write may have landed since, and woken this poller for it).
		ps.mu.Lock()
	}
	ready := make(chan struct{})
	sh.reading[after] = ready
	ps.mu.Unlock()

	page, err := r.Next(ctx)
	ps.mu.Lock()
	defer ps.mu.Unlock()
	delete(sh.reading, after)
	close(ready)
	if err == nil && (len(page) > 0 || r.Closed()) {
		sh.pages = append(sh.pages, keptPage{after: after, records: page, closed: r.Closed()})
		sh.kept += len(page)
		for len(sh.pages) > maxKeptPages || sh.kept > maxKeptRecords {
			sh.kept -= len(sh.pages[0].records)
			sh.pages = sh.pages[1:]
		}
	}
	return page, err
}

// find returns what a kept page holds past the record after: a page that
// starts there, or the rest of a page read from further back.
func (sh *sharedShard) find(after string) (page []events.DynamoDBEventRecord, closed, ok bool) {
	for i := len(sh.pages) - 1; i >= 0; i-- {
		p := sh.pages[i]
		if p.after == after {
			return p.records, p.closed, true
		}
		for j, rec := range p.records {
			if rec.Change.SequenceNumber != after {
				continue
			}
			if j < len(p.records)-1 || p.closed {
				return p.records[j+1:], p.closed, true
			}
			break // the next page, if kept, starts there
		}
	}
	return nil, false, false
}
