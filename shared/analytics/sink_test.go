package analytics_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/firehose"
	fhtypes "github.com/aws/aws-sdk-go-v2/service/firehose/types"
	"github.com/aws/smithy-go"
	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"

	"github.com/rallyhq/rally/shared/analytics"
)

// sample returns n realistic events of every type, spread over hours
// hours from start.
func sample(n, hours int, start time.Time) []analytics.Event {
	out := make([]analytics.Event, n)
	for i := range out {
		at := start.Add(time.Duration(i%hours)*time.Hour + time.Duration(i*7919%3_600_000)*time.Millisecond)
		e := analytics.Event{
			EventID: hexOf("event", i), SchemaVersion: analytics.SchemaVersion, OccurredAt: at,
			UserPID: hexOf("user", i%2000),
		}
		switch i % 10 {
		case 0, 1:
			e.EventType, e.GameID = analytics.FavoriteAdded, ptr(fmt.Sprint("game-", i%300))
		case 2:
			e.EventType, e.GameID = analytics.FavoriteRemoved, ptr(fmt.Sprint("game-", i%300))
		case 3:
			e.EventType, e.PostID = analytics.LikeAdded, ptr(fmt.Sprint("post-", i%5000))
		case 4:
			e.EventType, e.PostID = analytics.LikeRemoved, ptr(fmt.Sprint("post-", i%5000))
		case 5, 6:
			e.EventType = analytics.ScoreSubmitted
			e.BoardID, e.Period, e.Score = ptr(fmt.Sprint("board-", i%20)), ptr(at.Format("2006-01-02")), ptr(int64(i*37%100000))
		default:
			e.EventType = analytics.ActivityRecorded
			types := []string{"DAILY_OPEN", "MATCH_PLAYED", "MATCH_WON", "LEVEL_COMPLETED", "SOCIAL_SHARE"}
			sources := []string{"mobile_app", "web", "console"}
			e.ActivityType, e.Points, e.Streak = ptr(types[i%5]), ptr(int64(i%3*10)), ptr(int64(i%30+1))
			e.Source, e.ActivityDate = ptr(sources[i%3]), ptr(at.Format("2006-01-02"))
			if i%4 != 0 {
				e.Region = ptr([]string{"eu", "na", "apac"}[i%3])
			}
		}
		out[i] = e
	}
	return out
}

// hexOf is 32 hex characters as random-looking as real ids and PIDs.
func hexOf(kind string, i int) string {
	sum := sha256.Sum256([]byte(fmt.Sprint(kind, i)))
	return hex.EncodeToString(sum[:16])
}

// A Firehose record is the event's JSON with every column, occurred_at in
// epoch milliseconds, and the partition keys the delivery stream's
// dynamic partitioning reads.
func TestFirehoseRecordShape(t *testing.T) {
	t.Parallel()
	at := time.Date(year, 3, 10, 7, 5, 6, 789_000_000, time.UTC)
	e := sample(8, 1, at)[7]
	data, err := analytics.FirehoseRecord(e)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(string(data), "}\n") {
		t.Fatalf("record %q is not one JSON line", data)
	}
	var rec map[string]any
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.UseNumber()
	if err := dec.Decode(&rec); err != nil {
		t.Fatal(err)
	}
	for _, c := range append(slices.Clone(analytics.Columns()), analytics.PartitionKeys()...) {
		if _, ok := rec[c.Name]; !ok {
			t.Fatalf("record lacks %s: %s", c.Name, data)
		}
	}
	if got := rec["occurred_at"].(json.Number).String(); got != fmt.Sprint(e.OccurredAt.UnixMilli()) {
		t.Fatalf("occurred_at %s, want epoch ms %d", got, e.OccurredAt.UnixMilli())
	}
	path := fmt.Sprintf("event_type=%s/dt=%s/hour=%s/", rec["event_type"], rec["dt"], rec["hour"])
	equal(t, "partition from the record", path, analytics.PartitionPath(e))
	if rec["game_id"] != nil || rec["activity_type"] != "MATCH_WON" {
		t.Fatalf("optional fields: %s", data)
	}
}

