package imports_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/redis/go-redis/v9"

	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/imports"
	"github.com/rallyhq/rally/shared/jobs"
	"github.com/rallyhq/rally/shared/leaderboards"
	"github.com/rallyhq/rally/shared/leaderboards/dynamo"
	"github.com/rallyhq/rally/shared/leaderboards/mirror"
	"github.com/rallyhq/rally/shared/schema"
)

// BenchmarkImportScores imports RALLY_BENCH_IMPORT_PLAYERS players'
// scores (default 100,000: one line each on a best board) from a local
// file against DynamoDB Local, the catch-up (the board's member count and
// its Redis board made whole) included, and reports the seconds it took,
// the lines per second and the catch-up's own seconds. Run with
// `go test -run '^$' -bench ImportScores -benchtime 1x ./shared/imports/`.
func BenchmarkImportScores(b *testing.B) {
	n := 100_000
	if v := os.Getenv("RALLY_BENCH_IMPORT_PLAYERS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	db, names, _ := testenv.DynamoDB(b)
	opt, err := redis.ParseURL(testenv.Redis(b).URL())
	if err != nil {
		b.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	defs := &dynamo.Definitions{DB: db, Table: names.Of(schema.Leaderboards), Clock: clock.System{}}
	scores := &dynamo.Scores{DB: db, Table: names.Of(schema.Scores), Events: names.Of(schema.ScoreEvents), Counters: names.Of(schema.Counters)}
	if _, _, err := defs.Put(ctx, leaderboards.Definition{ID: "big", Title: "Big", Policy: leaderboards.Best, Order: leaderboards.Desc,
		Reset: leaderboards.Never, TieBreak: leaderboards.Earliest, MaxN: 100, Timezone: "UTC", Status: leaderboards.Active}); err != nil {
		b.Fatal(err)
	}
	if os.Getenv("RALLY_BENCH_IMPORT_NO_STREAMS") != "" {
		for _, table := range []string{scores.Table, scores.Events} {
			if _, err := db.UpdateTable(ctx, &dynamodb.UpdateTableInput{TableName: aws.String(table),
				StreamSpecification: &types.StreamSpecification{StreamEnabled: aws.Bool(false)}}); err != nil {
				b.Fatal(err)
			}
		}
	}
	var file strings.Builder
	for i := range n {
		fmt.Fprintf(&file, `{"type":"score","leaderboard_id":"big","player_id":"player-%06d","score":%d,"reached_at":"2026-11-20T10:%02d:%02dZ"}`+"\n",
			i, (i*7919)%1_000_003, (i/60)%60, i%60)
	}
	path := filepath.Join(b.TempDir(), "scores.jsonl")
	if err := os.WriteFile(path, []byte(file.String()), 0o600); err != nil {
		b.Fatal(err)
	}
	cache := mirror.New(rdb, nil)
	importer := &timedCatchUp{Importer: &leaderboards.Importer{Defs: defs, Scores: scores, Boards: cache, Clock: clock.System{},
		Jobs: &leaderboards.Jobs{Defs: defs, Scores: scores, Cache: cache, Clock: clock.System{}}}}
	task := &imports.Task{
		Sources:   imports.Opener{Files: true},
		Importers: []imports.Importer{importer},
		Clock:     clock.System{},
	}
	b.ResetTimer()
	start := time.Now()
	var findings jobs.Findings
	w := jobs.NewWork(func(context.Context, string) error { return nil })
	w.Findings = &findings
	if _, done, err := task.Run(ctx, jobs.Spec{Kind: jobs.Import, Source: "file://" + path}, "", w); err != nil || !done {
		b.Fatalf("import: done %v, %v", done, err)
	}
	took := time.Since(start)
	b.StopTimer()
	if findings.Rejected != 0 {
		b.Fatalf("%d lines rejected: %q", findings.Rejected, findings.Examples)
	}
	members, err := scores.Members(ctx, "big", leaderboards.AllTime)
	if err != nil || members != int64(n) {
		b.Fatalf("%d members after the import (%v), want %d", members, err, n)
	}
	b.ReportMetric(took.Seconds(), "s")
	b.ReportMetric(float64(n)/took.Seconds(), "lines/s")
	b.ReportMetric(importer.took.Seconds(), "catchup-s")
}

// timedCatchUp is an importer whose catch-up is timed.
type timedCatchUp struct {
	imports.Importer
	took time.Duration
}

func (t *timedCatchUp) CatchUp(ctx context.Context, touched []string, w *jobs.Work) error {
	start := time.Now()
	defer func() { t.took += time.Since(start) }()
	return t.Importer.CatchUp(ctx, touched, w)
}
