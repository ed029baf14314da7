package all_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	deadlettersbind "github.com/rallyhq/rally/shared/deadletters/bind"
	exportsbind "github.com/rallyhq/rally/shared/exports/bind"
	"github.com/rallyhq/rally/shared/jobs"
	opsbind "github.com/rallyhq/rally/shared/ops/bind"

	"github.com/rallyhq/rally/shared/deadletters"
	reactionsbind "github.com/rallyhq/rally/shared/reactions/bind"
	"github.com/rallyhq/rally/shared/streamread"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/shared/api"
	"github.com/rallyhq/rally/shared/app"
	"github.com/rallyhq/rally/shared/app/all"
	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/config"
	"github.com/rallyhq/rally/shared/openapi"
	"github.com/rallyhq/rally/shared/privacy"
	"github.com/rallyhq/rally/shared/reactions"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
	"github.com/rallyhq/rally/shared/streams"
)

// served is every feature bound over one Deps, as the local stack binds them.
type served struct {
	deps  *app.Deps
	bound *app.Bound
}

func (s served) http(t *testing.T, r routes.Route) api.Handler {
	t.Helper()
	h, ok := s.bound.HTTP(r)
	if !ok {
		t.Fatalf("no feature binds %s", r.Key())
	}
	return h
}

func (s served) stream(t *testing.T, p routes.Processor) streams.Handler {
	t.Helper()
	h, ok := s.bound.Stream(p)
	if !ok {
		t.Fatalf("no feature binds %s", p.Function)
	}
	return h
}

func newDeps(t *testing.T) served {
	t.Helper()
	return newDepsAt(t, clock.System{})
}

func newDepsAt(t *testing.T, clk clock.Clock) served {
	t.Helper()
	_, names, endpoint := testenv.DynamoDB(t)
	srv := testenv.Redis(t)
	d, err := app.New(context.Background(), config.Config{
		Stage: "test", Region: "us-east-1", DynamoDBEndpoint: endpoint, Tables: names,
		RedisURL: srv.URL(), CursorKey: "test", LogKey: "test", AnalyticsDir: t.TempDir(),
		// The samples' erasure hashes are made under the local erasure key
		// (events/erasure-processor.json is alice's).
		ErasureKey: routes.ErasureKey.Local,
		// The roles the samples' service callers assumed (events/*.json),
		// each admitted where its routes admit it, as in a deployment.
		Principals: routes.Principals{
			routes.GameServer: {"arn:aws:iam::123456789012:role/rally-dev-game-server"},
			routes.Operator:   {"arn:aws:iam::123456789012:role/rally-dev-operator"},
		},
	}, app.Options{Clock: clk, LogOutput: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	b, err := d.Bind(all.Features()...)
	if err != nil {
		t.Fatal(err)
	}
	return served{deps: d, bound: b}
}

func readEvent(t *testing.T, function string, v any) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "events", function+".json"))
	if err != nil {
		t.Fatalf("every function needs a sample event in events/: %v", err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("events/%s.json: %v", function, err)
	}
}

