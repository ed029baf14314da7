package analytics_test

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/rallyhq/rally/shared/analytics"
	"github.com/rallyhq/rally/shared/obs"
	"github.com/rallyhq/rally/shared/privacy"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
	"github.com/rallyhq/rally/shared/secrets"
)

// BenchmarkMap measures the shipper's CPU path per event: decoding a
// stream record into an event and encoding its Firehose record.
//
//	go test ./shared/analytics -run '^$' -bench Map -benchmem
func BenchmarkMap(b *testing.B) {
	names := schema.NamesFromEnv("Rally-dev-")
	all, _ := batch(b, names, 4000, 500)
	var recs = all[:0]
	for _, r := range all { // only records that are events
		source, _ := analytics.SourceOf(r.EventSourceArn, names)
		if _, _, ok, _ := decoders.Map(source, r); ok {
			recs = append(recs, r)
		}
	}
	bytes := 0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r := recs[i%len(recs)]
		source, ok := analytics.SourceOf(r.EventSourceArn, names)
		if !ok {
			b.Fatal("source not resolved")
		}
		ev, _, _, err := decoders.Map(source, r)
		if err != nil {
			b.Fatal(err)
		}
		ev.UserPID = "0123456789abcdef0123456789abcdef"
		data, err := analytics.FirehoseRecord(ev)
		if err != nil {
			b.Fatal(err)
		}
		bytes += len(data)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(bytes)/float64(b.N), "json-bytes/event")
}

// firehoseBillingUnit is what Firehose bills a record at least, and the
// increment it rounds a record's size up to.
const firehoseBillingUnit = 5 << 10

// TestParquetBytesPerEvent logs what 10,000 realistic events cost as
// Firehose ingests them (packed into records, each billed in 5 KB
// increments) and in Snappy Parquet, written as the local sink (and, with
// larger files, Firehose) writes them.
//
//	go test ./shared/analytics -run ParquetBytesPerEvent -v
func TestParquetBytesPerEvent(t *testing.T) {
	t.Parallel()
	const n = 10_000
	start := time.Date(year, 3, 10, 0, 0, 0, 0, time.UTC)
	jsonBytes := 0
	for _, e := range sample(n, 1, start) {
		data, err := analytics.FirehoseRecord(e)
		if err != nil {
			t.Fatal(err)
		}
		jsonBytes += len(data)
	}
	t.Logf("Firehose JSON: %.1f bytes/event", float64(jsonBytes)/n)

	hose := newFakeFirehose()
	failed, err := (&analytics.FirehoseSink{Client: hose, Stream: "rally-events"}).Send(context.Background(), sample(n, 1, start))
	if err != nil || slices.Contains(failed, true) {
		t.Fatalf("failed=%v err=%v", failed, err)
	}
	records, recordBytes, billed := 0, 0, 0
	for _, c := range hose.sent {
		for _, r := range c.records {
			records++
			recordBytes += r.bytes
			billed += (r.bytes + firehoseBillingUnit - 1) / firehoseBillingUnit * firehoseBillingUnit
		}
	}
	// One event a record, as before packing, bills every event a whole unit.
	t.Logf("Firehose records: %.1f per 1,000 events (%d records, %d PutRecordBatch calls), %.0f bytes/record; "+
		"billed %.1f bytes/event, against %d with one event a record (%.1f×)",
		float64(records)*1000/n, records, len(hose.sent), float64(recordBytes)/float64(records),
		float64(billed)/n, firehoseBillingUnit, float64(firehoseBillingUnit)*n/float64(billed))
	if records > (n+analytics.MaxRecordEvents-1)/analytics.MaxRecordEvents {
		t.Errorf("%d records for %d events; packing should fill records of %d", records, n, analytics.MaxRecordEvents)
	}
	for _, tc := range []struct {
		what  string
		hours int
	}{{"one hour (6 files, one per event type)", 1}, {"one day (24 hourly partitions per type)", 24}} {
		dir := t.TempDir()
		evs := sample(n, tc.hours, start)
		failed, err := (&analytics.LocalSink{Dir: dir}).Send(context.Background(), evs)
		if err != nil || slices.Contains(failed, true) {
			t.Fatalf("failed=%v err=%v", failed, err)
		}
		size, files := tree(t, dir)
		t.Logf("Parquet, %d events over %s: %d bytes in %d files, %.1f bytes/event", n, tc.what, size, files, float64(size)/n)
		if per := float64(size) / n; per > float64(jsonBytes)/n {
			t.Errorf("Parquet (%.1f bytes/event) is larger than JSON", per)
		}
	}
}

func tree(t *testing.T, dir string) (size int64, files int) {
	t.Helper()
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		size += info.Size()
		files++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return size, files
}

// BenchmarkShipNewPlayers ships one event each of 10,000 players seen for
// the first time, against DynamoDB Local, in batches the size of the
// shipper's event source mapping, with the erasure guard in play: the
// backlog a seeded or launched game leaves, where every player needs a new
// secret. Each iteration brings 10,000 players never seen before.
//
//	go test ./shared/analytics -run '^$' -bench ShipNewPlayers -benchtime 1x
func BenchmarkShipNewPlayers(b *testing.B) {
	const players = 10_000
	r := newRig(b)
	pids := r.pseudonyms()
	pids.Guard = &privacy.Records{DB: r.db, Table: r.names.Of(schema.Erasures),
		Hasher: privacy.NewHasher(secrets.Fixed([]byte("bench-erasure-key"), nil))}
	hose := newFakeFirehose()
	shipper := &analytics.Shipper{
		Decoders: decoders, Tables: r.names, PIDs: pids, Shipped: r.shipped(),
		Sink:    &analytics.FirehoseSink{Client: hose, Stream: "rally-events"},
		Metrics: obs.NewMetrics(io.Discard, "analytics-shipper"),
	}
	size := int(routes.AnalyticsShipper.BatchSize)
	at := time.Date(year, 3, 10, 9, 0, 0, 0, time.UTC)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		recs := make([]events.DynamoDBEventRecord, players)
		for p := range recs {
			user, when, seq := fmt.Sprintf("new-%d-%05d", i, p), at.Add(time.Duration(p)*time.Second), i*players+p
			switch p % 3 {
			case 0:
				recs[p] = record(r.names, schema.Activity, seq, "INSERT", activityItem(user, when, fmt.Sprint("e", seq), "MATCH_PLAYED", 5, 1, "eu"), nil)
			case 1:
				recs[p] = record(r.names, schema.Reactions, seq, "INSERT", edgeItem(user, "favorite", fmt.Sprint("g", p%13), "ACTIVE", 1, when), nil)
			case 2:
				recs[p] = record(r.names, schema.ScoreEvents, seq, "INSERT", scoreEventItem("arena", user, fmt.Sprint("m", seq), int64(p), when), nil)
			}
		}
		b.StartTimer()
		for start := 0; start < len(recs); start += size {
			if err := shipper.Process(ctx, recs[start:min(start+size, len(recs))]); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/10k-players")
	b.ReportMetric(float64(hose.calls)/float64(b.N), "firehose-calls/10k-players")
}
