package awsapi_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/aws/aws-sdk-go-v2/service/firehose"
	fhtypes "github.com/aws/aws-sdk-go-v2/service/firehose/types"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	lambdatypes "github.com/aws/aws-sdk-go-v2/service/lambda/types"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	smtypes "github.com/aws/aws-sdk-go-v2/service/secretsmanager/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"

	"github.com/rallyhq/rally/infra/local/awsapi"
	"github.com/rallyhq/rally/infra/local/policy"
	"github.com/rallyhq/rally/infra/local/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// env is an endpoint in front of the test binary's DynamoDB Local with two
// tables of this test (Scores and Players, each with a by-board index and
// a stream), one secret, a recording delivery stream and two functions to
// invoke.
type env struct {
	srv             *awsapi.Server
	direct          *dynamodb.Client // DynamoDB Local itself, unchecked
	scores, players string
	secret          string
	sink            *recordingSink
	invoked         chan string
	log             *syncBuffer
}

var admin = aws.Credentials{AccessKeyID: "rallyadmin", SecretAccessKey: "rallyadminsecret"}

func newEnv(t *testing.T) *env {
	t.Helper()
	endpoint := testenv.Endpoint(t)
	e := &env{
		direct: testenv.Client(endpoint),
		scores: fmt.Sprintf("%s.%d.Scores", t.Name(), os.Getpid()), players: fmt.Sprintf("%s.%d.Players", t.Name(), os.Getpid()),
		secret:  awsapi.SecretARN("rally-test-cursor"),
		sink:    &recordingSink{},
		invoked: make(chan string, 8),
		log:     &syncBuffer{},
	}
	ctx := context.Background()
	for _, table := range []string{e.scores, e.players} {
		_, err := e.direct.CreateTable(ctx, &dynamodb.CreateTableInput{
			TableName: aws.String(table), BillingMode: types.BillingModePayPerRequest,
			AttributeDefinitions: []types.AttributeDefinition{
				{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS},
				{AttributeName: aws.String("board"), AttributeType: types.ScalarAttributeTypeS},
			},
			KeySchema: []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
			GlobalSecondaryIndexes: []types.GlobalSecondaryIndex{{
				IndexName: aws.String("by-board"), Projection: &types.Projection{ProjectionType: types.ProjectionTypeAll},
				KeySchema: []types.KeySchemaElement{{AttributeName: aws.String("board"), KeyType: types.KeyTypeHash}},
			}},
			StreamSpecification: &types.StreamSpecification{StreamEnabled: aws.Bool(true), StreamViewType: types.StreamViewTypeNewImage},
		})
		testenv.Require(t, "DynamoDB Local", err)
		t.Cleanup(func() {
			_, _ = e.direct.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(table)})
		})
	}
	srv, err := awsapi.New(awsapi.Options{
		DynamoDB: endpoint,
		Admin:    admin,
		Secrets:  map[string]awsapi.Secret{e.secret: {Current: "key-2", Previous: "key-1"}, awsapi.SecretARN("fresh"): {Current: "only"}},
		Firehose: e.sink,
		Invoke: func(_ context.Context, function string, payload []byte) ([]byte, error) {
			switch function {
			case "echo":
				e.invoked <- string(payload)
				return payload, nil
			case "broken":
				return nil, errors.New("the processor failed")
			}
			return nil, fmt.Errorf("%w: %s", awsapi.ErrNotFound, function)
		},
		Log: slog.New(slog.NewTextHandler(e.log, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	e.srv = srv
	return e
}

// scoresRole is a function's role that reads and writes Scores and its
// indexes, reads Players' items but no index of it, reads Scores' stream,
// reads the secret and puts to the analytics stream and invokes echo.
func (e *env) scoresRole() []policy.Statement {
	return []policy.Statement{
		{Effect: "Allow", Actions: []string{"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem",
			"dynamodb:ConditionCheckItem", "dynamodb:Query", "dynamodb:BatchWriteItem", "dynamodb:BatchGetItem", "dynamodb:DescribeTable"},
			Resources: []string{awsapi.TableARN(e.scores), awsapi.TableARN(e.scores) + "/index/*"}},
		{Effect: "Allow", Actions: []string{"dynamodb:GetItem", "dynamodb:Query"}, Resources: []string{awsapi.TableARN(e.players)}},
		{Effect: "Allow", Actions: []string{"dynamodb:DescribeStream", "dynamodb:GetShardIterator", "dynamodb:GetRecords"},
			Resources: []string{awsapi.TableARN(e.scores) + "/stream/*"}},
		{Effect: "Allow", Actions: []string{"dynamodb:ListStreams"}, Resources: []string{"*"}},
		{Effect: "Allow", Actions: []string{"secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"}, Resources: []string{e.secret}},
		{Effect: "Allow", Actions: []string{"firehose:PutRecordBatch", "firehose:PutRecord"}, Resources: []string{awsapi.DeliveryStreamARN("analytics")}},
		{Effect: "Allow", Actions: []string{"lambda:InvokeFunction"}, Resources: []string{awsapi.FunctionARN("echo"), awsapi.FunctionARN("broken")}},
	}
}

func static(c aws.Credentials) aws.CredentialsProvider {
	return credentials.NewStaticCredentialsProvider(c.AccessKeyID, c.SecretAccessKey, c.SessionToken)
}

func (e *env) dynamo(c aws.Credentials) *dynamodb.Client {
	return dynamodb.New(dynamodb.Options{Region: "us-east-1", BaseEndpoint: aws.String(e.srv.URL()), Credentials: static(c), Retryer: aws.NopRetryer{}})
}

func (e *env) streams(c aws.Credentials) *dynamodbstreams.Client {
	return dynamodbstreams.New(dynamodbstreams.Options{Region: "us-east-1", BaseEndpoint: aws.String(e.srv.URL()), Credentials: static(c), Retryer: aws.NopRetryer{}})
}

func (e *env) secrets(c aws.Credentials) *secretsmanager.Client {
	return secretsmanager.New(secretsmanager.Options{Region: "us-east-1", BaseEndpoint: aws.String(e.srv.URL()), Credentials: static(c), Retryer: aws.NopRetryer{}})
}

func (e *env) firehose(c aws.Credentials) *firehose.Client {
	return firehose.New(firehose.Options{Region: "us-east-1", BaseEndpoint: aws.String(e.srv.URL()), Credentials: static(c), Retryer: aws.NopRetryer{}})
}

func (e *env) lambda(c aws.Credentials) *lambda.Client {
	return lambda.New(lambda.Options{Region: "us-east-1", BaseEndpoint: aws.String(e.srv.URL()), Credentials: static(c), Retryer: aws.NopRetryer{}})
}

func item(id, board string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: id}, "board": &types.AttributeValueMemberS{Value: board}}
}

func key(id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: id}}
}

