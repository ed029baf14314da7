package stack

import (
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsathena"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsglue"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awskinesisfirehose"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awss3"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"

	"github.com/rallyhq/rally/shared/analytics"
	"github.com/rallyhq/rally/shared/analytics/queries"
	"github.com/rallyhq/rally/shared/routes"
)

// Where things live in the analytics bucket. EventsPrefix is the Glue
// table's location; Firehose writes failed records under ErrorsPrefix and
// Athena its results under ResultsPrefix.
const (
	EventsPrefix  = analytics.Prefix
	ErrorsPrefix  = "errors/"
	ResultsPrefix = "athena-results/"
)

// EventsSince is the first day the dt partition projection enumerates. A
// query that does not filter on dt makes Athena list every projected day
// (times every event type and hour) up to today, so the start is fixed
// near the first export rather than far in the past.
const EventsSince = "2026-11-01"

// Storage tiers of the events: analysts query the recent weeks; older
// partitions are read rarely but must stay instantly readable for
// year-on-year queries, so they go to Infrequent Access, then to Glacier
// Instant Retrieval, never to a tier that needs a restore. S3 does not
// transition objects under 128 KB (the minimum billed size of those
// tiers), so small files of rare event types simply stay in Standard.
const (
	eventsToInfrequentAccess = 30 * 24 * time.Hour
	eventsToGlacierInstant   = 180 * 24 * time.Hour
	// Athena results are re-creatable by re-running the query.
	resultsExpiry = 30 * 24 * time.Hour
	// Records Firehose could not partition or convert: conversion failures
	// raise an alarm within minutes, and a quarter is ample to fix the
	// shipper or the schema and replay them.
	errorsExpiry = 90 * 24 * time.Hour
	// Server access logs of the analytics bucket: a year of audit trail.
	accessLogExpiry = 365 * 24 * time.Hour
)

// Delivery tuning. Dynamic partitioning and record format conversion both
// need a buffer of at least 64 MiB. Each partition (event type, day, hour)
// buffers separately, so the longest interval makes fewer, larger Parquet
// files, which Athena scans faster and cheaper; analytics promises no
// freshness beyond "within the quarter hour".
const (
	FirehoseBufferMiB      = 128
	FirehoseBufferInterval = 900 * time.Second
	// partitioningRetry is how long Firehose retries a failed S3 write of a
	// partitioned batch before it goes to the error prefix.
	partitioningRetry = 300 * time.Second
)

// AthenaScanCutoffBytes stops any one query in the workgroup after 10 GB
// scanned: far more than the named queries read over months of Parquet
// events, so a query that would scan the whole history (a forgotten dt
// filter on a grown table) is cancelled rather than billed for it.
const AthenaScanCutoffBytes = 10 * 1024 * 1024 * 1024

// PartitionExtraction is the jq (1.6) query Firehose runs on every record
// to find its partition: the shipper puts event_type, dt (UTC date) and
// hour (UTC, 2 digits) on each record. They are partition keys, so the
// Parquet files do not repeat them.
const PartitionExtraction = "{event_type: .event_type, dt: .dt, hour: .hour}"

// Parquet via the Hive SerDe, as Firehose writes it and Athena reads it.
const (
	parquetSerDe        = "org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe"
	parquetInputFormat  = "org.apache.hadoop.hive.ql.io.parquet.MapredParquetInputFormat"
	parquetOutputFormat = "org.apache.hadoop.hive.ql.io.parquet.MapredParquetOutputFormat"
)

// AnalyticsProps configures the analytics export.
type AnalyticsProps struct {
	Stage        string
	LogRetention awslogs.RetentionDays
	// Protect retains the delivery log group; the buckets are always
	// retained (see NewAnalytics).
	Protect bool
}