// What the sink packs into records reads back as the events sent, in
// order: the local stack delivers Firehose records to its LocalSink so.
func TestFirehoseRecordsReadBackAsTheEventsPacked(t *testing.T) {
	t.Parallel()
	events := sample(1200, 3, time.Date(year, 3, 10, 0, 0, 0, 0, time.UTC))
	hose := &rawFirehose{}
	if _, err := (&analytics.FirehoseSink{Client: hose, Stream: "rally-events"}).Send(context.Background(), events); err != nil {
		t.Fatal(err)
	}
	var got []analytics.Event
	for _, data := range hose.records {
		evs, err := analytics.EventsOfRecord(data)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, evs...)
	}
	if len(hose.records) < 2 {
		t.Fatalf("%d events packed into %d records; the test needs several", len(events), len(hose.records))
	}
	equal(t, "events read back", got, events)
	if _, err := analytics.EventsOfRecord([]byte(`{"event_id":"e1","bogus":1}`)); err == nil {
		t.Error("a record with a field no event has was read")
	}
}

// rawFirehose keeps each record's data as it was put.
type rawFirehose struct{ records [][]byte }

func (f *rawFirehose) PutRecordBatch(_ context.Context, in *firehose.PutRecordBatchInput, _ ...func(*firehose.Options)) (*firehose.PutRecordBatchOutput, error) {
	out := &firehose.PutRecordBatchOutput{}
	for _, r := range in.Records {
		f.records = append(f.records, r.Data)
		out.RequestResponses = append(out.RequestResponses, fhtypes.PutRecordBatchResponseEntry{RecordId: aws.String("r")})
	}
	return out, nil
}

// withinLimits fails unless every call and record the sink made keeps to
// Firehose's limits, and returns how many records and calls there were.
func (f *fakeFirehose) withinLimits(t *testing.T) (records, calls int) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.sent {
		if len(c.records) > analytics.MaxBatchRecords || c.bytes > analytics.MaxBatchBytes {
			t.Fatalf("a call of %d records, %d bytes", len(c.records), c.bytes)
		}
		for _, r := range c.records {
			if len(r.events) > analytics.MaxRecordEvents || r.bytes > analytics.MaxRecordBytes {
				t.Fatalf("a record of %d events, %d bytes", len(r.events), r.bytes)
			}
		}
		records += len(c.records)
	}
	return records, len(f.sent)
}

// Consecutive events share records of newline-separated JSON objects, as
// many as Firehose's deaggregation and its record and call limits allow;
// each arrives once, in order. An event too large for any record fails
// alone and the rest are sent.
func TestFirehoseSinkPacksEventsIntoRecords(t *testing.T) {
	t.Parallel()
	start := time.Date(year, 3, 10, 0, 0, 0, 0, time.UTC)
	big := strings.Repeat("x", 150<<10)
	huge := strings.Repeat("y", 1001<<10)
	for _, tc := range []struct {
		name           string
		events         []analytics.Event
		fails          int // the index of the one event that cannot be sent, or -1
		records, calls int
	}{
		{"one event", sample(1, 1, start), -1, 1, 1},
		{"900 events", sample(900, 3, start), -1, 2, 1},
		{"1,000 events: two full records", sample(1000, 3, start), -1, 2, 1},
		// ~190 KB records: 21 fit in a call of 4 MiB.
		{"12,000 events", sample(12_000, 24, start), -1, 24, 2},
		{"large and oversized events", func() []analytics.Event {
			evs := sample(1234, 3, start)
			for i := 100; i < 160; i++ { // 60 × 150 KiB = 9 MiB: 6 to a record
				evs[i].Source = &big
			}
			evs[700].Region = &huge
			return evs
		}(), 700, 12, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			hose := newFakeFirehose()
			failed, err := (&analytics.FirehoseSink{Client: hose, Stream: "rally-events"}).Send(context.Background(), tc.events)
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for i, f := range failed {
				if f != (i == tc.fails) {
					t.Fatalf("event %d failed=%v", i, f)
				}
				if !f {
					want = append(want, tc.events[i].EventID)
				}
			}
			hose.deliveredOnce(t, want)
			var got []string
			for _, rec := range hose.records {
				got = append(got, rec["event_id"].(string))
			}
			equal(t, "events in the order sent", got, want)
			records, calls := hose.withinLimits(t)
			if records != tc.records || calls != tc.calls {
				t.Fatalf("%d events in %d records and %d calls, want %d and %d", len(want), records, calls, tc.records, tc.calls)
			}
		})
	}
}