// stored reads an item straight from DynamoDB Local.
func (e *env) stored(t *testing.T, table, id string) bool {
	t.Helper()
	out, err := e.direct.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(table), Key: key(id), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item != nil
}

// denied asserts err is the AccessDeniedException AWS answers, naming
// the function, the action and the resource, and that the denial was
// logged.
func (e *env) denied(t *testing.T, err error, function, action, resource string) {
	t.Helper()
	var api smithy.APIError
	if !errors.As(err, &api) || api.ErrorCode() != "AccessDeniedException" {
		t.Fatalf("want AccessDeniedException for %s on %s, got %v", action, resource, err)
	}
	want := "User: arn:aws:sts::" + awsapi.AccountID + ":assumed-role/" + function + "/" + function +
		" is not authorized to perform: " + action + " on resource: " + resource + " because no identity-based policy allows the " + action + " action"
	if api.ErrorMessage() != want {
		t.Errorf("denial message:\n got %s\nwant %s", api.ErrorMessage(), want)
	}
	logged := e.log.String()
	if !strings.Contains(logged, "function="+function) || !strings.Contains(logged, "action="+action) || !strings.Contains(logged, "resource="+resource) {
		t.Errorf("the denial of %s on %s was not logged with the function, action and resource:\n%s", action, resource, logged)
	}
}

