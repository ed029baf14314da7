package stack

import (
	"fmt"

	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/rallyhq/rally/shared/schema"
)

// DataProps configures the tables.
type DataProps struct {
	Tables  []schema.Table
	Protect bool
}

// Data owns the DynamoDB tables, one per schema declaration: on-demand,
// point-in-time recovery on unless declared NoBackup, streams and TTL where
// declared.
type Data struct {
	constructs.Construct
	tables map[string]awsdynamodb.Table
}

// NewData creates a table for every declaration in props.Tables.
func NewData(scope constructs.Construct, id string, props DataProps) *Data {
	d := &Data{Construct: constructs.NewConstruct(scope, jsii.String(id)), tables: map[string]awsdynamodb.Table{}}
	for _, t := range props.Tables {
		d.tables[t.Name] = newTable(d.Construct, t, props.Protect)
	}
	return d
}

// Table returns the table declared as t; it panics for an undeclared table,
// which New's validation rules out.
func (d *Data) Table(t schema.Table) awsdynamodb.Table {
	table, ok := d.tables[t.Name]
	if !ok {
		panic(fmt.Sprintf("stack: table %s is not declared", t.Name))
	}
	return table
}

func newTable(scope constructs.Construct, t schema.Table, protect bool) awsdynamodb.Table {
	props := &awsdynamodb.TableProps{
		PartitionKey: attribute(t.PartitionKey),
		BillingMode:  awsdynamodb.BillingMode_PAY_PER_REQUEST,
		// Off explicitly, not left out, for a table declared NoBackup: a
		// deployed table that had it loses it on the next deployment.
		PointInTimeRecoverySpecification: &awsdynamodb.PointInTimeRecoverySpecification{
			PointInTimeRecoveryEnabled: jsii.Bool(!t.NoBackup),
		},
		DeletionProtection: jsii.Bool(protect),
		RemovalPolicy:      removal(protect),
	}
	if t.SortKey != nil {
		props.SortKey = attribute(*t.SortKey)
	}
	if t.Stream {
		props.Stream = awsdynamodb.StreamViewType_NEW_AND_OLD_IMAGES
	}
	if t.TTLAttribute != "" {
		props.TimeToLiveAttribute = jsii.String(t.TTLAttribute)
	}
	table := awsdynamodb.NewTable(scope, jsii.String(t.Name), props)
	if t.NoBackup {
		suppress(table, "DDB3", "The table is declared NoBackup in shared/schema: what it deletes must stay deleted "+
			"("+t.Purpose+"), and a point-in-time restore would bring it back for 35 days.")
	}
	for _, ix := range t.LocalIndexes {
		table.AddLocalSecondaryIndex(&awsdynamodb.LocalSecondaryIndexProps{
			IndexName:        jsii.String(ix.Name),
			SortKey:          attribute(*ix.SortKey),
			ProjectionType:   projection(ix.Projection),
			NonKeyAttributes: nonKeyAttributes(ix),
		})
	}
	for _, ix := range t.GlobalIndexes {
		gsi := &awsdynamodb.GlobalSecondaryIndexProps{
			IndexName:        jsii.String(ix.Name),
			PartitionKey:     attribute(ix.PartitionKey),
			ProjectionType:   projection(ix.Projection),
			NonKeyAttributes: nonKeyAttributes(ix),
		}
		if ix.SortKey != nil {
			gsi.SortKey = attribute(*ix.SortKey)
		}
		table.AddGlobalSecondaryIndex(gsi)
	}
	return table
}

func attribute(k schema.Key) *awsdynamodb.Attribute {
	typ := awsdynamodb.AttributeType_STRING
	if k.Type == schema.Number {
		typ = awsdynamodb.AttributeType_NUMBER
	}
	return &awsdynamodb.Attribute{Name: jsii.String(k.Name), Type: typ}
}

func projection(p schema.Projection) awsdynamodb.ProjectionType {
	switch p {
	case schema.ProjectKeysOnly:
		return awsdynamodb.ProjectionType_KEYS_ONLY
	case schema.ProjectInclude:
		return awsdynamodb.ProjectionType_INCLUDE
	}
	return awsdynamodb.ProjectionType_ALL
}

func nonKeyAttributes(ix schema.Index) *[]*string {
	if ix.Projection != schema.ProjectInclude {
		return nil
	}
	return jsii.Strings(ix.NonKeyAttributes...)
}