// Send fails exactly the events Firehose did not accept: every event of a
// refused record, of a failed call, and, after a permanent error, of every
// call not made. Sending the failed ones again delivers each event once.
func TestFirehoseSinkFailsExactlyTheEventsNotAccepted(t *testing.T) {
	t.Parallel()
	start := time.Date(year, 3, 10, 0, 0, 0, 0, time.UTC)
	// Events of ~4.5 KB: 228 to a record, 4 records to a call; 3,000 make
	// calls of 912, 912, 912 and 264 events.
	padded := func(n int) []analytics.Event {
		evs := sample(n, 24, start)
		pad := strings.Repeat("p", 4<<10)
		for i := range evs {
			evs[i].Source = &pad
		}
		return evs
	}
	throttled := &smithy.GenericAPIError{Code: "ThrottlingException", Message: "slow down"}
	gone := &smithy.GenericAPIError{Code: "AccessDeniedException", Message: "no"}
	for _, tc := range []struct {
		name    string
		events  []analytics.Event
		refuse  func(evs []analytics.Event) func(rec map[string]any, offered int) string
		callErr func(call int) error
		// failed and calls are how many events the first Send must fail and
		// how many calls it must make.
		failed, calls int
		permanent     bool
	}{{
		name: "a refused record", events: sample(900, 24, start),
		refuse: func(evs []analytics.Event) func(map[string]any, int) string {
			return func(rec map[string]any, offered int) string {
				if rec["event_id"] == evs[600].EventID && offered == 0 {
					return "ServiceUnavailableException"
				}
				return ""
			}
		},
		failed: 400, calls: 1, // the second record: events 500-899
	}, {
		name: "a throttled call", events: padded(3000),
		callErr: func(call int) error {
			if call == 1 {
				return throttled
			}
			return nil
		},
		failed: 912, calls: 4,
	}, {
		name: "a permanent error", events: padded(3000),
		callErr: func(call int) error {
			if call == 1 {
				return gone
			}
			return nil
		},
		failed: 3000 - 912, calls: 2, permanent: true, // all but the first call's
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			evs := tc.events
			hose := newFakeFirehose()
			if tc.refuse != nil {
				hose.refuse = tc.refuse(evs)
			}
			hose.callErr = tc.callErr
			sink := &analytics.FirehoseSink{Client: hose, Stream: "rally-events"}
			failed, err := sink.Send(context.Background(), evs)
			if tc.permanent != (err != nil) || err != nil && !errors.Is(err, gone) {
				t.Fatalf("err = %v, want a permanent error: %v", err, tc.permanent)
			}
			if hose.calls != tc.calls {
				t.Fatalf("%d calls, want %d", hose.calls, tc.calls)
			}
			var retry []analytics.Event
			for i, f := range failed {
				if f == (hose.delivered[evs[i].EventID] == 1) {
					t.Fatalf("event %d failed=%v, delivered %d times", i, f, hose.delivered[evs[i].EventID])
				}
				if f {
					retry = append(retry, evs[i])
				}
			}
			if len(retry) != tc.failed {
				t.Fatalf("%d events failed, want %d", len(retry), tc.failed)
			}
			hose.callErr = nil
			if failed, err := sink.Send(context.Background(), retry); err != nil || slices.Contains(failed, true) {
				t.Fatalf("resend: failed=%v err=%v", failed, err)
			}
			ids := make([]string, len(evs))
			for i, e := range evs {
				ids[i] = e.EventID
			}
			hose.deliveredOnce(t, ids)
			hose.withinLimits(t)
		})
	}
}

// LocalSink writes Snappy Parquet in the S3 layout; the files read back
// equal what was sent, with the Glue table's columns.
func TestLocalSinkWritesThePartitionedLayout(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sink := &analytics.LocalSink{Dir: dir}
	sent := sample(500, 3, time.Date(year, 3, 10, 22, 0, 0, 0, time.UTC)) // crosses midnight
	for i := range sent {
		sent[i].OccurredAt = sent[i].OccurredAt.Truncate(time.Millisecond)
	}
	failed, err := sink.Send(context.Background(), sent)
	if err != nil || slices.Contains(failed, true) {
		t.Fatalf("failed=%v err=%v", failed, err)
	}
	got := readLocal(t, dir)
	if len(got) != 6*3 {
		t.Fatalf("%d files, want one per event type and hour (18)", len(got))
	}
	var all []analytics.Event
	for path, rows := range got {
		for _, e := range rows {
			if analytics.PartitionPath(e) != path {
				t.Fatalf("event %s of %s in %s", e.EventID, analytics.PartitionPath(e), path)
			}
			all = append(all, e)
		}
	}
	byID := func(a, b analytics.Event) int { return strings.Compare(a.EventID, b.EventID) }
	slices.SortFunc(all, byID)
	want := slices.Clone(sent)
	slices.SortFunc(want, byID)
	equal(t, "events read back", all, want)
}

