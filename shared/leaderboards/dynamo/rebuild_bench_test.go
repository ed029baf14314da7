package dynamo_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/redis/go-redis/v9"

	"github.com/rallyhq/rally/infra/local/dynamodblocal"
	"github.com/rallyhq/rally/infra/local/tables"
	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/jobs"
	"github.com/rallyhq/rally/shared/leaderboards"
	"github.com/rallyhq/rally/shared/leaderboards/dynamo"
	"github.com/rallyhq/rally/shared/leaderboards/mirror"
	"github.com/rallyhq/rally/shared/schema"
)

// BenchmarkRebuildJob rebuilds one board of RALLY_BENCH_REBUILD_MEMBERS
// players (default 1,000,000) in Redis through the job runner, one
// simulated invocation of RALLY_BENCH_INVOCATION (default 60s, a
// processor's timeout) after another, each checkpointing, and compares
// it with the floor: a bare, strongly consistent scan of the board's
// Scores partition (every page read, nothing decoded). Run with
// `go test -run '^$' -bench RebuildJob -benchtime 1x ./shared/leaderboards/dynamo/`.
// DynamoDB Local keeps its in-memory tables on the Java heap: a million
// scores need about 4 GB live, more than the default heap (a quarter of
// the machine's memory) leaves room for, and the JVM then spends its time
// collecting. Give it more with JAVA_TOOL_OPTIONS=-Xmx12g, or start one
// with the full JIT (the test setup's runs C1 only, for start-up) and
// point RALLY_DYNAMODB_ENDPOINT at it:
//
//	java -Xmx12g -XX:+UseParallelGC -Djava.library.path=DynamoDBLocal_lib -jar DynamoDBLocal.jar -port 8411 -sharedDb -inMemory
//
// Two things keep DynamoDB Local's limits out of the figure. It serves
// every call of every table on one SQLite thread, so the job's checkpoint
// in Jobs would wait behind the Scores page being read ahead (seconds, on
// a million-item table) where DynamoDB serves both at once: the job's
// table lives in a DynamoDB Local of its own. And it keeps stream records
// in the same database, so once a million are there every write to a
// table with a stream takes most of a second; DynamoDB's streams cost a
// write nothing: the seed writes with the Scores stream off.
func BenchmarkRebuildJob(b *testing.B) {
	n := envInt(b, "RALLY_BENCH_REBUILD_MEMBERS", 1_000_000)
	invocation := 60 * time.Second
	if v := os.Getenv("RALLY_BENCH_INVOCATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatal(err)
		}
		invocation = d
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
	scores := &dynamo.Scores{DB: db, Table: names.Of(schema.Scores), Events: names.Of(schema.ScoreEvents)}
	d, _, err := defs.Put(ctx, leaderboards.Definition{ID: "big", Title: "Big", Policy: leaderboards.Best, Order: leaderboards.Desc,
		Reset: leaderboards.Never, TieBreak: leaderboards.Earliest, MaxN: 100, Timezone: "UTC", Status: leaderboards.Active})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := db.UpdateTable(ctx, &dynamodb.UpdateTableInput{TableName: aws.String(scores.Table),
		StreamSpecification: &types.StreamSpecification{StreamEnabled: aws.Bool(false)}}); err != nil {
		b.Fatal(err)
	}
	seedStart := time.Now()
	seedBoard(b, db, scores, d, n)
	// Progress goes to stderr as it happens: a million-member run takes
	// hours on DynamoDB Local, and b.Logf prints only at the end.
	fmt.Fprintf(os.Stderr, "rebuild bench: seeded %d scores in %v\n", n, time.Since(seedStart).Round(time.Second))

	// The floor: every page of the partition, strongly consistent.
	scanStart := time.Now()
	in := ddb.QueryInput(scores.Table, ddb.MustBuild(expression.NewBuilder().WithKeyCondition(
		expression.Key(schema.AttrPK).Equal(expression.Value(dynamo.PeriodKey(d.ID, leaderboards.AllTime))))))
	in.ConsistentRead = aws.Bool(true)
	scanned := 0
	for p := dynamodb.NewQueryPaginator(db, in); p.HasMorePages(); {
		out, err := p.NextPage(ctx)
		if err != nil {
			b.Fatal(err)
		}
		scanned += int(out.Count)
	}
	scan := time.Since(scanStart)
	fmt.Fprintf(os.Stderr, "rebuild bench: bare scan of %d items in %v\n", scanned, scan.Round(time.Millisecond))

	jobsDB := jobsDynamoDB(b, names)
	store := &jobs.Store{DB: jobsDB, Table: names.Of(schema.Jobs)}
	lb := &leaderboards.Jobs{Defs: defs, Scores: scores, Cache: mirror.New(rdb, nil), Clock: clock.System{}}
	runner := &jobs.Runner{Store: store, Tasks: lb.Tasks(), Clock: clock.System{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Owner: "bench"}
	b.ResetTimer()
	jobStart := time.Now()
	job, err := jobs.Start(ctx, store, jobs.Spec{Kind: jobs.Rebuild, Target: jobs.Leaderboard, ID: d.ID}, jobStart)
	if err != nil {
		b.Fatal(err)
	}
	invocations := 0
	for job.State == jobs.Running {
		ictx, cancel := context.WithTimeout(ctx, invocation)
		err := runner.Work(ictx, job.ID)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		invocations++
		if job, err = store.Get(ctx, job.ID); err != nil {
			b.Fatal(err)
		}
		fmt.Fprintf(os.Stderr, "rebuild bench: job %d/%d after %d invocations, %v, %s %s\n", job.Progress.Done, job.Progress.Total, invocations, time.Since(jobStart).Round(time.Second), job.State, job.Error)
	}
	took := time.Since(jobStart)
	b.StopTimer()
	if job.State != jobs.Done || job.Progress.Done != int64(n) {
		b.Fatalf("job %s: %+v", job.State, job)
	}
	total, err := mirror.New(rdb, nil).Rank.Total(ctx, mirror.Board(d, leaderboards.AllTime))
	if err != nil || total != int64(n) {
		b.Fatalf("redis board holds %d of %d: %v", total, n, err)
	}
	per100k := took.Seconds() / (float64(n) / 100_000)
	b.ReportMetric(took.Seconds(), "job_s")
	b.ReportMetric(scan.Seconds(), "scan_s")
	b.ReportMetric(took.Seconds()/scan.Seconds(), "ratio")
	b.ReportMetric(per100k, "s/100k")
	b.ReportMetric(float64(invocations), "invocations")
	b.Logf("%d members: job %v over %d invocations of %v (%.2f s per 100k), bare scan of %d items %v: %.2fx",
		n, took.Round(time.Millisecond), invocations, invocation, per100k, scanned, scan.Round(time.Millisecond), took.Seconds()/scan.Seconds())
}

// jobsDynamoDB starts a DynamoDB Local of its own holding the tables.
func jobsDynamoDB(b *testing.B, names schema.Names) *dynamodb.Client {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := dynamodblocal.Start(ctx, dynamodblocal.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = srv.Close() })
	db := testenv.Client(srv.Endpoint())
	if err := tables.Create(ctx, db, names); err != nil {
		b.Fatal(err)
	}
	return db
}