// Every route's sample event (the one `sam local invoke -e` uses) is a
// valid request its handler answers with a documented 2xx response.
func TestEverySampleEventIsServedByItsHandler(t *testing.T) {
	d := newDeps(t)
	ctx := context.Background()
	served := map[string]bool{}
	for _, r := range routes.All() {
		// A function serving an endpoint for players and for services has
		// a sample for each: <function>.json and <function>.service.json.
		sample := r.Function
		if served[r.Function] {
			sample += "." + r.Auth.String()
		}
		served[r.Function] = true
		t.Run(sample, func(t *testing.T) {
			var ev events.APIGatewayV2HTTPRequest
			readEvent(t, sample, &ev)
			if ev.RouteKey != r.Key() {
				t.Fatalf("sample route key %q, want %q", ev.RouteKey, r.Key())
			}
			if r.Function == routes.GetJob.Function { // the job the sample reads
				job := jobs.Job{ID: ev.PathParameters["job_id"], Spec: jobs.Spec{Kind: jobs.Reconcile, Target: jobs.All}, State: jobs.Running, StartedAt: time.Now()}
				if _, err := opsbind.Jobs(d.deps).Create(ctx, job); err != nil {
					t.Fatal(err)
				}
			}
			if r.Function == routes.ExportStatus.Function { // an export of the sample's user, pending
				e, err := exportsbind.Records(d.deps).Request(ctx, ev.PathParameters["user_id"], time.Now())
				if err != nil {
					t.Fatal(err)
				}
				ev.PathParameters["export_id"] = e.ID
			}
			resp, err := d.http(t, r)(ctx, ev)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode/100 != 2 {
				t.Fatalf("status %d: %s", resp.StatusCode, resp.Body)
			}
			if err := openapi.ValidateResponse(r.Method, r.Path, resp.StatusCode, resp.Headers["Content-Type"], []byte(resp.Body)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// The counter processor's sample batch counts once, even when Lambda
// delivers it again whole, or half of it again.
func TestCounterProcessorSampleBatchCountsOnce(t *testing.T) {
	d := newDeps(t)
	ctx := context.Background()
	var ev events.DynamoDBEvent
	readEvent(t, routes.CounterProcessor.Function, &ev)
	handler := d.stream(t, routes.CounterProcessor)
	counts := reactionsbind.Counts(d.deps)
	half := len(ev.Records) / 2
	deliveries := []events.DynamoDBEvent{
		ev,
		ev,
		{Records: ev.Records[:half]},
		{Records: ev.Records[half:]},
		{Records: ev.Records[1:3]},
	}
	for i, batch := range deliveries {
		delivery := i + 1
		resp, err := handler(ctx, batch)
		if err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("delivery %d: %+v %v", delivery, resp, err)
		}
		fav, _ := counts.Count(ctx, reactions.Target{Kind: reactions.Favorite, ID: "space-race"})
		like, _ := counts.Count(ctx, reactions.Target{Kind: reactions.Like, ID: "post-42"})
		if fav.N != 1 || like.N != 1 {
			t.Fatalf("delivery %d: favorites %d likes %d, want 1 and 1", delivery, fav.N, like.N)
		}
	}
}

// The leaderboard processor's sample batch lands in Redis once, whatever is
// redelivered: the board reads the newest version of each score.
func TestLeaderboardProcessorSampleBatch(t *testing.T) {
	d := newDeps(t)
	ctx := context.Background()
	var define events.APIGatewayV2HTTPRequest
	readEvent(t, routes.PutLeaderboard.Function, &define)
	if resp, err := d.http(t, routes.PutLeaderboard)(ctx, define); err != nil || resp.StatusCode/100 != 2 {
		t.Fatalf("define the sample board: %d %v", resp.StatusCode, err)
	}
	var ev events.DynamoDBEvent
	readEvent(t, routes.LeaderboardProcessor.Function, &ev)
	handler := d.stream(t, routes.LeaderboardProcessor)
	top := func() string {
		var read events.APIGatewayV2HTTPRequest
		readEvent(t, routes.LeaderboardTop.Function, &read)
		read.QueryStringParameters["period"] = "2026-11"
		resp, err := d.http(t, routes.LeaderboardTop)(ctx, read)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("top: %d %s %v", resp.StatusCode, resp.Body, err)
		}
		var body struct {
			Entries []struct {
				PlayerID string `json:"player_id"`
				Score    int64  `json:"score"`
			} `json:"entries"`
		}
		if err := json.Unmarshal([]byte(resp.Body), &body); err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(body.Entries)
	}
	// A first tick builds the (empty) Redis boards from DynamoDB and marks
	// them trusted, as the schedule does after a deploy.
	if _, err := handler(ctx, events.DynamoDBEvent{}); err != nil {
		t.Fatal(err)
	}
	for i, batch := range []events.DynamoDBEvent{ev, {Records: ev.Records[2:]}, {Records: ev.Records[:1]}} {
		resp, err := handler(ctx, batch)
		if err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("delivery %d: %+v %v", i+1, resp, err)
		}
	}
	if got := top(); got != "[{alice 2} {bob 1}]" {
		t.Fatalf("board after redelivery and an older record: %s", got)
	}
}

// The streak processor's sample batch (alice's first two days, bob's first)
// ranks the newest version of each streak, whatever is redelivered.
func TestStreakProcessorSampleBatch(t *testing.T) {
	d := newDepsAt(t, clock.Fixed(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)))
	ctx := context.Background()
	var ev events.DynamoDBEvent
	readEvent(t, routes.StreakProcessor.Function, &ev)
	handler := d.stream(t, routes.StreakProcessor)
	// The first tick builds the (empty) boards and marks Redis trusted.
	if _, err := handler(ctx, events.DynamoDBEvent{}); err != nil {
		t.Fatal(err)
	}
	for i, batch := range []events.DynamoDBEvent{ev, {Records: ev.Records[1:]}, {Records: ev.Records[:1]}} {
		resp, err := handler(ctx, batch)
		if err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("delivery %d: %+v %v", i+1, resp, err)
		}
	}
	top := func(region string) string {
		var read events.APIGatewayV2HTTPRequest
		readEvent(t, routes.StreaksTop.Function, &read)
		read.QueryStringParameters = map[string]string{"n": "10"}
		if region != "" {
			read.QueryStringParameters["region"] = region
		}
		resp, err := d.http(t, routes.StreaksTop)(ctx, read)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("top: %d %s %v", resp.StatusCode, resp.Body, err)
		}
		var body struct {
			Entries []struct {
				UserID string `json:"user_id"`
				Streak int64  `json:"current_streak"`
			} `json:"entries"`
			Degraded bool `json:"degraded"`
		}
		if err := json.Unmarshal([]byte(resp.Body), &body); err != nil {
			t.Fatal(err)
		}
		if body.Degraded {
			t.Fatal("the board was served from DynamoDB, not from what the processor wrote")
		}
		return fmt.Sprint(body.Entries)
	}
	if got := top(""); got != "[{alice 2} {bob 1}]" {
		t.Fatalf("global board after redelivery and an older record: %s", got)
	}
	if got := top("eu"); got != "[{alice 2}]" {
		t.Fatalf("eu board: %s", got)
	}
}