func TestAFunctionMakesTheDynamoDBCallsItsRoleAllows(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	db := e.dynamo(e.srv.AddCaller("post-score", e.scoresRole()))

	if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(e.scores), Item: item("s1", "weekly")}); err != nil {
		t.Fatalf("PutItem on a granted table: %v", err)
	}
	got, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(e.scores), Key: key("s1")})
	if err != nil || got.Item == nil {
		t.Fatalf("GetItem of what was put: %v %v", got, err)
	}
	if _, err := db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Put: &types.Put{TableName: aws.String(e.scores), Item: item("s2", "weekly")}},
		{ConditionCheck: &types.ConditionCheck{TableName: aws.String(e.scores), Key: key("s1"), ConditionExpression: aws.String("attribute_exists(id)")}},
	}}); err != nil {
		t.Fatalf("TransactWriteItems on a granted table: %v", err)
	}
	if _, err := db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{
		e.scores: {{PutRequest: &types.PutRequest{Item: item("s3", "daily")}}},
	}}); err != nil {
		t.Fatalf("BatchWriteItem on a granted table: %v", err)
	}
	q, err := db.Query(ctx, &dynamodb.QueryInput{TableName: aws.String(e.scores), IndexName: aws.String("by-board"),
		KeyConditionExpression: aws.String("board = :b"), ExpressionAttributeValues: map[string]types.AttributeValue{":b": &types.AttributeValueMemberS{Value: "weekly"}}})
	if err != nil {
		t.Fatalf("Query on a granted index: %v", err)
	}
	if q.Count != 2 {
		t.Errorf("the index holds %d weekly scores, want 2 (s1, s2)", q.Count)
	}
	for _, id := range []string{"s1", "s2", "s3"} {
		if !e.stored(t, e.scores, id) {
			t.Errorf("%s is not in DynamoDB Local", id)
		}
	}
}

func TestAFunctionIsDeniedWhatItsRoleDoesNotAllowAndNothingIsWritten(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	db := e.dynamo(e.srv.AddCaller("post-score", e.scoresRole()))
	players := awsapi.TableARN(e.players)

	_, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(e.players), Item: item("p1", "weekly")})
	e.denied(t, err, "post-score", "dynamodb:PutItem", players)
	if e.stored(t, e.players, "p1") {
		t.Error("a denied PutItem was written")
	}

	_, err = db.Query(ctx, &dynamodb.QueryInput{TableName: aws.String(e.players), IndexName: aws.String("by-board"),
		KeyConditionExpression: aws.String("board = :b"), ExpressionAttributeValues: map[string]types.AttributeValue{":b": &types.AttributeValueMemberS{Value: "weekly"}}})
	e.denied(t, err, "post-score", "dynamodb:Query", players+"/index/by-board")

	_, err = db.Scan(ctx, &dynamodb.ScanInput{TableName: aws.String(e.scores)})
	e.denied(t, err, "post-score", "dynamodb:Scan", awsapi.TableARN(e.scores))

	// One item the role may not write denies the whole transaction.
	_, err = db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Put: &types.Put{TableName: aws.String(e.scores), Item: item("s1", "weekly")}},
		{Update: &types.Update{TableName: aws.String(e.players), Key: key("p2"), UpdateExpression: aws.String("SET board = :b"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":b": &types.AttributeValueMemberS{Value: "weekly"}}}},
	}})
	e.denied(t, err, "post-score", "dynamodb:UpdateItem", players)

	// So does one table of a batch.
	_, err = db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{
		e.scores:  {{PutRequest: &types.PutRequest{Item: item("s3", "daily")}}},
		e.players: {{PutRequest: &types.PutRequest{Item: item("p3", "daily")}}},
	}})
	e.denied(t, err, "post-score", "dynamodb:BatchWriteItem", players)

	for table, ids := range map[string][]string{e.scores: {"s1", "s3"}, e.players: {"p2", "p3"}} {
		for _, id := range ids {
			if e.stored(t, table, id) {
				t.Errorf("%s was written by a denied call", id)
			}
		}
	}

	// A role with no statements may do nothing; an explicit Deny wins.
	_, err = e.dynamo(e.srv.AddCaller("get-games", nil)).GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(e.scores), Key: key("s1")})
	e.denied(t, err, "get-games", "dynamodb:GetItem", awsapi.TableARN(e.scores))
	denyAll := append(e.scoresRole(), policy.Statement{Effect: "Deny", Actions: []string{"dynamodb:Put*"}, Resources: []string{"*"}})
	_, err = e.dynamo(e.srv.AddCaller("frozen", denyAll)).PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(e.scores), Item: item("s4", "weekly")})
	var api smithy.APIError
	if !errors.As(err, &api) || api.ErrorCode() != "AccessDeniedException" || !strings.HasSuffix(api.ErrorMessage(), "with an explicit deny in an identity-based policy") {
		t.Errorf("an explicitly denied PutItem: %v", err)
	}
	if e.stored(t, e.scores, "s4") {
		t.Error("an explicitly denied PutItem was written")
	}
}