func envInt(b *testing.B, name string, def int) int {
	if v := os.Getenv(name); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			b.Fatalf("%s: %v", name, err)
		}
		return n
	}
	return def
}

// seedBoard writes n scores to the board's all-time period, as the store
// writes them, with BatchWriteItem from a few writers at once.
func seedBoard(b *testing.B, db ddb.DB, scores *dynamo.Scores, d leaderboards.Definition, n int) {
	ctx := context.Background()
	const writers = 16
	var wg sync.WaitGroup
	errc := make(chan error, writers)
	at := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	for w := range writers {
		wg.Go(func() {
			var reqs []types.WriteRequest
			for i := w; i < n; i += writers {
				s := leaderboards.Score{Board: d.ID, Period: leaderboards.AllTime, PlayerID: fmt.Sprintf("p%07d", i),
					Score: int64((i * 7919) % 1_000_003), ReachedAt: at.Add(time.Duration(i) * time.Millisecond), Version: 1, UpdatedAt: at}
				item, err := attributevalue.MarshalMap(dynamo.ScoreItem(d.Order, s))
				if err != nil {
					errc <- err
					return
				}
				reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: item}})
				if len(reqs) == 25 {
					if err := ddb.BatchWrite(ctx, db, scores.Table, reqs); err != nil {
						errc <- err
						return
					}
					reqs = reqs[:0]
				}
			}
			if len(reqs) > 0 {
				if err := ddb.BatchWrite(ctx, db, scores.Table, reqs); err != nil {
					errc <- err
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		b.Fatal(err)
	}
	if err := scores.SetMembers(ctx, d.ID, leaderboards.AllTime, int64(n)); err != nil {
		b.Fatal(err)
	}
}
