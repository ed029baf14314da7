package stack_test

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/firehose"
	fhtypes "github.com/aws/aws-sdk-go-v2/service/firehose/types"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	lambdatypes "github.com/aws/aws-sdk-go-v2/service/lambda/types"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/smithy-go"

	"github.com/rallyhq/rally/infra/local/awsapi"
	"github.com/rallyhq/rally/infra/local/policy"
	"github.com/rallyhq/rally/infra/local/stack"
	"github.com/rallyhq/rally/infra/local/stacktest"
	"github.com/rallyhq/rally/shared/analytics"
	"github.com/rallyhq/rally/shared/app"
	privacybind "github.com/rallyhq/rally/shared/privacy/bind"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
)

// A function binary, given the endpoint and its own credentials, reads
// and writes the stack's tables as its role allows, reads the cursor
// secret, ships analytics into the local export and invokes processors;
// what its role does not allow is refused and not written.
func TestFunctionBinariesReachTheStackThroughTheAWSEndpoint(t *testing.T) {
	dir := t.TempDir()
	s := stacktest.Start(t, stack.Options{AWSEndpoint: true, StateDir: dir})
	if s.AWS() == nil || s.Info().AWSEndpoint != s.AWS().URL() {
		t.Fatalf("the stack started no AWS endpoint: %+v", s.Info())
	}
	ctx := context.Background()
	games, players := s.Tables().Of(schema.Games), s.Tables().Of(schema.Players)
	processor := routes.Processors()[0].Function
	creds := s.AWS().AddCaller("put-game", []policy.Statement{
		{Effect: "Allow", Actions: []string{"dynamodb:GetItem", "dynamodb:PutItem"}, Resources: []string{awsapi.TableARN(games)}},
		{Effect: "Allow", Actions: []string{"secretsmanager:GetSecretValue"}, Resources: []string{stack.CursorSecretARN}},
		{Effect: "Allow", Actions: []string{"firehose:PutRecordBatch"}, Resources: []string{awsapi.DeliveryStreamARN(stack.AnalyticsStream)}},
		{Effect: "Allow", Actions: []string{"lambda:InvokeFunction"}, Resources: []string{awsapi.FunctionARN(processor)}},
	})
	provider := credentials.NewStaticCredentialsProvider(creds.AccessKeyID, creds.SecretAccessKey, creds.SessionToken)
	endpoint := aws.String(s.AWS().URL())

	db := dynamodb.New(dynamodb.Options{Region: stack.Region, BaseEndpoint: endpoint, Credentials: provider})
	game := map[string]types.AttributeValue{schema.AttrGameID: &types.AttributeValueMemberS{Value: "g-aws"}}
	if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(games), Item: game}); err != nil {
		t.Fatalf("PutItem on the granted Games table: %v", err)
	}
	if got := getItem(t, s, schema.Games, schema.AttrGameID, "g-aws"); got == nil {
		t.Error("the granted PutItem is not in the stack's Games table")
	}
	player := map[string]types.AttributeValue{schema.AttrPlayerID: &types.AttributeValueMemberS{Value: "p-aws"}}
	_, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(players), Item: player})
	var api smithy.APIError
	if !errors.As(err, &api) || api.ErrorCode() != "AccessDeniedException" || !strings.Contains(api.ErrorMessage(), awsapi.TableARN(players)) {
		t.Errorf("PutItem on Players, not granted: %v", err)
	}
	if got := getItem(t, s, schema.Players, schema.AttrPlayerID, "p-aws"); got != nil {
		t.Error("the denied PutItem was written")
	}

	sm := secretsmanager.New(secretsmanager.Options{Region: stack.Region, BaseEndpoint: endpoint, Credentials: provider})
	secret, err := sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(stack.CursorSecretARN)})
	if err != nil || aws.ToString(secret.SecretString) != s.Deps().Config.CursorKey {
		t.Errorf("the cursor secret: %v %v, want the stack's cursor key", secret, err)
	}

	fh := firehose.New(firehose.Options{Region: stack.Region, BaseEndpoint: endpoint, Credentials: provider})
	at := time.Date(2026, 11, 24, 9, 30, 0, 0, time.UTC)
	sent := []analytics.Event{{EventID: "e-aws-1", EventType: analytics.FavoriteAdded, SchemaVersion: analytics.SchemaVersion,
		OccurredAt: at, UserPID: "pid-1", GameID: aws.String("g-aws")}}
	failed, err := (&analytics.FirehoseSink{Client: fh, Stream: stack.AnalyticsStream}).Send(ctx, sent)
	if err != nil || failed[0] {
		t.Fatalf("shipping an event: failed %v, %v", failed, err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "analytics", analytics.Prefix, analytics.PartitionPath(sent[0]), "*.parquet"))
	if len(files) != 1 {
		t.Errorf("the shipped event is in %d files of its partition in the local export, want 1", len(files))
	}
	// A record the delivery stream cannot convert is accepted and kept
	// under errors/, as in AWS.
	out, err := fh.PutRecordBatch(ctx, &firehose.PutRecordBatchInput{DeliveryStreamName: aws.String(stack.AnalyticsStream),
		Records: []fhtypes.Record{{Data: []byte("not an event")}}})
	if err != nil || aws.ToInt32(out.FailedPutCount) != 0 {
		t.Fatalf("a malformed record: %v %v", out, err)
	}
	if bad, _ := filepath.Glob(filepath.Join(dir, "analytics", "errors", "format-conversion-failed", "dt=*", "*.json")); len(bad) != 1 {
		t.Errorf("the malformed record is in %d error files, want 1", len(bad))
	}

	lc := lambda.New(lambda.Options{Region: stack.Region, BaseEndpoint: endpoint, Credentials: provider})
	res, err := lc.Invoke(ctx, &lambda.InvokeInput{FunctionName: aws.String(processor), Payload: []byte(`{"Records":[]}`)})
	if err != nil || res.FunctionError != nil || !strings.Contains(string(res.Payload), "batchItemFailures") {
		t.Errorf("invoking %s with no records: %v %s %v", processor, res.FunctionError, res.Payload, err)
	}
	_, err = lc.Invoke(ctx, &lambda.InvokeInput{FunctionName: aws.String(routes.Processors()[1].Function), Payload: []byte(`{"Records":[]}`)})
	if !errors.As(err, &api) || api.ErrorCode() != "AccessDeniedException" {
		t.Errorf("invoking a processor not granted: %v", err)
	}

	// The local credentials call it unchecked, as the stack itself.
	local := lambda.New(lambda.Options{Region: stack.Region, BaseEndpoint: endpoint,
		Credentials: credentials.NewStaticCredentialsProvider(stack.DefaultAccessKey, stack.DefaultSecretKey, "")})
	_, err = local.Invoke(ctx, &lambda.InvokeInput{FunctionName: aws.String("no-such-function"), Payload: []byte(`{}`)})
	var notFound *lambdatypes.ResourceNotFoundException
	if !errors.As(err, &notFound) {
		t.Errorf("invoking a function the stack does not run: %v", err)
	}
}