// A grant on some attributes of a table (the analytics shipper's on
// Players) allows reading them by projection and updating them, and
// nothing wider: not the whole item, not another attribute, not the
// whole item returned by an update.
func TestAGrantOnSomeAttributesAllowsOnlyThose(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	players := awsapi.TableARN(e.players)
	role := []policy.Statement{{
		Effect: "Allow", Actions: []string{"dynamodb:GetItem", "dynamodb:UpdateItem"}, Resources: []string{players},
		Conditions: []policy.Condition{
			{Operator: "ForAllValues:StringEquals", Key: "dynamodb:Attributes", Values: []string{"id", "secret"}},
			{Operator: "StringEqualsIfExists", Key: "dynamodb:Select", Values: []string{"SPECIFIC_ATTRIBUTES"}},
			{Operator: "StringEqualsIfExists", Key: "dynamodb:ReturnValues", Values: []string{"NONE", "UPDATED_OLD", "UPDATED_NEW"}},
		},
	}}
	db := e.dynamo(e.srv.AddCaller("analytics-shipper", role))
	if _, err := e.direct.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(e.players), Item: item("p1", "weekly")}); err != nil {
		t.Fatal(err)
	}
	secret := &types.AttributeValueMemberS{Value: "s3cret"}
	names := map[string]string{"#s": "secret"}

	if _, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(e.players), Key: key("p1"),
		UpdateExpression: aws.String("SET #s = if_not_exists(#s, :v)"), ConditionExpression: aws.String("attribute_exists(id)"),
		ExpressionAttributeNames: names, ExpressionAttributeValues: map[string]types.AttributeValue{":v": secret},
		ReturnValues: types.ReturnValueUpdatedNew}); err != nil {
		t.Fatalf("an update of the granted attribute: %v", err)
	}
	got, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(e.players), Key: key("p1"),
		ProjectionExpression: aws.String("#s"), ExpressionAttributeNames: names})
	if err != nil || got.Item["secret"] == nil || got.Item["board"] != nil {
		t.Fatalf("a read projecting the granted attribute: %v %v", got, err)
	}

	_, err = db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(e.players), Key: key("p1")})
	e.denied(t, err, "analytics-shipper", "dynamodb:GetItem", players)
	_, err = db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(e.players), Key: key("p1"), ProjectionExpression: aws.String("board, #s"), ExpressionAttributeNames: names})
	e.denied(t, err, "analytics-shipper", "dynamodb:GetItem", players)
	_, err = db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(e.players), Key: key("p1"),
		UpdateExpression: aws.String("SET board = :b"), ExpressionAttributeValues: map[string]types.AttributeValue{":b": &types.AttributeValueMemberS{Value: "daily"}}})
	e.denied(t, err, "analytics-shipper", "dynamodb:UpdateItem", players)
	_, err = db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(e.players), Key: key("p1"),
		UpdateExpression: aws.String("REMOVE #s"), ExpressionAttributeNames: names, ReturnValues: types.ReturnValueAllOld})
	e.denied(t, err, "analytics-shipper", "dynamodb:UpdateItem", players)
	_, err = db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Update: &types.Update{TableName: aws.String(e.players), Key: key("p1"), UpdateExpression: aws.String("REMOVE #s, #b"),
			ExpressionAttributeNames: map[string]string{"#s": "secret", "#b": "board"}}},
	}})
	e.denied(t, err, "analytics-shipper", "dynamodb:UpdateItem", players)

	out, err := e.direct.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(e.players), Key: key("p1"), ConsistentRead: aws.Bool(true)})
	if err != nil || out.Item["board"].(*types.AttributeValueMemberS).Value != "weekly" || out.Item["secret"] == nil {
		t.Errorf("after the denied calls the item is %v (%v), want its board and secret as they were", out.Item, err)
	}
	if _, err := db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Update: &types.Update{TableName: aws.String(e.players), Key: key("p1"), UpdateExpression: aws.String("REMOVE #s"),
			ConditionExpression: aws.String("#s = :v"), ExpressionAttributeNames: names, ExpressionAttributeValues: map[string]types.AttributeValue{":v": secret}}},
	}}); err != nil {
		t.Fatalf("a transaction removing the granted attribute: %v", err)
	}
}

