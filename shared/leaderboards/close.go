package leaderboards

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/errs"
	"github.com/rallyhq/rally/shared/jobs"
)

// A periodic board's period closes once it has ended: the close job
// marks it closed to late matches, waits for the score index to settle,
// walks the final order into the archive (pages in DynamoDB, gzip JSON
// Lines in the documents bucket), writes the archive's head, and lets the
// period leave Redis once the next period is one period old. It is the
// one place a period ends.
const (
	// CloseAfter is how long after a period's end the schedule starts its
	// close: longer than any submission that began in the period can take
	// to commit (a request ends within 30 s), so only late matches, which
	// check the mark, can still land in it.
	CloseAfter = time.Minute
	// IndexSettle is how long after the mark the close starts to read the
	// score index, which follows the table within a moment.
	IndexSettle = 10 * time.Second
	// ArchivePage is how many entries one archive page holds; a close
	// reads ArchiveChunk entries at a time and writes each chunk as one
	// part of the archive's JSON Lines.
	ArchivePage  = 100
	ArchiveChunk = 10 * ArchivePage
	// closeRetries bounds the walks a close starts again because the
	// archive and the period's member count disagreed (the index had not
	// settled, or a ban moved a player meanwhile).
	closeRetries = 5
)

// ArchiveHead is what an archived period holds: its members when it
// closed, its pages and when it was closed to late matches.
type ArchiveHead struct {
	Total int64
	Pages int
	// PartPages is how many pages each part of the JSON Lines holds.
	PartPages int
	ClosedAt  time.Time
}

// Part is the number of the JSON Lines part that holds page n.
func (h ArchiveHead) Part(n int) int {
	return n / cmp.Or(h.PartPages, ArchiveChunk/ArchivePage)
}

// Archive stores the final standings of closed board periods.
type Archive interface {
	Head(ctx context.Context, board, period string) (ArchiveHead, bool, error)
	// PutPages writes pages of the final order, numbered from first;
	// writing one again writes the same.
	PutPages(ctx context.Context, d Definition, period string, first int, pages [][]Entry) error
	// PutHead writes the head once; a repeat writes nothing.
	PutHead(ctx context.Context, board, period string, h ArchiveHead) (created bool, err error)
	Page(ctx context.Context, board, period string, n int) ([]Entry, error)
	// PageOf finds the page that holds score s, if any.
	PageOf(ctx context.Context, d Definition, period string, s Score) (int, bool, error)
	// Strike takes the player of score s out of page n, the others
	// keeping their ranks.
	Strike(ctx context.Context, d Definition, period string, n int, s Score) (bool, error)
}

// CloseScores is what a close needs of Scores.
type CloseScores interface {
	Close(ctx context.Context, board, period string, at time.Time) (time.Time, error)
	After(ctx context.Context, d Definition, period string, e *Entry, n int) ([]Entry, error)
	Members(ctx context.Context, board, period string) (int64, error)
	Views(ctx context.Context, board, period string) ([]string, error)
}

// CloseCache is what a close does to Redis: the period's board expires at
// a time (now, when that time has passed).
type CloseCache interface {
	ExpireAt(ctx context.Context, d Definition, period string, at, now time.Time) error
}

// Documents is where the archive's JSON Lines go (the exports bucket, or
// the local stack's directory).
type Documents interface {
	Put(ctx context.Context, key string, data []byte) error
}

// ArchivePrefix is where a board period's JSON Lines parts live.
func ArchivePrefix(board, period string) string {
	return fmt.Sprintf("archive/leaderboards/%s/%s/", board, period)
}

// Closer closes periods: the close job's task, and the schedule that
// starts it.
type Closer struct {
	Defs      Definitions
	Scores    CloseScores
	Archive   Archive
	Cache     CloseCache
	Documents Documents
	Clock     clock.Clock
	Log       *slog.Logger
	// Chunk is how many entries a close reads at a time and writes as
	// one part of the JSON Lines: ArchiveChunk when 0; a multiple of
	// ArchivePage.
	Chunk int

	asked sync.Map // close job IDs the schedule was given by Due

	leftMu sync.Mutex
	left   map[string]bool // board#period Leave took out of Redis, in its window
}