// A function started as its binary starts (app.New from an environment
// whose AWS_ENDPOINT_URL is the endpoint and whose credentials are its
// own) reads the cursor secret at init and its tables through the
// endpoint, as its role allows; without the secret in its role it does
// not start.
func TestAFunctionStartsAndCallsAWSThroughTheEndpoint(t *testing.T) {
	s := stacktest.Start(t, stack.Options{AWSEndpoint: true})
	ctx := context.Background()
	games, players := s.Tables().Of(schema.Games), s.Tables().Of(schema.Players)
	fn := routes.ListFavorites.Function
	reads := policy.Statement{Effect: "Allow", Actions: []string{"dynamodb:GetItem", "dynamodb:Query"}, Resources: []string{awsapi.TableARN(games)}}
	start := func(statements ...policy.Statement) (*app.Deps, error) {
		creds := s.AWS().AddCaller(fn, statements)
		home := t.TempDir()
		for k, v := range map[string]string{
			"AWS_ENDPOINT_URL": s.AWS().URL(), "AWS_REGION": stack.Region,
			"AWS_ACCESS_KEY_ID": creds.AccessKeyID, "AWS_SECRET_ACCESS_KEY": creds.SecretAccessKey, "AWS_SESSION_TOKEN": creds.SessionToken,
			"AWS_CONFIG_FILE": filepath.Join(home, "config"), "AWS_SHARED_CREDENTIALS_FILE": filepath.Join(home, "credentials"),
			"AWS_EC2_METADATA_DISABLED": "true",
		} {
			t.Setenv(k, v)
		}
		cfg := s.Deps().Config
		cfg.Function = fn
		cfg.DynamoDBEndpoint, cfg.LambdaEndpoint = "", ""
		cfg.SecretARN, cfg.CursorKey = stack.CursorSecretARN, ""
		return app.New(ctx, cfg, app.Options{Function: fn, LogOutput: io.Discard})
	}

	_, err := start(reads)
	if err == nil || !strings.Contains(err.Error(), "AccessDeniedException") || !strings.Contains(err.Error(), stack.CursorSecretARN) {
		t.Fatalf("a function whose role lacks the cursor secret started: %v", err)
	}

	d, err := start(reads, policy.Statement{Effect: "Allow", Actions: []string{"secretsmanager:GetSecretValue"}, Resources: []string{stack.CursorSecretARN}})
	if err != nil {
		t.Fatalf("a function whose role has the cursor secret: %v", err)
	}
	// Its cursors are signed with the stack's key: the stack's own
	// functions read them.
	cursor, err := d.Cursors.Encode("favorites", map[string]string{"after": "g1"})
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]string
	if err := s.Deps().Cursors.Decode(ctx, "favorites", cursor, &back); err != nil || back["after"] != "g1" {
		t.Errorf("a cursor the function signed with the secret: %v %v", back, err)
	}
	key := map[string]types.AttributeValue{schema.AttrGameID: &types.AttributeValueMemberS{Value: "g1"}}
	if _, err := d.DB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(games), Key: key}); err != nil {
		t.Errorf("GetItem on a table its role reads: %v", err)
	}
	_, err = d.DB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(players),
		Key: map[string]types.AttributeValue{schema.AttrPlayerID: &types.AttributeValueMemberS{Value: "p1"}}})
	var api smithy.APIError
	if !errors.As(err, &api) || api.ErrorCode() != "AccessDeniedException" {
		t.Errorf("GetItem on a table its role does not read: %v", err)
	}
}