func TestAFunctionReadsOnlyTheStreamsItsRoleAllows(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	creds := e.srv.AddCaller("score-processor", e.scoresRole())
	st := e.streams(creds)
	if _, err := e.direct.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(e.scores), Item: item("s1", "weekly")}); err != nil {
		t.Fatal(err)
	}
	arnOf := func(table string) string {
		out, err := e.direct.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
		if err != nil {
			t.Fatal(err)
		}
		return aws.ToString(out.Table.LatestStreamArn)
	}

	if _, err := st.ListStreams(ctx, &dynamodbstreams.ListStreamsInput{}); err != nil {
		t.Fatalf("ListStreams granted on *: %v", err)
	}
	desc, err := st.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: aws.String(arnOf(e.scores))})
	if err != nil {
		t.Fatalf("DescribeStream of a granted stream: %v", err)
	}
	it, err := st.GetShardIterator(ctx, &dynamodbstreams.GetShardIteratorInput{StreamArn: aws.String(arnOf(e.scores)),
		ShardId: desc.StreamDescription.Shards[0].ShardId, ShardIteratorType: streamtypes.ShardIteratorTypeTrimHorizon})
	if err != nil {
		t.Fatalf("GetShardIterator of a granted stream: %v", err)
	}
	recs, err := st.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: it.ShardIterator})
	if err != nil {
		t.Fatalf("GetRecords of a granted stream: %v", err)
	}
	if len(recs.Records) != 1 {
		t.Errorf("read %d records, want the one put", len(recs.Records))
	}
	// The next iterator reads the same stream.
	if _, err := st.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: recs.NextShardIterator}); err != nil {
		t.Fatalf("GetRecords with the next iterator: %v", err)
	}

	playersARN := arnOf(e.players)
	_, local, _ := strings.Cut(playersARN, ":table/")
	_, err = st.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: aws.String(playersARN)})
	e.denied(t, err, "score-processor", "dynamodb:DescribeStream", awsapi.TableARN(local))

	// (DynamoDB Local's own stream ARNs carry its region, ddblocal; the
	// policy is checked against the local region's.)

	// An iterator of a stream the role may not read, got by someone who
	// may, is refused too.
	adminStreams := e.streams(admin)
	pdesc, err := adminStreams.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: aws.String(playersARN)})
	if err != nil {
		t.Fatalf("the admin skips the check: %v", err)
	}
	pit, err := adminStreams.GetShardIterator(ctx, &dynamodbstreams.GetShardIteratorInput{StreamArn: aws.String(playersARN),
		ShardId: pdesc.StreamDescription.Shards[0].ShardId, ShardIteratorType: streamtypes.ShardIteratorTypeTrimHorizon})
	if err != nil {
		t.Fatal(err)
	}
	_, err = st.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: pit.ShardIterator})
	var api smithy.APIError
	if !errors.As(err, &api) || api.ErrorCode() != "AccessDeniedException" || !strings.Contains(api.ErrorMessage(), "dynamodb:GetRecords") {
		t.Errorf("GetRecords on an ungranted stream's iterator: %v", err)
	}
}

func TestSecretsAreReadByStageAsTheRoleAllows(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	sm := e.secrets(e.srv.AddCaller("get-board", e.scoresRole()))
	for stage, want := range map[string]string{"": "key-2", "AWSCURRENT": "key-2", "AWSPREVIOUS": "key-1"} {
		in := &secretsmanager.GetSecretValueInput{SecretId: aws.String(e.secret)}
		if stage != "" {
			in.VersionStage = aws.String(stage)
		}
		out, err := sm.GetSecretValue(ctx, in)
		if err != nil {
			t.Fatalf("GetSecretValue %s: %v", stage, err)
		}
		if aws.ToString(out.SecretString) != want || aws.ToString(out.ARN) != e.secret {
			t.Errorf("stage %q: %q of %s, want %q", stage, aws.ToString(out.SecretString), aws.ToString(out.ARN), want)
		}
	}
	desc, err := sm.DescribeSecret(ctx, &secretsmanager.DescribeSecretInput{SecretId: aws.String(e.secret)})
	if err != nil || len(desc.VersionIdsToStages) != 2 || aws.ToString(desc.Name) != "rally-test-cursor" {
		t.Errorf("DescribeSecret: %+v %v", desc, err)
	}

	// A secret never rotated has no AWSPREVIOUS: the SDK's own type.
	admin := e.secrets(admin)
	_, err = admin.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(awsapi.SecretARN("fresh")), VersionStage: aws.String("AWSPREVIOUS")})
	var notFound *smtypes.ResourceNotFoundException
	if !errors.As(err, &notFound) {
		t.Errorf("AWSPREVIOUS of a secret never rotated: %v", err)
	}
	_, err = admin.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String("no-such-secret")})
	if !errors.As(err, &notFound) {
		t.Errorf("a missing secret: %v", err)
	}

	_, err = sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(awsapi.SecretARN("fresh"))})
	e.denied(t, err, "get-board", "secretsmanager:GetSecretValue", awsapi.SecretARN("fresh"))
}