// Tasks registers the close job.
func (c *Closer) Tasks() jobs.Tasks {
	return jobs.Tasks{{Kind: jobs.Close, Target: jobs.Leaderboard}: jobs.Named("leaderboards-close", c.run)}
}

// CloseJobID names the one close job of a board period: the schedule
// asking twice, or an operator asking again, finds it.
func CloseJobID(board, period string) string { return "close-" + board + "-" + period }

// CloseLookback is how many ended periods of each board the schedule
// looks at: a schedule that stopped for a while still closes the periods
// it missed.
const CloseLookback = 3

// Due lists the close jobs the schedule should start at now: each of the
// last CloseLookback periods of every periodic board that ended
// CloseAfter ago or more, and after the board was defined. A job already
// asked for here is not asked for again by this process; another finds
// it by its ID. On the same pass it takes out of Redis the closed periods
// whose leave time has passed (see leave); a failure there is logged and
// tried again at the next tick, and never holds the closes back.
func (c *Closer) Due(ctx context.Context, now time.Time) ([]jobs.Job, error) {
	defs, err := c.Defs.List(ctx)
	if err != nil {
		return nil, err
	}
	var due []jobs.Job
	for _, d := range defs {
		if d.Reset == Never {
			continue
		}
		at := now.Add(-CloseAfter)
		for range CloseLookback {
			p := d.PreviousPeriod(at)
			end := d.PeriodEnd(p)
			if end.Before(d.CreatedAt) {
				break
			}
			id := CloseJobID(d.ID, p)
			if _, asked := c.asked.LoadOrStore(id, true); !asked {
				due = append(due, jobs.Job{ID: id, Spec: jobs.Spec{Kind: jobs.Close, Target: jobs.Leaderboard, ID: d.ID, Period: p}})
			}
			at = d.PeriodStart(p)
		}
	}
	if err := c.leave(ctx, defs, now); err != nil && c.Log != nil {
		c.Log.WarnContext(ctx, "closed periods not taken out of Redis", "error", err.Error())
	}
	return due, nil
}

// closeCursor is a close's position: the boards it archives (the board,
// then each regional view), the one under way, and how far its walk got.
type closeCursor struct {
	Marked   time.Time `json:"marked"`
	Boards   []string  `json:"boards"`
	I        int       `json:"i"`
	Last     *Entry    `json:"last,omitempty"`
	Count    int64     `json:"count"`
	Retries  int       `json:"retries,omitempty"`
	Finished bool      `json:"finished,omitempty"`
}

func (c *Closer) run(ctx context.Context, spec jobs.Spec, cursor string, w *jobs.Work) (string, bool, error) {
	if spec.ID == "" || spec.Period == "" {
		return "", false, errs.Field("id", "a close names a leaderboard (id) and its period")
	}
	d, err := c.Defs.Get(ctx, spec.ID)
	if err != nil {
		return "", false, err
	}
	if err := d.CheckPeriod(spec.Period); err != nil {
		return "", false, err
	}
	if d.Reset == Never {
		return "", false, errs.New(errs.Invalid, "leaderboard %s never resets: it has no period to close", d.ID)
	}
	now := c.Clock.Now()
	if end := d.PeriodEnd(spec.Period); now.Before(end) {
		return "", false, errs.New(errs.Invalid, "period %s of %s ends at %s: it cannot close before", spec.Period, d.ID, end.UTC().Format(time.RFC3339))
	}
	var cur closeCursor
	if cursor != "" {
		if err := json.Unmarshal([]byte(cursor), &cur); err != nil {
			return "", false, fmt.Errorf("close cursor: %w", err)
		}
	}
	if cur.Marked.IsZero() {
		if _, found, err := c.Archive.Head(ctx, d.ID, spec.Period); err != nil || found {
			return "", found, err // closed before: a repeated close writes nothing
		}
		if cur.Marked, err = c.Scores.Close(ctx, d.ID, spec.Period, now); err != nil {
			return "", false, err
		}
		cur.Boards = []string{d.ID}
		if d.Regional {
			regions, err := c.Scores.Views(ctx, d.ID, spec.Period)
			if err != nil {
				return "", false, err
			}
			for _, r := range regions {
				cur.Boards = append(cur.Boards, ViewID(d.ID, r))
			}
		}
	}
	if settled := cur.Marked.Add(IndexSettle); now.Before(settled) {
		w.Sleep(settled)
		return cur.encode(), false, nil
	}
	defs := WithViews(c.Defs)
	for cur.I < len(cur.Boards) {
		b, err := defs.Get(ctx, cur.Boards[cur.I])
		if err != nil {
			return "", false, err
		}
		if w.Progress.Total == 0 {
			if w.Progress.Total, err = c.Scores.Members(ctx, b.ID, spec.Period); err != nil {
				return "", false, err
			}
		}
		done, err := c.walk(ctx, b, spec.Period, &cur, w)
		if err != nil || !done {
			return cur.encode(), false, err
		}
		if cur.Last == nil && cur.Count < 0 {
			// Started again: the member count and the archive disagreed.
			cur.Count = 0
			w.Sleep(c.Clock.Now().Add(IndexSettle))
			return cur.encode(), false, nil
		}
		cur.I, cur.Last, cur.Count, cur.Retries = cur.I+1, nil, 0, 0
		w.Progress = jobs.Progress{}
		if err := w.Checkpoint(ctx, cur.encode()); err != nil {
			return "", false, err
		}
	}
	return c.finish(ctx, d, spec.Period, cur, w)
}

