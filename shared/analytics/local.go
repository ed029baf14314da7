package analytics

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/parquet-go/parquet-go"
)

// LocalSink writes events as Firehose would deliver them to S3: Snappy
// Parquet files under Dir/events/event_type=…/dt=…/hour=…/, with the
// columns of Columns. Each Send writes one new file per partition, under a
// temporary name first so a reader never sees half a file; names are
// unique, so concurrent Sends never collide.
type LocalSink struct {
	Dir string
}

// Send writes the events; a partition whose file cannot be written fails
// its events.
func (s *LocalSink) Send(ctx context.Context, events []Event) ([]bool, error) {
	if s.Dir == "" {
		return nil, errors.New("analytics: local sink has no directory")
	}
	failed := make([]bool, len(events))
	byPartition := map[string][]int{}
	var order []string
	for i, e := range events {
		p := PartitionPath(e)
		if byPartition[p] == nil {
			order = append(order, p)
		}
		byPartition[p] = append(byPartition[p], i)
	}
	var errs []error
	for _, p := range order {
		if err := ctx.Err(); err != nil {
			return failAfterPartitions(failed, byPartition, order, p), err
		}
		rows := make([]Event, len(byPartition[p]))
		for j, i := range byPartition[p] {
			rows[j] = events[i]
		}
		if err := s.write(filepath.Join(s.Dir, filepath.FromSlash(Prefix+p)), rows); err != nil {
			errs = append(errs, err)
			for _, i := range byPartition[p] {
				failed[i] = true
			}
		}
	}
	if len(errs) == len(order) && len(errs) > 0 {
		return failed, errors.Join(errs...)
	}
	return failed, nil
}

// write puts rows in a new Parquet file in dir.
func (s *LocalSink) write(dir string, rows []Event) (err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("analytics: local sink: %w", err)
	}
	suffix := make([]byte, 6)
	if _, err := rand.Read(suffix); err != nil {
		return fmt.Errorf("analytics: local sink: %w", err)
	}
	name := fmt.Sprintf("%d-%s.parquet", time.Now().UnixNano(), hex.EncodeToString(suffix))
	final := filepath.Join(dir, name)
	// The dot and suffix keep readers globbing *.parquet off the file
	// until it is complete.
	tmp := filepath.Join(dir, "."+name+".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("analytics: local sink: %w", err)
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	w := parquet.NewGenericWriter[Event](f, parquet.Compression(&parquet.Snappy))
	if _, err = w.Write(rows); err != nil {
		return fmt.Errorf("analytics: local sink: write %s: %w", final, err)
	}
	if err = w.Close(); err != nil {
		return fmt.Errorf("analytics: local sink: write %s: %w", final, err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("analytics: local sink: write %s: %w", final, err)
	}
	if err = os.Rename(tmp, final); err != nil {
		return fmt.Errorf("analytics: local sink: %w", err)
	}
	return nil
}

// failAfterPartitions marks the events of partition from and every later
// one failed.
func failAfterPartitions(failed []bool, byPartition map[string][]int, order []string, from string) []bool {
	marking := false
	for _, p := range order {
		if p == from {
			marking = true
		}
		if marking {
			for _, i := range byPartition[p] {
				failed[i] = true
			}
		}
	}
	return failed
}