// Analytics owns the export of domain events for analysts: the bucket the
// events land in, the Glue table that describes them, the Firehose stream
// that writes them as partitioned Parquet, and the Athena workgroup (with
// the named queries of shared/analytics/queries) that reads them.
type Analytics struct {
	constructs.Construct
	Bucket awss3.Bucket
	// AccessLogs receives the server access logs of Bucket.
	AccessLogs awss3.Bucket
	Database   awsglue.CfnDatabase
	Table      awsglue.CfnTable
	// DatabaseName is the Glue database (and Athena catalog database).
	DatabaseName string
	Stream       awskinesisfirehose.CfnDeliveryStream
	// StreamName is the delivery stream's name, as functions are given it.
	StreamName *string
	StreamLogs awslogs.LogGroup
	WorkGroup  awsathena.CfnWorkGroup
	// NamedQueries are by query name (queries.Query.Name).
	NamedQueries map[string]awsathena.CfnNamedQuery
}

// NewAnalytics creates the bucket, table, delivery stream and workgroup.
//
// Both buckets are retained whatever the stage: they hold the only copy of
// the exported history, CloudFormation cannot delete a bucket that still
// holds objects, and emptying it on delete would lose that history to a
// mistaken stack deletion.
func NewAnalytics(scope constructs.Construct, id string, props AnalyticsProps) *Analytics {
	a := &Analytics{
		Construct:    constructs.NewConstruct(scope, jsii.String(id)),
		DatabaseName: GlueDatabaseName(props.Stage),
		NamedQueries: map[string]awsathena.CfnNamedQuery{},
	}
	stack := awscdk.Stack_Of(a.Construct)
	a.newBuckets()
	a.newTable(stack)
	a.newStream(stack, props)
	a.newWorkGroup(stack, props.Stage)
	return a
}

// GlueDatabaseName is the Glue database of a stage: Glue and Athena names
// take lowercase letters, digits and underscores.
func GlueDatabaseName(stage string) string {
	return "rally_" + strings.ReplaceAll(stage, "-", "_")
}

// WorkGroupName is the Athena workgroup of a stage.
func WorkGroupName(stage string) string { return "rally-" + stage }

func (a *Analytics) newBuckets() {
	a.AccessLogs = awss3.NewBucket(a.Construct, jsii.String("AccessLogs"), &awss3.BucketProps{
		Encryption:        awss3.BucketEncryption_S3_MANAGED, // the only encryption a log target supports
		BlockPublicAccess: awss3.BlockPublicAccess_BLOCK_ALL(),
		EnforceSSL:        jsii.Bool(true),
		ObjectOwnership:   awss3.ObjectOwnership_BUCKET_OWNER_ENFORCED,
		RemovalPolicy:     awscdk.RemovalPolicy_RETAIN,
		LifecycleRules: &[]*awss3.LifecycleRule{{
			Id: jsii.String("expire-access-logs"), Expiration: days(accessLogExpiry),
		}},
	})

	a.Bucket = awss3.NewBucket(a.Construct, jsii.String("Events"), &awss3.BucketProps{
		Encryption:             awss3.BucketEncryption_S3_MANAGED,
		BlockPublicAccess:      awss3.BlockPublicAccess_BLOCK_ALL(),
		EnforceSSL:             jsii.Bool(true),
		ObjectOwnership:        awss3.ObjectOwnership_BUCKET_OWNER_ENFORCED,
		RemovalPolicy:          awscdk.RemovalPolicy_RETAIN,
		ServerAccessLogsBucket: a.AccessLogs,
		ServerAccessLogsPrefix: jsii.String("events-bucket/"),
		LifecycleRules: &[]*awss3.LifecycleRule{{
			Id:     jsii.String("tier-events"),
			Prefix: jsii.String(EventsPrefix),
			Transitions: &[]*awss3.Transition{
				{StorageClass: awss3.StorageClass_INFREQUENT_ACCESS(), TransitionAfter: days(eventsToInfrequentAccess)},
				{StorageClass: awss3.StorageClass_GLACIER_INSTANT_RETRIEVAL(), TransitionAfter: days(eventsToGlacierInstant)},
			},
		}, {
			Id: jsii.String("expire-athena-results"), Prefix: jsii.String(ResultsPrefix), Expiration: days(resultsExpiry),
		}, {
			Id: jsii.String("expire-delivery-errors"), Prefix: jsii.String(ErrorsPrefix), Expiration: days(errorsExpiry),
		}, {
			Id: jsii.String("abort-incomplete-uploads"), AbortIncompleteMultipartUploadAfter: awscdk.Duration_Days(jsii.Number(7)),
		}},
	})
}