// walk archives the board period from the cursor on, a chunk at a time,
// until it reaches the end (done) or ctx ends.
func (c *Closer) walk(ctx context.Context, b Definition, period string, cur *closeCursor, w *jobs.Work) (bool, error) {
	for ctx.Err() == nil {
		size := cmp.Or(c.Chunk, ArchiveChunk)
		chunk, err := c.Scores.After(ctx, b, period, cur.Last, size)
		if err != nil {
			return false, err
		}
		rankFrom(b.TieBreak, cur.Last, cur.Count, chunk)
		first := int(cur.Count / ArchivePage)
		var pages [][]Entry
		for i := 0; i < len(chunk); i += ArchivePage {
			pages = append(pages, chunk[i:min(i+ArchivePage, len(chunk))])
		}
		if err := c.Archive.PutPages(ctx, b, period, first, pages); err != nil {
			return false, err
		}
		if len(chunk) > 0 {
			if err := c.writePart(ctx, b.ID, period, first/(size/ArchivePage), chunk); err != nil {
				return false, err
			}
			last := chunk[len(chunk)-1]
			cur.Last, cur.Count = &last, cur.Count+int64(len(chunk))
			w.Progress.Done = cur.Count
		}
		if len(chunk) < size {
			return true, c.check(ctx, b, period, cur, w)
		}
		if err := w.Checkpoint(ctx, cur.encode()); err != nil {
			return false, err
		}
	}
	return false, nil
}

// check compares what the walk archived with the period's member count:
// a difference means the index had not settled (or a ban moved a player
// meanwhile), and the board is walked again (cur.Count < 0 says so), up
// to closeRetries times.
func (c *Closer) check(ctx context.Context, b Definition, period string, cur *closeCursor, w *jobs.Work) error {
	members, err := c.Scores.Members(ctx, b.ID, period)
	if err != nil || members == cur.Count {
		return err
	}
	w.Findings.Found("archive", fmt.Sprintf("%s#%s: %d archived, %d members; walked again", b.ID, period, cur.Count, members), false)
	if cur.Retries >= closeRetries {
		return fmt.Errorf("close %s/%s: the score index holds %d entries and the period %d members after %d walks", b.ID, period, cur.Count, members, cur.Retries+1)
	}
	cur.Retries++
	cur.Last, cur.Count = nil, -1
	w.Progress = jobs.Progress{}
	return nil
}

// rankFrom ranks a chunk of the final order that follows last, the
// count-th entry (none when count is 0): positions go on from count;
// under Shared an entry with the score before it takes that rank.
func rankFrom(t TieBreak, last *Entry, count int64, chunk []Entry) {
	prev := last
	for i := range chunk {
		chunk[i].Rank = int(count) + i + 1
		if t == Shared && prev != nil && prev.Score == chunk[i].Score {
			chunk[i].Rank = prev.Rank
		}
		prev = &chunk[i]
	}
}