// A deployed function (not the local stage: it has no stand-ins) reads
// each key it uses from its secret at init, through the endpoint and as
// its role allows: the log key and, for erasure-status, the erasure key,
// the same the stack's own handlers use, so its hashes agree with theirs.
// Without the grant on a secret it reads, it does not start.
func TestADeployedFunctionReadsItsKeysFromTheStacksSecrets(t *testing.T) {
	s := stacktest.Start(t, stack.Options{AWSEndpoint: true})
	ctx := context.Background()
	fn := routes.ErasureStatus.Function
	logKey, erasureKey := stack.SecretARN(routes.LogKey), stack.SecretARN(routes.ErasureKey)
	start := func(secrets ...string) (*app.Deps, error) {
		creds := s.AWS().AddCaller(fn, []policy.Statement{{Effect: "Allow", Actions: []string{"secretsmanager:GetSecretValue"}, Resources: secrets}})
		home := t.TempDir()
		for k, v := range map[string]string{
			"AWS_ENDPOINT_URL": s.AWS().URL(), "AWS_REGION": stack.Region,
			"AWS_ACCESS_KEY_ID": creds.AccessKeyID, "AWS_SECRET_ACCESS_KEY": creds.SecretAccessKey, "AWS_SESSION_TOKEN": creds.SessionToken,
			"AWS_CONFIG_FILE": filepath.Join(home, "config"), "AWS_SHARED_CREDENTIALS_FILE": filepath.Join(home, "credentials"),
			"AWS_EC2_METADATA_DISABLED": "true",
		} {
			t.Setenv(k, v)
		}
		cfg := s.Deps().Config
		cfg.Stage, cfg.Function = "dev", fn
		cfg.DynamoDBEndpoint, cfg.LambdaEndpoint = "", ""
		cfg.LogKey, cfg.ErasureKey, cfg.CursorKey = "", "", ""
		cfg.LogKeyARN, cfg.ErasureKeyARN = logKey, erasureKey
		// As deployed, its service routes admit the roles the stack names.
		cfg.ServiceRoles = []string{"arn:aws:iam::000000000000:role/rally-dev-operator"}
		return app.New(ctx, cfg, app.Options{Function: fn, LogOutput: io.Discard})
	}

	_, err := start(logKey)
	if err == nil || !strings.Contains(err.Error(), "AccessDeniedException") || !strings.Contains(err.Error(), erasureKey) {
		t.Fatalf("a function whose role lacks the erasure key's secret started: %v", err)
	}
	d, err := start(logKey, erasureKey)
	if err != nil {
		t.Fatalf("a function whose role reads its secrets: %v", err)
	}
	if got, want := privacybind.Hasher(d).Hash("alice"), privacybind.Hasher(s.Deps()).Hash("alice"); got != want {
		t.Errorf("the function's erasure hash of alice is %s, the stack's %s", got, want)
	}
	mine, _ := d.Key(routes.LogKey).Keys()
	stacks, _ := s.Deps().Key(routes.LogKey).Keys()
	if string(mine) != string(stacks) {
		t.Error("the function's log key is not the stack's")
	}
	if d.Key(routes.CursorKey) != nil {
		t.Error("a function that never pages read the cursor key")
	}
}