// recordingSink is a delivery stream named "analytics" that keeps what it
// is given.
type recordingSink struct {
	mu      sync.Mutex
	records []string
}

func (s *recordingSink) PutRecords(_ context.Context, stream string, records [][]byte) ([]bool, error) {
	if stream != "analytics" {
		return nil, fmt.Errorf("%w: %s", awsapi.ErrNotFound, stream)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range records {
		s.records = append(s.records, string(r))
	}
	return make([]bool, len(records)), nil
}

func (s *recordingSink) got() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.records...)
}

func TestFirehoseRecordsReachTheSinkOnlyWhenTheRoleAllows(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	fh := e.firehose(e.srv.AddCaller("analytics-shipper", e.scoresRole()))
	out, err := fh.PutRecordBatch(ctx, &firehose.PutRecordBatchInput{DeliveryStreamName: aws.String("analytics"),
		Records: []fhtypes.Record{{Data: []byte(`{"a":1}`)}, {Data: []byte(`{"b":2}`)}}})
	if err != nil {
		t.Fatalf("PutRecordBatch to a granted stream: %v", err)
	}
	if aws.ToInt32(out.FailedPutCount) != 0 || len(out.RequestResponses) != 2 || aws.ToString(out.RequestResponses[0].RecordId) == "" {
		t.Errorf("PutRecordBatch answer: %+v", out)
	}
	if _, err := fh.PutRecord(ctx, &firehose.PutRecordInput{DeliveryStreamName: aws.String("analytics"), Record: &fhtypes.Record{Data: []byte(`{"c":3}`)}}); err != nil {
		t.Fatalf("PutRecord: %v", err)
	}
	if got := strings.Join(e.sink.got(), ","); got != `{"a":1},{"b":2},{"c":3}` {
		t.Errorf("the sink got %s", got)
	}

	_, err = fh.PutRecordBatch(ctx, &firehose.PutRecordBatchInput{DeliveryStreamName: aws.String("other"), Records: []fhtypes.Record{{Data: []byte(`{}`)}}})
	e.denied(t, err, "analytics-shipper", "firehose:PutRecordBatch", awsapi.DeliveryStreamARN("other"))
	_, err = e.firehose(admin).PutRecordBatch(ctx, &firehose.PutRecordBatchInput{DeliveryStreamName: aws.String("other"), Records: []fhtypes.Record{{Data: []byte(`{}`)}}})
	var notFound *fhtypes.ResourceNotFoundException
	if !errors.As(err, &notFound) {
		t.Errorf("a stream that does not exist: %v", err)
	}
	if n := len(e.sink.got()); n != 3 {
		t.Errorf("refused calls delivered records: the sink has %d", n)
	}
}

