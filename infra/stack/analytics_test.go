package stack_test

import (
	"encoding/json"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"

	"github.com/rallyhq/rally/infra/stack"
	"github.com/rallyhq/rally/shared/analytics"
	"github.com/rallyhq/rally/shared/analytics/queries"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
)

// s3URL is the template expression of s3://<analytics bucket>/<suffix>.
func (s *synthesized) s3URL(suffix string) any {
	return map[string]any{"Fn::Join": []any{"", []any{"s3://", s.ref(s.stack.Analytics.Bucket.BucketName()), "/" + suffix}}}
}

func (s *synthesized) only(t *testing.T, typ string) (string, resource) {
	t.Helper()
	found := s.ofType(typ)
	if len(found) != 1 {
		t.Fatalf("%s: %d resources of type %s, want 1", *s.stack.StackName(), len(found), typ)
	}
	for id, r := range found {
		return id, r
	}
	return "", resource{}
}

func path(v any, keys ...string) any {
	for _, k := range keys {
		m, _ := v.(map[string]any)
		v = m[k]
	}
	return v
}

// The shipper is declared once per stream it reads; it is one Lambda with
// one mapping per stream, and Reactions keeps within two readers.
func TestAnalyticsShipperIsOneLambdaReadingThreeStreams(t *testing.T) {
	shipper := routes.AnalyticsShipper.Function
	for stage, s := range both() {
		fnID := s.functionID(shipper)
		n := 0
		for id := range s.ofType("AWS::Lambda::Function") {
			if strings.HasPrefix(id, "Functions"+routes.Camel(shipper)+"Function") {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%s: %d %s functions, want 1", stage, n, shipper)
		}
		streamOf := map[string]string{} // stream expression -> table name
		for _, tb := range schema.Tables() {
			if tb.Stream {
				streamOf[mustJSON(s.ref(s.stack.Data.Table(tb).TableStreamArn()))] = tb.Name
			}
		}
		var read []string
		readers := map[string][]string{}
		for _, m := range s.ofType("AWS::Lambda::EventSourceMapping") {
			table, isStream := streamOf[mustJSON(m.Properties["EventSourceArn"])]
			if !isStream {
				continue // a dead-letter queue feeding the archiver
			}
			fn := logicalID(m.Properties["FunctionName"])
			readers[table] = append(readers[table], fn)
			if fn == fnID {
				read = append(read, table)
			}
		}
		sort.Strings(read)
		if want := []string{"Activity", "Reactions", "ScoreEvents"}; !slices.Equal(read, want) {
			t.Errorf("%s: %s reads the streams %v, want %v", stage, shipper, read, want)
		}
		want := []string{s.functionID(routes.CounterProcessor.Function), fnID}
		got := readers[schema.Reactions.Name]
		sort.Strings(want)
		sort.Strings(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s: Reactions stream readers %v, want the counter processor and the shipper %v", stage, got, want)
		}
		for table, fns := range readers {
			if len(fns) > stack.MaxStreamReaders {
				t.Errorf("%s: %d readers on the %s stream", stage, len(fns), table)
			}
		}
	}
}

func TestAnalyticsBucketIsPrivateEncryptedTLSOnlyTieredAndRetained(t *testing.T) {
	for stage, s := range both() {
		bucket := logicalID(s.ref(s.stack.Analytics.Bucket.BucketName()))
		props := s.resources[bucket].Properties
		if alg := path(props["BucketEncryption"], "ServerSideEncryptionConfiguration"); !strings.Contains(mustJSON(alg), `"SSEAlgorithm":"AES256"`) &&
			!strings.Contains(mustJSON(alg), `"SSEAlgorithm":"aws:kms"`) {
			t.Errorf("%s: bucket encryption %s", stage, mustJSON(alg))
		}
		block := map[string]any{"BlockPublicAcls": true, "BlockPublicPolicy": true, "IgnorePublicAcls": true, "RestrictPublicBuckets": true}
		if got := props["PublicAccessBlockConfiguration"]; mustJSON(got) != mustJSON(block) {
			t.Errorf("%s: public access block %s, want all four on", stage, mustJSON(got))
		}
		if dest := path(props, "LoggingConfiguration", "DestinationBucketName"); logicalID(dest) != logicalID(s.ref(s.stack.Analytics.AccessLogs.BucketName())) {
			t.Errorf("%s: server access logs go to %v, want the access-log bucket", stage, dest)
		}
		rules := map[string]map[string]any{}
		for _, r := range path(props, "LifecycleConfiguration", "Rules").([]any) {
			rule := r.(map[string]any)
			prefix, _ := rule["Prefix"].(string)
			rules[prefix] = rule
		}
		transitions := []any{
			map[string]any{"StorageClass": "STANDARD_IA", "TransitionInDays": 30.0},
			map[string]any{"StorageClass": "GLACIER_IR", "TransitionInDays": 180.0},
		}
		if got := rules[stack.EventsPrefix]["Transitions"]; mustJSON(got) != mustJSON(transitions) {
			t.Errorf("%s: events transitions %s, want %s", stage, mustJSON(got), mustJSON(transitions))
		}
		if rules[stack.EventsPrefix]["ExpirationInDays"] != nil {
			t.Errorf("%s: events expire; analytics history is kept", stage)
		}
		if got := rules[stack.ResultsPrefix]["ExpirationInDays"]; got != 30.0 {
			t.Errorf("%s: Athena results expire after %v days, want 30", stage, got)
		}
		check(t, stage+": TLS-only bucket policy", func() {
			s.template.HasResourceProperties(jsii.String("AWS::S3::BucketPolicy"), like(
				"Bucket", s.ref(s.stack.Analytics.Bucket.BucketName()),
				"PolicyDocument", like("Statement", assertions.Match_ArrayWith(&[]any{like(
					"Effect", "Deny",
					"Action", "s3:*",
					"Principal", map[string]any{"AWS": "*"},
					"Condition", map[string]any{"Bool": map[string]any{"aws:SecureTransport": "false"}},
				)})),
			))
		})
		// The history is kept even when a dev stack is deleted.
		for _, id := range []string{bucket, logicalID(s.ref(s.stack.Analytics.AccessLogs.BucketName()))} {
			if p := s.resources[id].DeletionPolicy; p != "Retain" {
				t.Errorf("%s: bucket %s deletion policy %q, want Retain", stage, id, p)
			}
		}
	}
}

func TestGlueTableIsTheEventSchemaWithPartitionProjection(t *testing.T) {
	for stage, s := range both() {
		_, db := s.only(t, "AWS::Glue::Database")
		if name := path(db.Properties, "DatabaseInput", "Name"); name != stack.GlueDatabaseName(strings.TrimPrefix(*s.stack.StackName(), "Rally-")) {
			t.Errorf("%s: database %v", stage, name)
		}
		_, table := s.only(t, "AWS::Glue::Table")
		if got := logicalID(table.Properties["DatabaseName"]); got != logicalID(s.ref(s.stack.Analytics.Database.Ref())) {
			t.Errorf("%s: table in database %v", stage, got)
		}
		in := table.Properties["TableInput"].(map[string]any)
		if in["Name"] != analytics.Table || in["TableType"] != "EXTERNAL_TABLE" {
			t.Errorf("%s: table %v (%v), want external %s", stage, in["Name"], in["TableType"], analytics.Table)
		}
		asColumns := func(cs []analytics.Column) any {
			var out []any
			for _, c := range cs {
				out = append(out, map[string]any{"Name": c.Name, "Type": c.Type, "Comment": c.Comment})
			}
			return out
		}
		sd := in["StorageDescriptor"].(map[string]any)
		if got, want := mustJSON(sd["Columns"]), mustJSON(asColumns(analytics.Columns())); got != want {
			t.Errorf("%s: columns\n %s\nwant analytics.Columns()\n %s", stage, got, want)
		}
		if got, want := mustJSON(in["PartitionKeys"]), mustJSON(asColumns(analytics.PartitionKeys())); got != want {
			t.Errorf("%s: partition keys %s, want %s", stage, got, want)
		}
		if mustJSON(sd["Location"]) != mustJSON(s.s3URL(analytics.Prefix)) {
			t.Errorf("%s: location %s, want s3://bucket/%s", stage, mustJSON(sd["Location"]), analytics.Prefix)
		}
		if lib := path(sd, "SerdeInfo", "SerializationLibrary"); lib != "org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe" ||
			!strings.Contains(mustJSON(sd["InputFormat"]), "Parquet") {
			t.Errorf("%s: SerDe %v, input %v, want Parquet", stage, lib, sd["InputFormat"])
		}
		params := in["Parameters"].(map[string]any)
		want := map[string]any{
			"projection.enabled":           "true",
			"projection.event_type.type":   "enum",
			"projection.event_type.values": strings.Join(analytics.EventTypes(), ","),
			"projection.dt.type":           "date",
			"projection.dt.format":         "yyyy-MM-dd",
			"projection.dt.range":          stack.EventsSince + ",NOW",
			"projection.hour.type":         "integer",
			"projection.hour.range":        "0,23",
			"projection.hour.digits":       "2",
			"storage.location.template":    s.s3URL(analytics.Prefix + "event_type=${event_type}/dt=${dt}/hour=${hour}/"),
		}
		for k, v := range want {
			if mustJSON(params[k]) != mustJSON(v) {
				t.Errorf("%s: table parameter %s = %s, want %s", stage, k, mustJSON(params[k]), mustJSON(v))
			}
		}
		// Every partition key is projected, and the location template
		// names each of them.
		for _, k := range analytics.PartitionKeys() {
			if params["projection."+k.Name+".type"] == nil || !strings.Contains(mustJSON(params["storage.location.template"]), "${"+k.Name+"}") {
				t.Errorf("%s: partition key %s is not projected", stage, k.Name)
			}
		}
	}
}

var partitionKeyFromQuery = regexp.MustCompile(`!\{partitionKeyFromQuery:([a-z_]+)\}`)

func TestFirehoseWritesDynamicallyPartitionedParquet(t *testing.T) {
	for stage, s := range both() {
		check(t, stage+": delivery stream", func() {
			s.template.HasResourceProperties(jsii.String("AWS::KinesisFirehose::DeliveryStream"), like(
				"DeliveryStreamType", "DirectPut",
				"DeliveryStreamEncryptionConfigurationInput", like("KeyType", assertions.Match_AnyValue()),
				"ExtendedS3DestinationConfiguration", like(
					"BucketARN", s.ref(s.stack.Analytics.Bucket.BucketArn()),
					"Prefix", "events/event_type=!{partitionKeyFromQuery:event_type}/dt=!{partitionKeyFromQuery:dt}/hour=!{partitionKeyFromQuery:hour}/",
					"ErrorOutputPrefix", "errors/!{firehose:error-output-type}/dt=!{timestamp:yyyy-MM-dd}/",
					"CompressionFormat", "UNCOMPRESSED",
					"DynamicPartitioningConfiguration", like("Enabled", true),
					"ProcessingConfiguration", like("Enabled", true, "Processors", assertions.Match_ArrayWith(&[]any{
						// The shipper packs events into records; Firehose splits
						// them back, then reads each event's partition.
						map[string]any{
							"Type":       "RecordDeAggregation",
							"Parameters": []any{map[string]any{"ParameterName": "SubRecordType", "ParameterValue": "JSON"}},
						},
						like(
							"Type", "MetadataExtraction",
							"Parameters", assertions.Match_ArrayWith(&[]any{
								map[string]any{"ParameterName": "MetadataExtractionQuery", "ParameterValue": "{event_type: .event_type, dt: .dt, hour: .hour}"},
								map[string]any{"ParameterName": "JsonParsingEngine", "ParameterValue": "JQ-1.6"},
							}),
						),
					})),
					"DataFormatConversionConfiguration", like(
						"Enabled", true,
						"InputFormatConfiguration", map[string]any{"Deserializer": map[string]any{"HiveJsonSerDe": map[string]any{"TimestampFormats": []any{"millis"}}}},
						"OutputFormatConfiguration", map[string]any{"Serializer": map[string]any{"ParquetSerDe": like("Compression", "SNAPPY")}},
						"SchemaConfiguration", like(
							"DatabaseName", s.ref(s.stack.Analytics.Database.Ref()),
							"TableName", s.ref(s.stack.Analytics.Table.Ref()),
							"VersionId", "LATEST",
						),
					),
					"CloudWatchLoggingOptions", like("Enabled", true, "LogGroupName", s.ref(s.stack.Analytics.StreamLogs.LogGroupName())),
				),
			))
		})
		_, stream := s.only(t, "AWS::KinesisFirehose::DeliveryStream")
		dest := stream.Properties["ExtendedS3DestinationConfiguration"].(map[string]any)
		size, _ := path(dest, "BufferingHints", "SizeInMBs").(float64)
		interval, _ := path(dest, "BufferingHints", "IntervalInSeconds").(float64)
		if size < 64 || interval < 300 || interval > 900 {
			t.Errorf("%s: buffering %v MiB / %v s; dynamic partitioning needs >= 64 MiB, and 300-900 s", stage, size, interval)
		}
		// The S3 prefix partitions by exactly the table's partition keys,
		// in order.
		var keys, want []string
		for _, m := range partitionKeyFromQuery.FindAllStringSubmatch(dest["Prefix"].(string), -1) {
			keys = append(keys, m[1])
		}
		for _, k := range analytics.PartitionKeys() {
			want = append(want, k.Name)
		}
		if !slices.Equal(keys, want) {
			t.Errorf("%s: prefix partitions by %v, want the table's partition keys %v", stage, keys, want)
		}
	}
}

// deliveryStatements returns the statements of the Firehose role, inline
// and attached.
func deliveryStatements(t *testing.T, s *synthesized) (string, []statement) {
	t.Helper()
	_, stream := s.only(t, "AWS::KinesisFirehose::DeliveryStream")
	role := logicalID(path(stream.Properties, "ExtendedS3DestinationConfiguration", "RoleARN"))
	var out []statement
	policies, _ := s.resources[role].Properties["Policies"].([]any)
	for _, p := range policies {
		var doc struct{ Statement []statement }
		mustUnmarshal(mustJSON(path(p, "PolicyDocument")), &doc)
		out = append(out, doc.Statement...)
	}
	for _, p := range s.ofType("AWS::IAM::Policy") {
		for _, r := range resourceList(p.Properties["Roles"]) {
			if logicalID(r) == role {
				var doc struct{ Statement []statement }
				mustUnmarshal(mustJSON(p.Properties["PolicyDocument"]), &doc)
				out = append(out, doc.Statement...)
			}
		}
	}
	return role, out
}

func TestFirehoseRoleWritesOnlyTheEventsBucketAndReadsOnlyTheTable(t *testing.T) {
	for stage, s := range both() {
		role, statements := deliveryStatements(t, s)
		trust := mustJSON(s.resources[role].Properties["AssumeRolePolicyDocument"])
		if !strings.Contains(trust, `"Service":"firehose.amazonaws.com"`) || !strings.Contains(trust, `"sts:ExternalId"`) {
			t.Errorf("%s: delivery role trust %s, want Firehose of this account only", stage, trust)
		}
		bucket := logicalID(s.ref(s.stack.Analytics.Bucket.BucketName()))
		if len(statements) == 0 {
			t.Fatalf("%s: the delivery role has no permissions", stage)
		}
		for _, st := range statements {
			for _, res := range resourceList(st.Resource) {
				r := mustJSON(res)
				if res == "*" {
					t.Errorf("%s: delivery role granted %v on every resource", stage, st.Action)
				}
				for _, a := range strs(st.Action) {
					service, action, _ := strings.Cut(a, ":")
					switch service {
					case "s3":
						if !strings.Contains(r, `"`+bucket+`"`) {
							t.Errorf("%s: delivery role granted %s on %s, not the analytics bucket", stage, a, r)
						}
						if strings.Contains(r, "/") && !strings.Contains(r, `"/events/*"`) && !strings.Contains(r, `"/errors/*"`) {
							t.Errorf("%s: delivery role may %s objects %s, outside events/ and errors/", stage, a, r)
						}
					case "glue":
						if !strings.HasPrefix(action, "GetTable") {
							t.Errorf("%s: delivery role granted %s", stage, a)
						}
						if !strings.Contains(r, ":catalog") && !strings.Contains(r, ":database/") && !strings.Contains(r, ":table/") {
							t.Errorf("%s: delivery role granted %s on %s", stage, a, r)
						}
					case "logs":
						if action != "PutLogEvents" || !strings.Contains(r, ":log-stream:") {
							t.Errorf("%s: delivery role granted %s on %s", stage, a, r)
						}
					default:
						t.Errorf("%s: delivery role granted %s", stage, a)
					}
				}
			}
		}
	}
}

func TestAthenaWorkgroupEnforcesResultLocationEncryptionAndScanCutoff(t *testing.T) {
	for stage, s := range both() {
		check(t, stage+": workgroup", func() {
			s.template.HasResourceProperties(jsii.String("AWS::Athena::WorkGroup"), like(
				"Name", stack.WorkGroupName(strings.TrimPrefix(*s.stack.StackName(), "Rally-")),
				"WorkGroupConfiguration", like(
					"EnforceWorkGroupConfiguration", true,
					"BytesScannedCutoffPerQuery", stack.AthenaScanCutoffBytes,
					"ResultConfiguration", like(
						"OutputLocation", s.s3URL(stack.ResultsPrefix),
						"EncryptionConfiguration", map[string]any{"EncryptionOption": "SSE_S3"},
					),
				),
			))
		})
	}
}

func TestNamedQueriesAreTheSharedQueriesVerbatim(t *testing.T) {
	all := queries.All()
	if len(all) == 0 {
		t.Fatal("shared/analytics/queries declares no query")
	}
	for stage, s := range both() {
		got := map[string]map[string]any{}
		for _, q := range s.ofType("AWS::Athena::NamedQuery") {
			got[q.Properties["Name"].(string)] = q.Properties
		}
		if len(got) != len(all) {
			t.Errorf("%s: %d named queries, want %d", stage, len(got), len(all))
		}
		db := stack.GlueDatabaseName(strings.TrimPrefix(*s.stack.StackName(), "Rally-"))
		for _, q := range all {
			p, ok := got[q.Name]
			if !ok {
				t.Errorf("%s: no named query %s", stage, q.Name)
				continue
			}
			if p["QueryString"] != q.SQL || p["Description"] != q.Description || p["Database"] != db {
				t.Errorf("%s: named query %s = %q (%q, database %v), want the SQL of %s.sql verbatim",
					stage, q.Name, p["QueryString"], p["Description"], p["Database"], q.Name)
			}
			if mustJSON(p["WorkGroup"]) != mustJSON(s.ref(s.stack.Analytics.WorkGroup.Ref())) {
				t.Errorf("%s: named query %s in workgroup %v", stage, q.Name, p["WorkGroup"])
			}
		}
	}
}

// Functions that declare Uses.Analytics may put record batches on the
// delivery stream, and only that; no other function may touch Firehose.
func TestOnlyAnalyticsFunctionsMayPutRecordBatchesOnTheStream(t *testing.T) {
	for stage, s := range both() {
		stream := mustJSON(s.ref(s.stack.Analytics.Stream.AttrArn()))
		shippers := 0
		for _, fn := range s.declaredFunctions() {
			var granted []string
			for _, st := range statementsOf(s, fn.name) {
				for _, a := range strs(st.Action) {
					if !strings.HasPrefix(a, "firehose:") {
						continue
					}
					for _, res := range resourceList(st.Resource) {
						granted = append(granted, a+" on "+mustJSON(res))
					}
				}
			}
			if !fn.uses.Analytics {
				if len(granted) > 0 {
					t.Errorf("%s/%s: granted %v, but does not use analytics", stage, fn.name, granted)
				}
				continue
			}
			shippers++
			if want := []string{"firehose:PutRecordBatch on " + stream}; !slices.Equal(granted, want) {
				t.Errorf("%s/%s: granted %v, want %v", stage, fn.name, granted, want)
			}
		}
		if shippers == 0 {
			t.Errorf("%s: no function uses analytics", stage)
		}
	}
}

func TestAnalyticsOutputsAndAlarms(t *testing.T) {
	for stage, s := range both() {
		for _, o := range []string{"AnalyticsBucket", "AnalyticsDatabase", "AnalyticsWorkgroup", "AnalyticsDeliveryStream"} {
			if _, ok := s.outputs[o]; !ok {
				t.Errorf("%s: no output %s", stage, o)
			}
		}
		dims := []any{map[string]any{"Name": "DeliveryStreamName", "Value": s.ref(s.stack.Analytics.StreamName)}}
		for _, metric := range []string{"DeliveryToS3.DataFreshness", "FailedConversion.Records"} {
			check(t, stage+": alarm on "+metric, func() {
				s.template.HasResourceProperties(jsii.String("AWS::CloudWatch::Alarm"), like(
					"Namespace", "AWS/Firehose", "MetricName", metric, "Dimensions", dims,
				))
			})
		}
	}
}

func mustUnmarshal(raw string, v any) {
	if err := json.Unmarshal([]byte(raw), v); err != nil {
		panic(err)
	}
}
