package imports

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/jobs"
)

// Sizes of the work.
const (
	// ChunkLines is how many lines are read, then applied together: each
	// importer reads the current state of a chunk's items in a few batch
	// reads and writes the new state in a few batch writes.
	ChunkLines = 1000
	// MaxLineBytes bounds a line; a longer one is rejected.
	MaxLineBytes = 64 << 10
)

// Task is the import job's one task: it reads the file from the
// checkpoint a chunk at a time, hands each importer its lines, and once
// the file is read has every importer catch up what it touched.
type Task struct {
	Sources   Sources
	Importers []Importer
	Clock     clock.Clock
}

// Tasks registers the import.
func (t *Task) Tasks() jobs.Tasks {
	return jobs.Tasks{{Kind: jobs.Import}: jobs.Named("import", t.Run)}
}

// cursor is an import's checkpoint.
type cursor struct {
	// Offset and Line are where the next chunk starts: the byte offset
	// in the file and the number of lines before it.
	Offset int64 `json:"offset"`
	Line   int64 `json:"line"`
	// At is when the import started (the time of lines that give none).
	At time.Time `json:"at"`
	// Rejected counts the lines refused before Offset.
	Rejected int64 `json:"rejected"`
	// Read is set once the whole file is read; CaughtUp counts the
	// importers that caught up since.
	Read     bool `json:"read,omitempty"`
	CaughtUp int  `json:"caught_up,omitempty"`
	// Touched is, per importer, what it touched (sorted, each once).
	Touched map[string][]string `json:"touched,omitempty"`
}

func (c cursor) encode() string {
	raw, _ := json.Marshal(c)
	return string(raw)
}

// Run implements jobs.RunFunc. Progress counts bytes of the file.
func (t *Task) Run(ctx context.Context, spec jobs.Spec, at string, w *jobs.Work) (string, bool, error) {
	c := cursor{At: t.Clock.Now().UTC().Truncate(time.Millisecond)}
	if at != "" {
		if err := json.Unmarshal([]byte(at), &c); err != nil {
			return "", false, fmt.Errorf("import cursor: %w", err)
		}
	}
	// The findings go back to the checkpoint too: lines refused after it
	// are refused again.
	w.Findings.Rejected = c.Rejected
	if !c.Read {
		more, err := t.read(ctx, spec.Source, &c, w)
		if err != nil || more {
			return c.encode(), false, err
		}
	}
	for c.CaughtUp < len(t.Importers) {
		if ctx.Err() != nil {
			return c.encode(), false, nil
		}
		imp := t.Importers[c.CaughtUp]
		if err := imp.CatchUp(ctx, c.Touched[imp.Name()], w); err != nil {
			return "", false, fmt.Errorf("import %s: catch up %s: %w", spec.Source, imp.Name(), err)
		}
		c.CaughtUp++
		if err := w.Checkpoint(ctx, c.encode()); err != nil {
			return "", false, err
		}
	}
	return "", true, nil
}

// read applies the file from c on, a chunk at a time, until its end
// (more is false) or until the next chunk would not be done before ctx's
// deadline (more is true, c is where to continue).
func (t *Task) read(ctx context.Context, source string, c *cursor, w *jobs.Work) (more bool, err error) {
	r, size, err := t.Sources.Open(ctx, source, c.Offset)
	if err != nil {
		return false, err
	}
	defer r.Close()
	w.Progress = jobs.Progress{Done: c.Offset, Total: size}
	br := bufio.NewReaderSize(r, 256<<10)
	var took time.Duration
	for {
		if !fits(ctx, took) {
			return true, nil
		}
		start := time.Now()
		lines, n, end, err := readChunk(br, c.Line)
		if err != nil {
			return false, fmt.Errorf("import %s at byte %d: %w", source, c.Offset+n, err)
		}
		if err := t.apply(ctx, source, c, lines, w); err != nil {
			return false, err
		}
		c.Offset += n
		c.Line += int64(len(lines))
		c.Rejected = w.Findings.Rejected
		w.Progress.Done = c.Offset
		if end {
			c.Read = true
			w.Progress.Done = max(w.Progress.Done, w.Progress.Total)
			return false, nil
		}
		if err := w.Checkpoint(ctx, c.encode()); err != nil {
			return false, err
		}
		took = time.Since(start)
	}
}