// s3URL is s3://<bucket>/<prefix>.
func (a *Analytics) s3URL(prefix string) *string {
	return jsii.String("s3://" + *a.Bucket.BucketName() + "/" + prefix)
}

func (a *Analytics) newTable(stack awscdk.Stack) {
	a.Database = awsglue.NewCfnDatabase(a.Construct, jsii.String("Database"), &awsglue.CfnDatabaseProps{
		CatalogId: stack.Account(),
		DatabaseInput: &awsglue.CfnDatabase_DatabaseInputProperty{
			Name:        jsii.String(a.DatabaseName),
			Description: jsii.String("Rally analytics: every domain event, exported by Firehose"),
		},
	})
	columns := func(cs []analytics.Column) *[]*awsglue.CfnTable_ColumnProperty {
		out := make([]*awsglue.CfnTable_ColumnProperty, 0, len(cs))
		for _, c := range cs {
			out = append(out, &awsglue.CfnTable_ColumnProperty{Name: jsii.String(c.Name), Type: jsii.String(c.Type), Comment: jsii.String(c.Comment)})
		}
		return &out
	}
	a.Table = awsglue.NewCfnTable(a.Construct, jsii.String("Table"), &awsglue.CfnTableProps{
		CatalogId:    stack.Account(),
		DatabaseName: a.Database.Ref(),
		TableInput: &awsglue.CfnTable_TableInputProperty{
			Name:          jsii.String(analytics.Table),
			Description:   jsii.String(fmt.Sprintf("Rally domain events, schema version %d, as Parquet written by Firehose", analytics.SchemaVersion)),
			TableType:     jsii.String("EXTERNAL_TABLE"),
			PartitionKeys: columns(analytics.PartitionKeys()),
			Parameters:    a.tableParameters(),
			StorageDescriptor: &awsglue.CfnTable_StorageDescriptorProperty{
				Columns:      columns(analytics.Columns()),
				Location:     a.s3URL(EventsPrefix),
				InputFormat:  jsii.String(parquetInputFormat),
				OutputFormat: jsii.String(parquetOutputFormat),
				Compressed:   jsii.Bool(true),
				SerdeInfo: &awsglue.CfnTable_SerdeInfoProperty{
					SerializationLibrary: jsii.String(parquetSerDe),
					Parameters:           &map[string]any{"serialization.format": "1"},
				},
				StoredAsSubDirectories: jsii.Bool(false),
			},
		},
	})
}

// tableParameters turn on partition projection: Athena computes the
// partitions from these rules instead of reading them from the catalog, so
// nothing (no crawler, no MSCK REPAIR) has to register each new hour.
func (a *Analytics) tableParameters() *map[string]any {
	return &map[string]any{
		"classification":      "parquet",
		"EXTERNAL":            "TRUE",
		"parquet.compression": "SNAPPY",
		"projection.enabled":  "true",

		"projection.event_type.type":   "enum",
		"projection.event_type.values": strings.Join(analytics.EventTypes(), ","),

		"projection.dt.type":          "date",
		"projection.dt.format":        "yyyy-MM-dd",
		"projection.dt.range":         EventsSince + ",NOW",
		"projection.dt.interval":      "1",
		"projection.dt.interval.unit": "DAYS",

		"projection.hour.type":   "integer",
		"projection.hour.range":  "0,23",
		"projection.hour.digits": "2",

		"storage.location.template": *a.s3URL(EventsPrefix + "event_type=${event_type}/dt=${dt}/hour=${hour}/"),
	}
}