// writePart writes a chunk of the final order as part n of the board
// period's gzip JSON Lines (written again, the same bytes).
func (c *Closer) writePart(ctx context.Context, board, period string, n int, chunk []Entry) error {
	lines := make([]archiveLine, len(chunk))
	for i, e := range chunk {
		lines[i] = archiveLine{e.Rank, e.PlayerID, e.Score, e.ReachedAt.UTC().Format(time.RFC3339Nano)}
	}
	data, err := encodePart(lines)
	if err != nil {
		return err
	}
	return c.Documents.Put(ctx, PartKey(board, period, n), data)
}

// finish writes every archived board's head (the views' before the
// board's own, whose head says the close is done) and sets the period's
// Redis boards to leave once the next period is one period old.
func (c *Closer) finish(ctx context.Context, d Definition, period string, cur closeCursor, w *jobs.Work) (string, bool, error) {
	defs := WithViews(c.Defs)
	leave := d.PeriodEnd(d.PeriodAt(d.PeriodEnd(period)))
	for i := len(cur.Boards) - 1; i >= 0; i-- {
		b, err := defs.Get(ctx, cur.Boards[i])
		if err != nil {
			return "", false, err
		}
		members, err := c.Scores.Members(ctx, b.ID, period)
		if err != nil {
			return "", false, err
		}
		pages := int((members + ArchivePage - 1) / ArchivePage)
		if err := c.Cache.ExpireAt(ctx, b, period, leave, c.Clock.Now()); err != nil {
			return "", false, err
		}
		h := ArchiveHead{Total: members, Pages: pages, PartPages: cmp.Or(c.Chunk, ArchiveChunk) / ArchivePage, ClosedAt: cur.Marked}
		if _, err := c.Archive.PutHead(ctx, b.ID, period, h); err != nil {
			return "", false, err
		}
		w.Findings.Checked += members
	}
	return "", true, nil
}

func (c closeCursor) encode() string {
	raw, _ := json.Marshal(c)
	return string(raw)
}

// leave takes out of Redis each closed period whose leave time (the end
// of the period after it) has passed by the service's clock. The close set
// the period's keys to expire then, but Redis counts an expiry on its own
// clock, which is not always the service's (the local stack's clock
// moves; a region's may drift): here the service's clock decides. It looks
// at the last CloseLookback such periods of every periodic board, reads
// each one's archive head (by key) until it has taken the period out, and
// takes out the period's regional views with it; taking a period out
// again changes nothing.
func (c *Closer) leave(ctx context.Context, defs []Definition, now time.Time) error {
	views := WithViews(c.Defs)
	c.leftMu.Lock()
	defer c.leftMu.Unlock()
	// What this pass finds taken out: the periods still in the window,
	// so the record stays as small as the window.
	left := map[string]bool{}
	defer func() { c.left = left }()
	for _, d := range defs {
		if d.Reset == Never {
			continue
		}
		// The newest period whose leave time has passed: the one before
		// the last ended period.
		at := d.PeriodStart(d.PreviousPeriod(now))
		for range CloseLookback {
			p := d.PreviousPeriod(at)
			at = d.PeriodStart(p)
			if d.PeriodEnd(p).Before(d.CreatedAt) {
				break
			}
			key := d.ID + "#" + p
			if c.left[key] {
				left[key] = true
				continue
			}
			if _, closed, err := c.Archive.Head(ctx, d.ID, p); err != nil || !closed {
				if err != nil {
					return err
				}
				continue // its close takes it out when it finishes
			}
			boards := []Definition{d}
			if d.Regional {
				regions, err := c.Scores.Views(ctx, d.ID, p)
				if err != nil {
					return err
				}
				for _, r := range regions {
					v, err := views.Get(ctx, ViewID(d.ID, r))
					if err != nil {
						return err
					}
					boards = append(boards, v)
				}
			}
			leave := d.PeriodEnd(d.PeriodAt(d.PeriodEnd(p)))
			for _, b := range boards {
				if err := c.Cache.ExpireAt(ctx, b, p, leave, now); err != nil {
					return err
				}
			}
			left[key] = true
		}
	}
	return nil
}