// fits tells whether a chunk that takes as long as the last one did
// ends before ctx's deadline, with a margin.
func fits(ctx context.Context, took time.Duration) bool {
	if ctx.Err() != nil {
		return false
	}
	dl, ok := ctx.Deadline()
	return !ok || time.Until(dl) > 2*took
}

// rawLine is a line read: its bytes (without the newline), or too long.
type rawLine struct {
	text    []byte
	tooLong bool
}

// readChunk reads up to ChunkLines lines; n counts the bytes they took,
// newlines included, and end is set at the end of the file.
func readChunk(br *bufio.Reader, before int64) (lines []rawLine, n int64, end bool, err error) {
	for len(lines) < ChunkLines {
		var text []byte
		tooLong := false
		for {
			part, err := br.ReadSlice('\n')
			n += int64(len(part))
			if !tooLong && len(text)+len(part) <= MaxLineBytes+1 {
				text = append(text, part...)
			} else {
				tooLong, text = true, nil
			}
			if errors.Is(err, bufio.ErrBufferFull) {
				continue
			}
			if errors.Is(err, io.EOF) {
				if len(part) > 0 || len(text) > 0 || tooLong {
					lines = append(lines, rawLine{bytes.TrimRight(text, "\r\n"), tooLong})
				}
				return lines, n, true, nil
			}
			if err != nil {
				return nil, 0, false, err
			}
			break
		}
		lines = append(lines, rawLine{bytes.TrimRight(text, "\r\n"), tooLong})
	}
	return lines, n, false, nil
}

// apply hands a chunk's lines to their importers, each its own in file
// order, and records the lines refused. Blank lines are skipped.
func (t *Task) apply(ctx context.Context, source string, c *cursor, raw []rawLine, w *jobs.Work) error {
	byType := map[string]int{}
	for i, imp := range t.Importers {
		for _, typ := range imp.Types() {
			byType[typ] = i
		}
	}
	batches := make([][]Line, len(t.Importers))
	var rejected []Rejection
	for i, r := range raw {
		no := c.Line + int64(i) + 1
		if r.tooLong {
			rejected = append(rejected, Rejection{no, fmt.Sprintf("longer than %d bytes", MaxLineBytes)})
			continue
		}
		if len(bytes.TrimSpace(r.text)) == 0 {
			continue
		}
		var head struct {
			Type *string `json:"type"`
		}
		if err := json.Unmarshal(r.text, &head); err != nil {
			rejected = append(rejected, Rejection{no, "not a JSON object: " + err.Error()})
			continue
		}
		if head.Type == nil {
			rejected = append(rejected, Rejection{no, `type: is required (one of ` + strings.Join(t.types(), ", ") + `)`})
			continue
		}
		imp, ok := byType[*head.Type]
		if !ok {
			rejected = append(rejected, Rejection{no, fmt.Sprintf("type: %q is not one of %s", *head.Type, strings.Join(t.types(), ", "))})
			continue
		}
		batches[imp] = append(batches[imp], Line{No: no, Type: *head.Type, Raw: json.RawMessage(r.text), ID: LineID(source, no)})
	}
	for i, lines := range batches {
		if len(lines) == 0 {
			continue
		}
		imp := t.Importers[i]
		refused, touched, err := imp.Import(ctx, Batch{Lines: lines, At: c.At, Job: w.Job})
		if err != nil {
			return fmt.Errorf("import %s lines %d–%d: %s: %w", source, lines[0].No, lines[len(lines)-1].No, imp.Name(), err)
		}
		rejected = append(rejected, refused...)
		c.touch(imp.Name(), touched)
	}
	sort.Slice(rejected, func(i, j int) bool { return rejected[i].Line < rejected[j].Line })
	for _, r := range rejected {
		example := fmt.Sprintf("line %d: %s", r.Line, r.Reason)
		if slices.Contains(w.Findings.Examples, "rejected: "+example) {
			// Refused again after a resumption: one example of it.
			w.Findings.Rejected++
			continue
		}
		w.Findings.Reject(example)
	}
	return nil
}

// types lists every line type, sorted.
func (t *Task) types() []string {
	var out []string
	for _, imp := range t.Importers {
		out = append(out, imp.Types()...)
	}
	slices.Sort(out)
	return out
}

// touch adds what an importer touched to the cursor.
func (c *cursor) touch(name string, touched []string) {
	if len(touched) == 0 {
		return
	}
	if c.Touched == nil {
		c.Touched = map[string][]string{}
	}
	all := append(c.Touched[name], touched...)
	slices.Sort(all)
	c.Touched[name] = slices.Compact(all)
}