func (a *Analytics) newStream(stack awscdk.Stack, props AnalyticsProps) {
	a.StreamLogs = awslogs.NewLogGroup(a.Construct, jsii.String("DeliveryLogs"), &awslogs.LogGroupProps{
		Retention: props.LogRetention, RemovalPolicy: removal(props.Protect),
	})
	logStream := awslogs.NewLogStream(a.Construct, jsii.String("DeliveryLogStream"), &awslogs.LogStreamProps{
		LogGroup: a.StreamLogs, LogStreamName: jsii.String("S3Delivery"), RemovalPolicy: removal(props.Protect),
	})
	logStreamArn := stack.FormatArn(&awscdk.ArnComponents{
		Service: jsii.String("logs"), Resource: jsii.String("log-group"),
		ResourceName: jsii.String(*a.StreamLogs.LogGroupName() + ":log-stream:" + *logStream.LogStreamName()),
		ArnFormat:    awscdk.ArnFormat_COLON_RESOURCE_NAME,
	})
	glueArn := func(resource, name string) *string {
		c := &awscdk.ArnComponents{Service: jsii.String("glue"), Resource: jsii.String(resource)}
		if name != "" {
			c.ResourceName = jsii.String(name)
		}
		return stack.FormatArn(c)
	}

	// The permissions are inline, part of the role itself, so they exist
	// before the stream is created: Firehose checks them at creation.
	policy := awsiam.NewPolicyDocument(&awsiam.PolicyDocumentProps{Statements: &[]awsiam.PolicyStatement{
		awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Sid:       jsii.String("FindTheBucket"),
			Actions:   jsii.Strings("s3:GetBucketLocation", "s3:ListBucket", "s3:ListBucketMultipartUploads"),
			Resources: &[]*string{a.Bucket.BucketArn()},
		}),
		awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Sid:     jsii.String("WriteEventsAndErrors"),
			Actions: jsii.Strings("s3:PutObject", "s3:GetObject", "s3:AbortMultipartUpload"),
			Resources: &[]*string{
				a.Bucket.ArnForObjects(jsii.String(EventsPrefix + "*")),
				a.Bucket.ArnForObjects(jsii.String(ErrorsPrefix + "*")),
			},
		}),
		awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Sid:     jsii.String("ReadTheSchema"),
			Actions: jsii.Strings("glue:GetTable", "glue:GetTableVersion", "glue:GetTableVersions"),
			Resources: &[]*string{
				glueArn("catalog", ""),
				glueArn("database", a.DatabaseName),
				glueArn("table", a.DatabaseName+"/"+analytics.Table),
			},
		}),
		awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Sid:       jsii.String("LogDeliveryErrors"),
			Actions:   jsii.Strings("logs:PutLogEvents"),
			Resources: &[]*string{logStreamArn},
		}),
	}})
	role := awsiam.NewRole(a.Construct, jsii.String("DeliveryRole"), &awsiam.RoleProps{
		Description: jsii.String("Rally " + props.Stage + ": Firehose writes analytics events to S3"),
		// The external id keeps another account's delivery stream from
		// assuming this role (confused deputy).
		AssumedBy: awsiam.NewServicePrincipal(jsii.String("firehose.amazonaws.com"), &awsiam.ServicePrincipalOpts{
			Conditions: &map[string]any{"StringEquals": map[string]any{"sts:ExternalId": stack.Account()}},
		}),
		InlinePolicies: &map[string]awsiam.PolicyDocument{"Delivery": policy},
	})
	suppress(role, "IAM5", "Firehose names its objects itself (partition path plus a generated file name), "+
		"so it may write any object under the events and errors prefixes of the analytics bucket, and nowhere else.",
		&cdknag.RegexAppliesTo{Regex: jsii.String(`/^Resource::<[A-Za-z0-9]+\.Arn>\/(` +
			strings.TrimSuffix(EventsPrefix, "/") + `|` + strings.TrimSuffix(ErrorsPrefix, "/") + `)\/\*$/g`)})

	schema := &awskinesisfirehose.CfnDeliveryStream_SchemaConfigurationProperty{
		CatalogId:    stack.Account(),
		DatabaseName: a.Database.Ref(),
		TableName:    a.Table.Ref(),
		Region:       stack.Region(),
		RoleArn:      role.RoleArn(),
		VersionId:    jsii.String("LATEST"),
	}
	a.Stream = awskinesisfirehose.NewCfnDeliveryStream(a.Construct, jsii.String("DeliveryStream"), &awskinesisfirehose.CfnDeliveryStreamProps{
		DeliveryStreamType: jsii.String("DirectPut"),
		DeliveryStreamEncryptionConfigurationInput: &awskinesisfirehose.CfnDeliveryStream_DeliveryStreamEncryptionConfigurationInputProperty{
			KeyType: jsii.String("AWS_OWNED_CMK"),
		},
		ExtendedS3DestinationConfiguration: &awskinesisfirehose.CfnDeliveryStream_ExtendedS3DestinationConfigurationProperty{
			BucketArn: a.Bucket.BucketArn(),
			RoleArn:   role.RoleArn(),
			Prefix: jsii.String(EventsPrefix + "event_type=!{partitionKeyFromQuery:event_type}" +
				"/dt=!{partitionKeyFromQuery:dt}/hour=!{partitionKeyFromQuery:hour}/"),
			ErrorOutputPrefix: jsii.String(ErrorsPrefix + "!{firehose:error-output-type}/dt=!{timestamp:yyyy-MM-dd}/"),
			BufferingHints: &awskinesisfirehose.CfnDeliveryStream_BufferingHintsProperty{
				SizeInMBs:         jsii.Number(FirehoseBufferMiB),
				IntervalInSeconds: jsii.Number(FirehoseBufferInterval.Seconds()),
			},
			// Parquet compresses its pages itself (Snappy, below); Firehose
			// requires the stream-level compression off with conversion on.
			CompressionFormat: jsii.String("UNCOMPRESSED"),
			DynamicPartitioningConfiguration: &awskinesisfirehose.CfnDeliveryStream_DynamicPartitioningConfigurationProperty{
				Enabled:      jsii.Bool(true),
				RetryOptions: &awskinesisfirehose.CfnDeliveryStream_RetryOptionsProperty{DurationInSeconds: jsii.Number(partitioningRetry.Seconds())},
			},
			ProcessingConfiguration: &awskinesisfirehose.CfnDeliveryStream_ProcessingConfigurationProperty{
				Enabled: jsii.Bool(true),
				Processors: &[]*awskinesisfirehose.CfnDeliveryStream_ProcessorProperty{{
					// The shipper packs up to 500 events into a record, one
					// JSON object a line, since Firehose bills records rounded
					// up to 5 KB (see analytics.FirehoseSink); deaggregation
					// splits them back into events before partitioning and
					// conversion.
					Type: jsii.String("RecordDeAggregation"),
					Parameters: &[]*awskinesisfirehose.CfnDeliveryStream_ProcessorParameterProperty{
						{ParameterName: jsii.String("SubRecordType"), ParameterValue: jsii.String("JSON")},
					},
				}, {
					Type: jsii.String("MetadataExtraction"),
					Parameters: &[]*awskinesisfirehose.CfnDeliveryStream_ProcessorParameterProperty{
						{ParameterName: jsii.String("MetadataExtractionQuery"), ParameterValue: jsii.String(PartitionExtraction)},
						{ParameterName: jsii.String("JsonParsingEngine"), ParameterValue: jsii.String("JQ-1.6")},
					},
				}},
			},
			DataFormatConversionConfiguration: &awskinesisfirehose.CfnDeliveryStream_DataFormatConversionConfigurationProperty{
				Enabled: jsii.Bool(true),
				InputFormatConfiguration: &awskinesisfirehose.CfnDeliveryStream_InputFormatConfigurationProperty{
					Deserializer: &awskinesisfirehose.CfnDeliveryStream_DeserializerProperty{
						// occurred_at arrives as epoch milliseconds.
						HiveJsonSerDe: &awskinesisfirehose.CfnDeliveryStream_HiveJsonSerDeProperty{TimestampFormats: jsii.Strings("millis")},
					},
				},
				OutputFormatConfiguration: &awskinesisfirehose.CfnDeliveryStream_OutputFormatConfigurationProperty{
					Serializer: &awskinesisfirehose.CfnDeliveryStream_SerializerProperty{
						ParquetSerDe: &awskinesisfirehose.CfnDeliveryStream_ParquetSerDeProperty{Compression: jsii.String("SNAPPY")},
					},
				},
				SchemaConfiguration: schema,
			},
			CloudWatchLoggingOptions: &awskinesisfirehose.CfnDeliveryStream_CloudWatchLoggingOptionsProperty{
				Enabled:       jsii.Bool(true),
				LogGroupName:  a.StreamLogs.LogGroupName(),
				LogStreamName: logStream.LogStreamName(),
			},
			S3BackupMode: jsii.String("Disabled"),
		},
	})
	a.Stream.AddDependency(a.Table)
	a.StreamName = a.Stream.Ref()
}

