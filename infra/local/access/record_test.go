package access_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/rallyhq/rally/infra/local/access"
	"github.com/rallyhq/rally/shared/app"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
)

var errNotSent = errors.New("not sent")

// client is a DynamoDB client whose calls are recorded and then stop
// before they are sent.
func client(r *access.Recorder) *dynamodb.Client {
	stop := middleware.FinalizeMiddlewareFunc("Stop", func(context.Context, middleware.FinalizeInput, middleware.FinalizeHandler) (
		middleware.FinalizeOutput, middleware.Metadata, error,
	) {
		return middleware.FinalizeOutput{}, middleware.Metadata{}, errNotSent
	})
	return dynamodb.New(dynamodb.Options{
		Region: "us-east-1", Credentials: aws.AnonymousCredentials{},
		APIOptions: []func(*middleware.Stack) error{r.APIOption, func(s *middleware.Stack) error {
			return s.Finalize.Add(stop, middleware.Before)
		}},
	})
}

// A transaction or batch needs the action of each of its items on each of
// their tables, as IAM evaluates them; calls outside any function's
// invocation are not recorded.
func TestEachPartOfACallIsRecordedByTheActionItNeeds(t *testing.T) {
	names := schema.Names{"Reactions": "t.Reactions", "Idempotency": "t.Idempotency", "Counters": "t.Counters", "Games": "t.Games"}
	r := access.NewRecorder(names)
	db := client(r)
	ctx := app.WithFunction(context.Background(), "toggle-like")
	key := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "x"}}
	_, _ = db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Update: &types.Update{TableName: aws.String("t.Reactions"), Key: key, UpdateExpression: aws.String("SET a = :a")}},
		{Put: &types.Put{TableName: aws.String("t.Idempotency"), Item: key}},
		{ConditionCheck: &types.ConditionCheck{TableName: aws.String("t.Counters"), Key: key, ConditionExpression: aws.String("attribute_exists(pk)")}},
	}})
	_, _ = db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{
		"t.Games": {Keys: []map[string]types.AttributeValue{key}},
	}})
	_, _ = db.Query(ctx, &dynamodb.QueryInput{TableName: aws.String("t.Reactions"), IndexName: aws.String("by_time")})
	_, _ = db.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String("t.Games"), Key: key})

	var got []string
	for _, u := range r.Uses() {
		got = append(got, u.String())
	}
	want := []string{
		"toggle-like: dynamodb:BatchGetItem on Games",
		"toggle-like: dynamodb:ConditionCheckItem on Counters",
		"toggle-like: dynamodb:PutItem on Idempotency",
		"toggle-like: dynamodb:Query on Reactions index by_time",
		"toggle-like: dynamodb:UpdateItem on Reactions",
	}
	if !slices.Equal(got, want) {
		t.Errorf("recorded\n%q\nwant\n%q", got, want)
	}
}

// A use beyond the function's declarations is denied (an action it is not
// granted on a table, an index it is not granted, a table it is not
// granted, Redis it does not declare); each declared action never used is
// reported on its own.
func TestDeniedAndUnusedCompareUsesWithTheDeclarations(t *testing.T) {
	grants := map[string]access.Grant{
		"f": {
			Calls:   map[string]routes.Action{"A": routes.GetItem, "A/index/by_x": routes.Query, "B": routes.Query | routes.PutItem, "C": routes.UpdateItem},
			Streams: map[string]bool{"A": true},
		},
	}
	uses := []access.Use{
		{Function: "f", Action: "dynamodb:GetItem", Table: "A"},
		{Function: "f", Action: "dynamodb:Scan", Table: "A"},
		{Function: "f", Action: "dynamodb:Query", Table: "A"},
		{Function: "f", Action: "dynamodb:Query", Table: "B"},
		{Function: "f", Action: "dynamodb:Query", Table: "B", Index: "by_y"},
		{Function: "f", Action: "dynamodb:GetItem", Table: "D"},
		{Function: "f", Action: "dynamodb:DescribeTable", Table: "B"},
		{Function: "f", Action: access.ActionRedis},
		{Function: "g", Action: "dynamodb:GetItem", Table: "A"},
	}
	denied := access.Denied(grants, uses)
	if len(denied) != 7 {
		t.Errorf("denied %q, want the Scan and the Query of A, the index of B, D, DescribeTable, Redis and the undeclared g", denied)
	}
	unused := access.Unused(grants, uses, []string{"f"})
	if want := []string{"f Query on A/index/by_x", "f PutItem on B", "f UpdateItem on C", "f reads the A stream"}; !slices.Equal(unused, want) {
		t.Errorf("unused %q, want %q", unused, want)
	}
}