func TestInvokeRunsTheFunctionTheRoleMayInvoke(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	lc := e.lambda(e.srv.AddCaller("redrive", e.scoresRole()))

	out, err := lc.Invoke(ctx, &lambda.InvokeInput{FunctionName: aws.String("echo"), Payload: []byte(`{"Records":[]}`)})
	if err != nil {
		t.Fatalf("Invoke a granted function: %v", err)
	}
	if string(out.Payload) != `{"Records":[]}` || out.FunctionError != nil || <-e.invoked != `{"Records":[]}` {
		t.Errorf("Invoke answered %s (function error %v)", out.Payload, aws.ToString(out.FunctionError))
	}

	out, err = lc.Invoke(ctx, &lambda.InvokeInput{FunctionName: aws.String(awsapi.FunctionARN("echo")), InvocationType: lambdatypes.InvocationTypeEvent, Payload: []byte(`{"async":true}`)})
	if err != nil || out.StatusCode != 202 {
		t.Fatalf("an Event invocation: %v %v", out, err)
	}
	select {
	case got := <-e.invoked:
		if got != `{"async":true}` {
			t.Errorf("the event invocation ran with %s", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the event invocation never ran")
	}

	out, err = lc.Invoke(ctx, &lambda.InvokeInput{FunctionName: aws.String("broken"), Payload: []byte(`{}`)})
	if err != nil || aws.ToString(out.FunctionError) != "Unhandled" || !strings.Contains(string(out.Payload), "the processor failed") {
		t.Errorf("a function error: %v %v", out, err)
	}

	_, err = lc.Invoke(ctx, &lambda.InvokeInput{FunctionName: aws.String("erase"), Payload: []byte(`{}`)})
	e.denied(t, err, "redrive", "lambda:InvokeFunction", awsapi.FunctionARN("erase"))
	_, err = e.lambda(admin).Invoke(ctx, &lambda.InvokeInput{FunctionName: aws.String("erase"), Payload: []byte(`{}`)})
	var notFound *lambdatypes.ResourceNotFoundException
	if !errors.As(err, &notFound) {
		t.Errorf("a function that does not exist: %v", err)
	}
}

func TestUnknownKeysBadSignaturesAndUnservedCallsAreRefused(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	creds := e.srv.AddCaller("post-score", e.scoresRole())
	code := func(err error) string {
		var api smithy.APIError
		if errors.As(err, &api) {
			return api.ErrorCode()
		}
		return fmt.Sprint(err)
	}

	_, err := e.dynamo(aws.Credentials{AccessKeyID: "AKIAUNKNOWN", SecretAccessKey: "x"}).PutItem(ctx,
		&dynamodb.PutItemInput{TableName: aws.String(e.scores), Item: item("u1", "weekly")})
	if code(err) != "UnrecognizedClientException" {
		t.Errorf("an unknown access key: %v", err)
	}
	_, err = e.lambda(aws.Credentials{AccessKeyID: "AKIAUNKNOWN", SecretAccessKey: "x"}).Invoke(ctx, &lambda.InvokeInput{FunctionName: aws.String("echo")})
	if code(err) != "UnrecognizedClientException" {
		t.Errorf("an unknown access key on Lambda: %v", err)
	}
	forged := creds
	forged.SecretAccessKey = "not-the-secret"
	_, err = e.dynamo(forged).PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(e.scores), Item: item("u2", "weekly")})
	if code(err) != "InvalidSignatureException" {
		t.Errorf("a signature made with the wrong secret: %v", err)
	}
	noToken := creds
	noToken.SessionToken = ""
	_, err = e.dynamo(noToken).PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(e.scores), Item: item("u3", "weekly")})
	if code(err) != "UnrecognizedClientException" {
		t.Errorf("a session's key without its token: %v", err)
	}
	for _, id := range []string{"u1", "u2", "u3"} {
		if e.stored(t, e.scores, id) {
			t.Errorf("%s was written by a refused call", id)
		}
	}

	// A call this endpoint does not serve names itself.
	_, err = e.secrets(creds).ListSecrets(ctx, &secretsmanager.ListSecretsInput{})
	var api smithy.APIError
	if !errors.As(err, &api) || api.ErrorCode() != "UnknownOperationException" || !strings.Contains(api.ErrorMessage(), "secretsmanager:ListSecrets") {
		t.Errorf("an operation not served: %v", err)
	}
	// SQS is no dependency of any function yet: the first call fails here.
	queue := sqs.New(sqs.Options{Region: "us-east-1", BaseEndpoint: aws.String(e.srv.URL()), Credentials: static(creds), Retryer: aws.NopRetryer{}})
	_, err = queue.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(e.srv.URL() + "/000000000000/q"), MessageBody: aws.String("m")})
	if !errors.As(err, &api) || api.ErrorCode() != "UnknownOperationException" || !strings.Contains(api.ErrorMessage(), "AmazonSQS.SendMessage (service sqs)") {
		t.Errorf("an SQS call: %v", err)
	}
	_, err = e.lambda(creds).ListFunctions(ctx, &lambda.ListFunctionsInput{})
	if !errors.As(err, &api) || api.ErrorCode() != "UnknownOperationException" || !strings.Contains(api.ErrorMessage(), "GET /2015-03-31/functions") {
		t.Errorf("a Lambda operation not served: %v", err)
	}
}

// syncBuffer is a log destination safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