func (a *Analytics) newWorkGroup(stack awscdk.Stack, stage string) {
	a.WorkGroup = awsathena.NewCfnWorkGroup(a.Construct, jsii.String("WorkGroup"), &awsathena.CfnWorkGroupProps{
		Name:        jsii.String(WorkGroupName(stage)),
		Description: jsii.String("Rally " + stage + " analytics: queries over " + analytics.Table),
		State:       jsii.String("ENABLED"),
		// The named queries and query history go with the workgroup when
		// the stack is deleted; the results stay in the bucket.
		RecursiveDeleteOption: jsii.Bool(true),
		WorkGroupConfiguration: &awsathena.CfnWorkGroup_WorkGroupConfigurationProperty{
			// Enforced: a client cannot send results elsewhere, unencrypted,
			// or lift the scan cutoff.
			EnforceWorkGroupConfiguration:   jsii.Bool(true),
			PublishCloudWatchMetricsEnabled: jsii.Bool(true),
			BytesScannedCutoffPerQuery:      jsii.Number(AthenaScanCutoffBytes),
			EngineVersion: &awsathena.CfnWorkGroup_EngineVersionProperty{
				SelectedEngineVersion: jsii.String("Athena engine version 3"),
			},
			ResultConfiguration: &awsathena.CfnWorkGroup_ResultConfigurationProperty{
				OutputLocation:      a.s3URL(ResultsPrefix),
				ExpectedBucketOwner: stack.Account(),
				EncryptionConfiguration: &awsathena.CfnWorkGroup_EncryptionConfigurationProperty{
					EncryptionOption: jsii.String("SSE_S3"),
				},
			},
		},
	})
	for _, q := range queries.All() {
		nq := awsathena.NewCfnNamedQuery(a.Construct, jsii.String("Query"+routes.Camel(q.Name)), &awsathena.CfnNamedQueryProps{
			Name:        jsii.String(q.Name),
			Description: jsii.String(truncate(q.Description, 1024)),
			Database:    jsii.String(a.DatabaseName),
			QueryString: jsii.String(q.SQL),
			WorkGroup:   a.WorkGroup.Ref(),
		})
		nq.AddDependency(a.Table)
		a.NamedQueries[q.Name] = nq
	}
}

// GrantPutRecords lets grantee send batches to the delivery stream, and
// nothing else on it.
func (a *Analytics) GrantPutRecords(grantee awsiam.IGrantable) {
	grantee.GrantPrincipal().AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions:   jsii.Strings("firehose:PutRecordBatch"),
		Resources: &[]*string{a.Stream.AttrArn()},
	}))
}

func days(d time.Duration) awscdk.Duration {
	return awscdk.Duration_Days(jsii.Number(d.Hours() / 24))
}
