// Package tables creates and deletes Rally's DynamoDB tables from their one
// declaration in shared/schema, for DynamoDB Local: the local stack and every
// integration test get exactly the keys, indexes, streams and TTL the CDK
// stack deploys.
package tables

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/rallyhq/rally/shared/schema"
)

// ErrSchemaDrift means a table already exists with keys or a stream setting
// that differ from its declaration (a persisted database from an older
// checkout).
var ErrSchemaDrift = errors.New("tables: existing table differs from its declaration")

// Create makes every table in schema.Tables() under its physical name in names,
// waits until each is ACTIVE, and turns on TTL where declared. Tables that
// already exist with the declared keys are left as they are.
func Create(ctx context.Context, db *dynamodb.Client, names schema.Names) error {
	return forEach(schema.Tables(), func(t schema.Table) error { return create(ctx, db, t, names.Of(t)) })
}

// Delete drops every table in schema.Tables(); missing tables are not an error.
func Delete(ctx context.Context, db *dynamodb.Client, names schema.Names) error {
	return forEach(schema.Tables(), func(t schema.Table) error {
		_, err := db.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(names.Of(t))})
		var nf *types.ResourceNotFoundException
		if err != nil && !errors.As(err, &nf) {
			return fmt.Errorf("tables: delete %s: %w", names.Of(t), err)
		}
		return nil
	})
}

func forEach(all []schema.Table, fn func(schema.Table) error) error {
	errs := make([]error, len(all))
	var wg sync.WaitGroup
	for i, t := range all {
		wg.Go(func() { errs[i] = fn(t) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

func create(ctx context.Context, db *dynamodb.Client, t schema.Table, name string) error {
	_, err := db.CreateTable(ctx, Input(t, name))
	var inUse *types.ResourceInUseException
	switch {
	case errors.As(err, &inUse):
		if err := checkExisting(ctx, db, t, name); err != nil {
			return err
		}
	case err != nil:
		return fmt.Errorf("tables: create %s: %w", name, err)
	}
	if err := waitActive(ctx, db, name); err != nil {
		return err
	}
	if t.TTLAttribute == "" {
		return nil
	}
	_, err = db.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName: aws.String(name),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{
			AttributeName: aws.String(t.TTLAttribute), Enabled: aws.Bool(true),
		},
	})
	// Enabling TTL twice is refused; an existing table may already have it.
	if err != nil && !isTTLAlreadyEnabled(err) {
		return fmt.Errorf("tables: enable ttl on %s: %w", name, err)
	}
	return nil
}

func isTTLAlreadyEnabled(err error) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && ae.ErrorCode() == "ValidationException"
}

// Input translates a table declaration into a CreateTable request.
func Input(t schema.Table, name string) *dynamodb.CreateTableInput {
	attrs := map[string]types.ScalarAttributeType{}
	keys := func(pk schema.Key, sk *schema.Key) []types.KeySchemaElement {
		attrs[pk.Name] = types.ScalarAttributeType(pk.Type)
		out := []types.KeySchemaElement{{AttributeName: aws.String(pk.Name), KeyType: types.KeyTypeHash}}
		if sk != nil {
			attrs[sk.Name] = types.ScalarAttributeType(sk.Type)
			out = append(out, types.KeySchemaElement{AttributeName: aws.String(sk.Name), KeyType: types.KeyTypeRange})
		}
		return out
	}
	in := &dynamodb.CreateTableInput{
		TableName:   aws.String(name),
		BillingMode: types.BillingModePayPerRequest,
		KeySchema:   keys(t.PartitionKey, t.SortKey),
	}
	for _, ix := range t.LocalIndexes {
		in.LocalSecondaryIndexes = append(in.LocalSecondaryIndexes, types.LocalSecondaryIndex{
			IndexName: aws.String(ix.Name), KeySchema: keys(ix.PartitionKey, ix.SortKey), Projection: projection(ix),
		})
	}
	for _, ix := range t.GlobalIndexes {
		in.GlobalSecondaryIndexes = append(in.GlobalSecondaryIndexes, types.GlobalSecondaryIndex{
			IndexName: aws.String(ix.Name), KeySchema: keys(ix.PartitionKey, ix.SortKey), Projection: projection(ix),
		})
	}
	names := make([]string, 0, len(attrs))
	for n := range attrs {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		in.AttributeDefinitions = append(in.AttributeDefinitions, types.AttributeDefinition{
			AttributeName: aws.String(n), AttributeType: attrs[n],
		})
	}
	if t.Stream {
		in.StreamSpecification = &types.StreamSpecification{
			StreamEnabled: aws.Bool(true), StreamViewType: types.StreamViewTypeNewAndOldImages,
		}
	}
	return in
}

func projection(ix schema.Index) *types.Projection {
	p := &types.Projection{ProjectionType: types.ProjectionType(ix.Projection)}
	if ix.Projection == schema.ProjectInclude {
		p.NonKeyAttributes = ix.NonKeyAttributes
	}
	return p
}

func checkExisting(ctx context.Context, db *dynamodb.Client, t schema.Table, name string) error {
	out, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)})
	if err != nil {
		return fmt.Errorf("tables: describe %s: %w", name, err)
	}
	want := Input(t, name)
	got := out.Table
	same := len(got.KeySchema) == len(want.KeySchema)
	for i := 0; same && i < len(want.KeySchema); i++ {
		same = aws.ToString(got.KeySchema[i].AttributeName) == aws.ToString(want.KeySchema[i].AttributeName) &&
			got.KeySchema[i].KeyType == want.KeySchema[i].KeyType
	}
	streaming := got.StreamSpecification != nil && aws.ToBool(got.StreamSpecification.StreamEnabled)
	if !same || streaming != t.Stream || len(got.GlobalSecondaryIndexes) != len(t.GlobalIndexes) ||
		len(got.LocalSecondaryIndexes) != len(t.LocalIndexes) {
		return fmt.Errorf("%w: %s (delete it, or the persisted database, and start again)", ErrSchemaDrift, name)
	}
	return nil
}

func waitActive(ctx context.Context, db *dynamodb.Client, name string) error {
	delay := 10 * time.Millisecond
	for {
		out, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)})
		if err != nil {
			return fmt.Errorf("tables: describe %s: %w", name, err)
		}
		if out.Table.TableStatus == types.TableStatusActive && indexesActive(out.Table) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("tables: %s not ACTIVE: %w", name, ctx.Err())
		case <-time.After(delay):
		}
		delay = min(2*delay, 500*time.Millisecond)
	}
}

func indexesActive(t *types.TableDescription) bool {
	for _, ix := range t.GlobalSecondaryIndexes {
		if ix.IndexStatus != types.IndexStatusActive {
			return false
		}
	}
	return true
}