// The analytics shipper's sample batch (a favorite, a score, an activity;
// one record from each stream it reads) lands in the export once, however
// often it is delivered.
func TestAnalyticsShipperSampleBatch(t *testing.T) {
	d := newDeps(t)
	ctx := context.Background()
	var ev events.DynamoDBEvent
	readEvent(t, routes.AnalyticsShipper.Function, &ev)
	for i, r := range ev.Records {
		// The sample names the tables of a "dev" stage; these are the test's.
		table := r.EventSourceArn[strings.Index(r.EventSourceArn, "table/Rally-dev-")+len("table/Rally-dev-") : strings.Index(r.EventSourceArn, "/stream/")]
		logical, ok := schema.ByName(table)
		if !ok {
			t.Fatalf("record %d reads unknown table %s", i, table)
		}
		ev.Records[i].EventSourceArn = strings.Replace(r.EventSourceArn, "Rally-dev-"+table, d.deps.Config.Tables.Of(logical), 1)
	}
	handler := d.stream(t, routes.AnalyticsShipper)
	for i, batch := range []events.DynamoDBEvent{ev, ev, {Records: ev.Records[1:]}} {
		resp, err := handler(ctx, batch)
		if err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("delivery %d: %+v %v", i+1, resp, err)
		}
	}
	var files []string
	err := filepath.WalkDir(d.deps.Config.AnalyticsDir, func(path string, e fs.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(path, ".parquet") {
			rel, _ := filepath.Rel(d.deps.Config.AnalyticsDir, path)
			files = append(files, filepath.Dir(rel))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	want := []string{
		"events/event_type=activity.recorded/dt=2026-11-22/hour=10",
		"events/event_type=favorite.added/dt=2026-11-22/hour=10",
		"events/event_type=score.submitted/dt=2026-11-22/hour=09",
	}
	if fmt.Sprint(files) != fmt.Sprint(want) {
		t.Fatalf("export files in %v, want one in each of %v", files, want)
	}
}

// The erasure processor's sample batch (a request, then the job's own
// lease and completion) carries out alice's erasure, once: redelivered, it
// changes nothing.
func TestErasureProcessorSampleBatch(t *testing.T) {
	d := newDeps(t)
	ctx := context.Background()
	var req events.APIGatewayV2HTTPRequest
	readEvent(t, routes.EraseUser.Function, &req)
	if resp, err := d.http(t, routes.EraseUser)(ctx, req); err != nil || resp.StatusCode != 202 {
		t.Fatalf("erase alice: %+v %v", resp, err)
	}
	var ev events.DynamoDBEvent
	readEvent(t, routes.ErasureProcessor.Function, &ev)
	handler := d.stream(t, routes.ErasureProcessor)
	records := all.ErasureJob(d.deps).Records
	for delivery := 1; delivery <= 2; delivery++ {
		resp, err := handler(ctx, ev)
		if err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("delivery %d: %+v %v", delivery, resp, err)
		}
		e, ok, err := records.Find(ctx, "alice")
		if err != nil || !ok || e.Status != privacy.Completed || e.UserID != "" {
			t.Fatalf("delivery %d: alice's erasure %+v %v %v", delivery, e, ok, err)
		}
	}
}

// The job runner's sample batch is the Jobs stream's record of a reconcile
// of everything being started. Its image is a job as the store keeps it;
// with the job stored, the runner carries it to the end, and redelivered,
// it runs a finished job no more.
func TestJobRunnerSampleBatch(t *testing.T) {
	d := newDeps(t)
	ctx := context.Background()
	var ev events.DynamoDBEvent
	readEvent(t, routes.JobRunner.Function, &ev)
	if len(ev.Records) != 1 || ev.Records[0].EventName != "INSERT" {
		t.Fatalf("the sample holds %d records, want the one INSERT of a job", len(ev.Records))
	}
	image := ev.Records[0].Change.NewImage
	if _, err := d.deps.DB.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(d.deps.Table(schema.Jobs)), Item: streams.Item(image),
	}); err != nil {
		t.Fatal(err)
	}
	store := opsbind.Jobs(d.deps)
	id := image[schema.AttrJobID].String()
	j, err := store.Get(ctx, id)
	if err != nil || j.Kind != jobs.Reconcile || j.Target != jobs.All || j.State != jobs.Running {
		t.Fatalf("the sample's job reads as %+v (%v), want a running reconcile of everything", j, err)
	}
	handler := d.stream(t, routes.JobRunner)
	for delivery := 1; delivery <= 2; delivery++ {
		resp, err := handler(ctx, ev)
		if err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("delivery %d: %+v %v", delivery, resp, err)
		}
		j, err := store.Get(ctx, id)
		if err != nil || j.State != jobs.Done || j.Runs != 1 {
			t.Fatalf("delivery %d: the job is %s after %d runs (%v), want DONE after 1", delivery, j.State, j.Runs, err)
		}
	}
}

