package poller

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/rallyhq/rally/infra/streamread"
	"github.com/rallyhq/rally/shared/streams"
)

// DLQ is the local dead-letter queue: one JSON Lines file per function,
// <dir>/<function>.jsonl.
type DLQ struct {
	dir string
	mu  sync.Mutex
}

// NewDLQ keeps parked batches under dir, creating it.
func NewDLQ(dir string) (*DLQ, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("poller: create dlq dir: %w", err)
	}
	return &DLQ{dir: dir}, nil
}

// Dir is where the files live.
func (d *DLQ) Dir() string { return d.dir }

func (d *DLQ) file(function string) string { return filepath.Join(d.dir, function+".jsonl") }

// Park appends a batch to the function's file.
func (d *DLQ) Park(function string, p streamread.Parked) error {
	line, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("poller: encode parked batch: %w", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	f, err := os.OpenFile(d.file(function), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("poller: open dlq: %w", err)
	}
	if _, err := f.Write(append(line, '\n')); err != nil {
		f.Close()
		return fmt.Errorf("poller: write dlq: %w", err)
	}
	return f.Close()
}

// List returns the parked batches of every function, by function name.
func (d *DLQ) List() (map[string][]streamread.Parked, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	entries, err := os.ReadDir(d.dir)
	if err != nil {
		return nil, fmt.Errorf("poller: list dlq: %w", err)
	}
	out := map[string][]streamread.Parked{}
	for _, e := range entries {
		fn, ok := strings.CutSuffix(e.Name(), ".jsonl")
		if !ok || e.IsDir() {
			continue
		}
		batches, err := d.read(fn)
		if err != nil {
			return nil, err
		}
		if len(batches) > 0 {
			out[fn] = batches
		}
	}
	return out, nil
}

// Depth is how many batches of function are parked.
func (d *DLQ) Depth(function string) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	b, err := d.read(function)
	return len(b), err
}

func (d *DLQ) read(function string) ([]streamread.Parked, error) {
	data, err := os.ReadFile(d.file(function))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("poller: read dlq: %w", err)
	}
	var out []streamread.Parked
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 64<<20)
	for line := 1; sc.Scan(); line++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var p streamread.Parked
		if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
			return nil, fmt.Errorf("poller: %s line %d: %w", d.file(function), line, err)
		}
		out = append(out, p)
	}
	return out, sc.Err()
}

// RedriveResult counts what a redrive did.
type RedriveResult struct {
	Function  string `json:"function"`
	Redriven  int    `json:"redriven"`
	Succeeded int    `json:"succeeded"`
	Remaining int    `json:"remaining"`
}

// Redrive invokes handler once with each parked batch of function, in the
// order they were parked, and keeps only what still fails: a batch that
// fails part-way is kept from its first failed record.
func (d *DLQ) Redrive(ctx context.Context, function string, handler streams.Handler) (RedriveResult, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	res := RedriveResult{Function: function}
	batches, err := d.read(function)
	if err != nil || len(batches) == 0 {
		return res, err
	}
	var keep []streamread.Parked
	for _, p := range batches {
		res.Redriven++
		resp, err := invoke(ctx, handler, p.Records)
		from := failedFrom(p.Records, resp, err)
		if from < 0 {
			res.Succeeded++
			continue
		}
		if from > 0 {
			p.Records = p.Records[from:]
			p.BatchInfo = batchInfo(p.BatchInfo.ShardID, p.BatchInfo.StreamARN, p.Records)
		}
		p.RequestContext.ApproximateInvokeCount++
		if err != nil {
			p.Error = err.Error()
		}
		keep = append(keep, p)
	}
	res.Remaining = len(keep)
	return res, d.rewrite(function, keep)
}

func (d *DLQ) rewrite(function string, batches []streamread.Parked) error {
	var buf bytes.Buffer
	for _, p := range batches {
		line, err := json.Marshal(p)
		if err != nil {
			return fmt.Errorf("poller: encode parked batch: %w", err)
		}
		buf.Write(append(line, '\n'))
	}
	tmp := d.file(function) + ".tmp"
	if err := os.WriteFile(tmp, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("poller: rewrite dlq: %w", err)
	}
	if err := os.Rename(tmp, d.file(function)); err != nil {
		return fmt.Errorf("poller: rewrite dlq: %w", err)
	}
	return nil
}
