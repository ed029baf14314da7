package tables_test

import (
	"context"
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/infra/local/tables"
	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/shared/schema"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestTablesMatchTheirDeclarationAndCreateIsIdempotent(t *testing.T) {
	db, names, _ := testenv.DynamoDB(t)
	ctx := context.Background()
	if err := tables.Create(ctx, db, names); err != nil {
		t.Fatalf("second Create: %v", err)
	}
	for _, tb := range schema.Tables() {
		out, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(names.Of(tb))})
		if err != nil {
			t.Fatal(err)
		}
		d := out.Table
		if d.TableStatus != types.TableStatusActive {
			t.Errorf("%s is %s", tb.Name, d.TableStatus)
		}
		if got := d.StreamSpecification != nil && aws.ToBool(d.StreamSpecification.StreamEnabled); got != tb.Stream {
			t.Errorf("%s stream enabled = %v, declared %v", tb.Name, got, tb.Stream)
		}
		if tb.Stream && d.StreamSpecification.StreamViewType != types.StreamViewTypeNewAndOldImages {
			t.Errorf("%s stream view = %s", tb.Name, d.StreamSpecification.StreamViewType)
		}
		if len(d.GlobalSecondaryIndexes) != len(tb.GlobalIndexes) || len(d.LocalSecondaryIndexes) != len(tb.LocalIndexes) {
			t.Errorf("%s indexes: %d global, %d local", tb.Name, len(d.GlobalSecondaryIndexes), len(d.LocalSecondaryIndexes))
		}
		if tb.TTLAttribute != "" {
			ttl, err := db.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(names.Of(tb))})
			if err != nil {
				t.Fatal(err)
			}
			if aws.ToString(ttl.TimeToLiveDescription.AttributeName) != tb.TTLAttribute {
				t.Errorf("%s TTL attribute = %v", tb.Name, aws.ToString(ttl.TimeToLiveDescription.AttributeName))
			}
		}
	}
}

func TestAnExistingTableWithOtherKeysIsReported(t *testing.T) {
	db, names, _ := testenv.DynamoDB(t)
	ctx := context.Background()
	if err := tables.Delete(ctx, db, names); err != nil {
		t.Fatal(err)
	}
	wrong := tables.Input(schema.Games, names.Of(schema.Games))
	wrong.KeySchema[0].AttributeName = aws.String("id")
	wrong.AttributeDefinitions = []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}}
	if _, err := db.CreateTable(ctx, wrong); err != nil {
		t.Fatal(err)
	}
	if err := tables.Create(ctx, db, names); !errors.Is(err, tables.ErrSchemaDrift) {
		t.Fatalf("Create over a drifted table: %v, want ErrSchemaDrift", err)
	}
}