// The Parquet schema is the Glue table's: the columns of Columns, in
// order, optional where an event type may lack the field, occurred_at an
// INT64 TIMESTAMP(MILLIS) adjusted to UTC.
func TestLocalSinkSchemaIsTheGlueTable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, err := (&analytics.LocalSink{Dir: dir}).Send(context.Background(), sample(10, 1, time.Now())); err != nil {
		t.Fatal(err)
	}
	file := firstParquet(t, dir)
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	fields := pf.Schema().Fields()
	if len(fields) != len(analytics.Columns()) {
		t.Fatalf("%d columns, want %d", len(fields), len(analytics.Columns()))
	}
	required := map[string]bool{"event_id": true, "schema_version": true, "occurred_at": true, "user_pid": true}
	for i, c := range analytics.Columns() {
		fd := fields[i]
		if fd.Name() != c.Name {
			t.Fatalf("column %d is %s, want %s", i, fd.Name(), c.Name)
		}
		if fd.Optional() == required[c.Name] {
			t.Fatalf("column %s optional=%v", c.Name, fd.Optional())
		}
		typ := fd.Type()
		lt := typ.LogicalType()
		switch c.Type {
		case "string":
			if _, ok := logical(lt).(*format.StringType); typ.Kind() != parquet.ByteArray || !ok {
				t.Fatalf("column %s is %v, want a UTF-8 byte array", c.Name, typ)
			}
		case "int":
			if typ.Kind() != parquet.Int32 {
				t.Fatalf("column %s is %v, want INT32", c.Name, typ)
			}
		case "bigint":
			if typ.Kind() != parquet.Int64 {
				t.Fatalf("column %s is %v, want INT64", c.Name, typ)
			}
		case "timestamp":
			ts, ok := logical(lt).(*format.TimestampType)
			if typ.Kind() != parquet.Int64 || !ok || !ts.IsAdjustedToUTC || ts.Unit.Value.Duration() != time.Millisecond {
				t.Fatalf("column %s is %v, want INT64 TIMESTAMP(MILLIS, UTC)", c.Name, typ)
			}
		default:
			t.Fatalf("column %s has Glue type %s the test does not know", c.Name, c.Type)
		}
	}
	for _, rg := range pf.Metadata().RowGroups {
		for _, col := range rg.Columns {
			if col.MetaData.Codec.String() != "SNAPPY" {
				t.Fatalf("column %v compressed with %v", col.MetaData.PathInSchema, col.MetaData.Codec)
			}
		}
	}
}

// Concurrent sends to the same partitions each get their own files and
// leave no temporary files behind.
func TestLocalSinkIsSafeForConcurrentSends(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sink := &analytics.LocalSink{Dir: dir}
	evs := sample(600, 1, time.Date(year, 3, 10, 5, 0, 0, 0, time.UTC))
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			part := evs[w*75 : (w+1)*75]
			if failed, err := sink.Send(context.Background(), part); err != nil || slices.Contains(failed, true) {
				t.Errorf("send %d: failed=%v err=%v", w, failed, err)
			}
		})
	}
	wg.Wait()
	rows, files := 0, 0
	for _, rs := range readLocalFiles(t, dir) {
		files++
		rows += len(rs)
	}
	if rows != 600 || files != 8*6 {
		t.Fatalf("%d rows in %d files, want 600 in 48", rows, files)
	}
}

// readLocal reads every Parquet file under dir/events/, by partition path,
// restoring the event type from the path as Athena does.
func readLocal(t *testing.T, dir string) map[string][]analytics.Event {
	t.Helper()
	out := map[string][]analytics.Event{}
	for file, rows := range readLocalFiles(t, dir) {
		rel, _ := filepath.Rel(filepath.Join(dir, analytics.Prefix), filepath.Dir(file))
		path := filepath.ToSlash(rel) + "/"
		out[path] = append(out[path], rows...)
	}
	return out
}

func readLocalFiles(t *testing.T, dir string) map[string][]analytics.Event {
	t.Helper()
	out := map[string][]analytics.Event{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if !strings.HasSuffix(path, ".parquet") || strings.HasPrefix(d.Name(), ".") {
			t.Errorf("unexpected file %s", path)
			return nil
		}
		rows, err := parquet.ReadFile[analytics.Event](path)
		if err != nil {
			return err
		}
		typ := strings.TrimPrefix(filepath.Base(filepath.Dir(filepath.Dir(filepath.Dir(path)))), "event_type=")
		for i := range rows {
			rows[i].EventType = typ
		}
		out[path] = rows
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func logical(lt *format.LogicalType) format.LogicalTypeValue {
	if lt == nil {
		return nil
	}
	return lt.Value
}

func firstParquet(t *testing.T, dir string) string {
	t.Helper()
	for file := range readLocalFiles(t, dir) {
		return file
	}
	t.Fatal("no parquet file")
	return ""
}