// The dlq-archiver's sample message is an on-failure record. Pointed at a
// batch the stream holds, it archives the batch with its records, once
// however often the message comes; pointed at records no stream holds (the
// sample as it is), it reports the message failed, so it stays queued.
func TestDlqArchiverSampleMessage(t *testing.T) {
	d := newDeps(t)
	ctx := context.Background()
	var ev events.SQSEvent
	readEvent(t, routes.DlqArchiver.Function, &ev)
	handler, ok := d.bound.Queue(routes.DlqArchiver)
	if !ok {
		t.Fatal("no feature binds the dlq-archiver")
	}
	resp, err := handler(ctx, ev)
	if err != nil || len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != ev.Records[0].MessageId {
		t.Fatalf("a message whose records are nowhere: %+v %v, want it reported failed", resp, err)
	}

	// A real batch: one favorite, on the test's Reactions stream.
	edges := reactionsbind.Edges(d.deps)
	if _, _, err := edges.Add(ctx, reactions.Ref{UserID: "alice", Kind: reactions.Favorite, TargetID: "space-race"}, time.Now(), reactions.InTrending); err != nil {
		t.Fatal(err)
	}
	arn, err := streamread.StreamARN(ctx, d.deps.DB, d.deps.Table(schema.Reactions))
	if err != nil {
		t.Fatal(err)
	}
	shards, err := streamread.All(ctx, d.deps.Streams(), arn, "us-east-1")
	if err != nil || len(shards) == 0 || len(shards[0].Records) != 1 {
		t.Fatalf("the stream holds %+v, %v", shards, err)
	}
	parked, err := deadletters.ParseParked(ev.Records[0].Body)
	if err != nil {
		t.Fatal(err)
	}
	seq := shards[0].Records[0].Change.SequenceNumber
	parked.BatchInfo.StreamARN, parked.BatchInfo.ShardID = arn, shards[0].ShardID
	parked.BatchInfo.StartSequenceNumber, parked.BatchInfo.EndSequenceNumber, parked.BatchInfo.BatchSize = seq, seq, 1
	body, _ := json.Marshal(parked)
	ev.Records[0].Body = string(body)
	for delivery := 1; delivery <= 2; delivery++ {
		if resp, err := handler(ctx, ev); err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("delivery %d: %+v %v", delivery, resp, err)
		}
	}
	archive := deadlettersbind.Archive(d.deps)
	batches, err := archive.List(ctx, routes.CounterProcessor.Function)
	if err != nil || len(batches) != 1 || batches[0].Size != 1 || batches[0].Source != schema.Reactions.Name || batches[0].Reason != "RetryAttemptsExhausted" {
		t.Fatalf("archived %+v %v, want the one batch once", batches, err)
	}
	records, err := archive.Records(ctx, batches[0])
	if err != nil || len(records) != 1 || records[0].Change.SequenceNumber != seq {
		t.Fatalf("archived records %+v %v", records, err)
	}
}
