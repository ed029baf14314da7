package stack_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/rallyhq/rally/infra/stack"

	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"

	"github.com/rallyhq/rally/shared/api"
	"github.com/rallyhq/rally/shared/deadletters"
	"github.com/rallyhq/rally/shared/obs"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
	"github.com/rallyhq/rally/shared/streams"
)

func declaredTables() []schema.Table { return schema.Tables() }

// fnSpec is what the tests need from the declarations of one function: a
// route, or every processor declaration (one per stream) that names it.
type fnSpec struct {
	name    string
	uses    routes.Uses
	sources []schema.Table
	// mappings counts the processor declarations: one event source
	// mapping each.
	mappings int
}

// declaredFunctions merges the declarations by function, in order.
func (s *synthesized) declaredFunctions() []fnSpec {
	var out []fnSpec
	index := map[string]int{}
	for _, r := range s.routes {
		// A function serving an endpoint for players and for services is
		// declared once per route.
		if _, ok := index[r.Function]; !ok {
			index[r.Function] = len(out)
			out = append(out, fnSpec{name: r.Function, uses: r.Uses})
		}
	}
	for _, p := range s.processors {
		i, ok := index[p.Function]
		if !ok {
			i = len(out)
			index[p.Function] = i
			out = append(out, fnSpec{name: p.Function})
		}
		f := &out[i]
		f.uses.Calls = routes.MergeCalls(append(f.uses.Calls, p.Uses.Calls...))
		f.uses.Redis = f.uses.Redis || p.Uses.Redis
		f.uses.Secrets = routes.MergeSecrets(f.uses.Secrets, p.Uses.Secrets)
		f.uses.Analytics = f.uses.Analytics || p.Uses.Analytics
		f.sources = append(f.sources, p.Source)
		f.mappings++
	}
	for _, c := range s.consumers {
		// A consumer reads the streams it names itself, with no mapping.
		out = append(out, fnSpec{name: c.Function, uses: c.Uses, sources: c.Uses.Streams})
	}
	return out
}

// processorFunctions are the distinct functions of the processor
// declarations, each with the declaration that named it first.
func (s *synthesized) processorFunctions() []routes.Processor {
	var out []routes.Processor
	for _, p := range s.processors {
		if !slices.ContainsFunc(out, func(q routes.Processor) bool { return q.Function == p.Function }) {
			out = append(out, p)
		}
	}
	return out
}

func (f fnSpec) reads(table string) bool {
	return slices.ContainsFunc(f.sources, func(t schema.Table) bool { return t.Name == table })
}

// A function that reads several streams is declared once per stream and
// is still one Lambda.
func TestOneLambdaPerDeclaredFunctionOnArm64AL2023WithActiveTracing(t *testing.T) {
	for stage, s := range both() {
		want := len(s.declaredFunctions())
		check(t, stage+": function count", func() {
			s.template.ResourceCountIs(jsii.String("AWS::Lambda::Function"), jsii.Number(float64(want)))
		})
		check(t, stage+": every function's runtime", func() {
			s.template.AllResourcesProperties(jsii.String("AWS::Lambda::Function"), like(
				"Architectures", []any{"arm64"},
				"Runtime", "provided.al2023",
				"Handler", "bootstrap",
				"TracingConfig", map[string]any{"Mode": "Active"},
				"LoggingConfig", like("LogGroup", assertions.Match_AnyValue()),
			))
		})
		for _, fn := range s.declaredFunctions() {
			if _, ok := s.resources[s.functionID(fn.name)]; !ok {
				t.Errorf("%s: no AWS::Lambda::Function for %s", stage, fn.name)
			}
		}
	}
}

func TestFunctionEnvironmentFollowsUses(t *testing.T) {
	for stage, s := range both() {
		for _, fn := range s.declaredFunctions() {
			env := environment(s, fn.name)
			if env["RALLY_STAGE"] != strings.TrimPrefix(*s.stack.StackName(), "Rally-") {
				t.Errorf("%s/%s: RALLY_STAGE=%v", stage, fn.name, env["RALLY_STAGE"])
			}
			if _, has := env["RALLY_SERVICE_ROLES"]; has != s.servesServices(fn.name) {
				t.Errorf("%s/%s: RALLY_SERVICE_ROLES set=%v, serves a service route=%v", stage, fn.name, has, s.servesServices(fn.name))
			}
			for _, sec := range routes.Secrets() {
				arn, has := env[sec.ARNVar]
				if want := sec == routes.LogKey || slices.Contains(fn.uses.Secrets, sec); has != want {
					t.Errorf("%s/%s: %s set=%v, reads the key that %s=%v", stage, fn.name, sec.ARNVar, has, sec.Purpose, want)
				}
				if ref := s.ref(s.stack.Functions.Secret(sec).SecretArn()); has && mustJSON(arn) != mustJSON(ref) {
					t.Errorf("%s/%s: %s=%s, want the ARN of its secret %s", stage, fn.name, sec.ARNVar, mustJSON(arn), mustJSON(ref))
				}
			}
			if env["RALLY_FUNCTION"] != fn.name {
				t.Errorf("%s/%s: RALLY_FUNCTION=%v, want its declared name", stage, fn.name, env["RALLY_FUNCTION"])
			}
			var gotTables, wantTables []string
			for k := range env {
				if strings.HasPrefix(k, "RALLY_TABLE_") {
					gotTables = append(gotTables, k)
				}
			}
			// Its source tables too: a record's table is known by its ARN.
			for _, tb := range append(fn.uses.Tables(), fn.sources...) {
				if !slices.Contains(wantTables, tb.EnvVar()) {
					wantTables = append(wantTables, tb.EnvVar())
				}
			}
			sort.Strings(gotTables)
			sort.Strings(wantTables)
			if !slices.Equal(gotTables, wantTables) {
				t.Errorf("%s/%s: table variables %v, want %v", stage, fn.name, gotTables, wantTables)
			}
			url, hasRedis := env["RALLY_REDIS_URL"]
			if hasRedis != fn.uses.Redis {
				t.Errorf("%s/%s: RALLY_REDIS_URL set=%v, uses Redis=%v", stage, fn.name, hasRedis, fn.uses.Redis)
			}
			if hasRedis {
				raw, _ := json.Marshal(url)
				if !strings.Contains(string(raw), `"rediss://"`) || env["RALLY_REDIS_CLUSTER"] != "true" {
					t.Errorf("%s/%s: cache must be reached over TLS in cluster mode: %s cluster=%v", stage, fn.name, raw, env["RALLY_REDIS_CLUSTER"])
				}
			}
			stream, has := env["RALLY_FIREHOSE_STREAM"]
			if has != fn.uses.Analytics {
				t.Errorf("%s/%s: RALLY_FIREHOSE_STREAM set=%v, uses Analytics=%v", stage, fn.name, has, fn.uses.Analytics)
			}
			if want := s.ref(s.stack.Analytics.StreamName); has && mustJSON(stream) != mustJSON(want) {
				t.Errorf("%s/%s: RALLY_FIREHOSE_STREAM=%s, want the delivery stream %s", stage, fn.name, mustJSON(stream), mustJSON(want))
			}
		}
	}
}

// No function's environment holds a key: anyone allowed
// lambda:GetFunctionConfiguration reads it. A function is given each
// secret it reads by ARN (a Ref to the secret) and reads the key at start;
// no variable carries a key, a dynamic reference that CloudFormation would
// resolve into the environment, or any other attribute of a secret.
func TestNoFunctionEnvironmentHoldsAKey(t *testing.T) {
	for stage, s := range both() {
		secrets := map[string]bool{}
		for id := range s.ofType("AWS::SecretsManager::Secret") {
			secrets[id] = true
		}
		if len(secrets) != len(routes.Secrets()) {
			t.Errorf("%s: %d secrets, want one per declared key (%d)", stage, len(secrets), len(routes.Secrets()))
		}
		for id, fn := range s.ofType("AWS::Lambda::Function") {
			env, _ := fn.Properties["Environment"].(map[string]any)
			vars, _ := env["Variables"].(map[string]any)
			for name, v := range vars {
				where := fmt.Sprintf("%s/%s: %s", stage, id, name)
				raw := mustJSON(v)
				if strings.Contains(raw, "resolve:secretsmanager") || strings.Contains(raw, "SecretString") {
					t.Errorf("%s=%s resolves a secret's value into the environment", where, raw)
				}
				for _, sec := range routes.Secrets() {
					if name == sec.KeyVar {
						t.Errorf("%s holds the key that %s itself", where, sec.Purpose)
					}
				}
				for secret := range secrets {
					if strings.Contains(raw, `"`+secret+`"`) && raw != mustJSON(map[string]any{"Ref": secret}) {
						t.Errorf("%s=%s uses secret %s otherwise than by its ARN", where, raw, secret)
					}
				}
			}
		}
	}
}

func environment(s *synthesized, fn string) map[string]any {
	props := s.resources[s.functionID(fn)].Properties
	env, _ := props["Environment"].(map[string]any)
	vars, _ := env["Variables"].(map[string]any)
	return vars
}

// routeFor finds the API route whose key is r.Key().
func routeFor(t *testing.T, s *synthesized, r routes.Route) map[string]any {
	t.Helper()
	for _, res := range s.ofType("AWS::ApiGatewayV2::Route") {
		if res.Properties["RouteKey"] == r.Key() {
			return res.Properties
		}
	}
	t.Fatalf("no API route %s", r.Key())
	return nil
}

func TestEveryRouteHasItsOwnFunctionAndAuthorizer(t *testing.T) {
	for stage, s := range both() {
		check(t, stage+": route count", func() {
			s.template.ResourceCountIs(jsii.String("AWS::ApiGatewayV2::Route"), jsii.Number(float64(len(s.routes))))
		})
		integrations := s.ofType("AWS::ApiGatewayV2::Integration")
		authorizers := s.ofType("AWS::ApiGatewayV2::Authorizer")
		for _, r := range s.routes {
			props := routeFor(t, s, r)
			switch r.Auth {
			case routes.Player:
				auth := authorizers[logicalID(props["AuthorizerId"])]
				if props["AuthorizationType"] != "JWT" || auth.Properties["AuthorizerType"] != "JWT" {
					t.Errorf("%s: player route %s: authorization %v via %v, want a JWT authorizer",
						stage, r.Key(), props["AuthorizationType"], auth.Properties["AuthorizerType"])
				}
			case routes.Service:
				if props["AuthorizationType"] != "AWS_IAM" || props["AuthorizerId"] != nil {
					t.Errorf("%s: service route %s: authorization %v, want AWS_IAM", stage, r.Key(), props["AuthorizationType"])
				}
			}
			// Target is "integrations/<IntegrationId>"; its URI names the function.
			raw, _ := json.Marshal(props["Target"])
			var target string
			for id := range integrations {
				if strings.Contains(string(raw), `"`+id+`"`) {
					target = id
				}
			}
			uri, _ := json.Marshal(integrations[target].Properties["IntegrationUri"])
			if !strings.Contains(string(uri), `"`+s.functionID(r.Function)+`"`) {
				t.Errorf("%s: route %s integrates %s, want function %s", stage, r.Key(), uri, r.Function)
			}
		}
	}
}

func TestPlayerTokensComeFromTheUserPoolOrTheConfiguredIssuer(t *testing.T) {
	check(t, "dev creates a user pool", func() {
		dev.template.ResourceCountIs(jsii.String("AWS::Cognito::UserPool"), jsii.Number(1))
	})
	check(t, "dev authorizer trusts the pool and its client", func() {
		dev.template.HasResourceProperties(jsii.String("AWS::ApiGatewayV2::Authorizer"), like(
			"AuthorizerType", "JWT",
			"JwtConfiguration", like(
				"Audience", []any{dev.ref(dev.stack.API.UserPoolClient.UserPoolClientId())},
				"Issuer", like("Fn::Join", assertions.Match_ArrayWith(&[]any{
					assertions.Match_ArrayWith(&[]any{dev.ref(dev.stack.API.UserPool.UserPoolId())}),
				})),
			),
		))
	})
	check(t, "prod has no user pool", func() {
		prod.template.ResourceCountIs(jsii.String("AWS::Cognito::UserPool"), jsii.Number(0))
	})
	check(t, "prod authorizer trusts the external issuer", func() {
		prod.template.HasResourceProperties(jsii.String("AWS::ApiGatewayV2::Authorizer"), like(
			"AuthorizerType", "JWT",
			"IdentitySource", []any{"$request.header.Authorization"},
			"JwtConfiguration", map[string]any{"Issuer": prodIssuer, "Audience": []any{prodAudience}},
		))
	})
	if _, ok := prod.outputs["UserPoolId"]; ok {
		t.Error("prod outputs a user pool id, but uses an external issuer")
	}
	if _, ok := dev.outputs["UserPoolClientId"]; !ok {
		t.Error("dev does not output the user pool client id game clients need")
	}
}

func TestApiLogsEveryRequest(t *testing.T) {
	for stage, s := range both() {
		check(t, stage+": default stage with access logs", func() {
			s.template.HasResourceProperties(jsii.String("AWS::ApiGatewayV2::Stage"), like(
				"StageName", "$default",
				"AutoDeploy", true,
				"AccessLogSettings", like(
					"DestinationArn", assertions.Match_AnyValue(),
					"Format", assertions.Match_StringLikeRegexp(jsii.String(`\$context\.requestId`)),
				),
			))
		})
	}
}

func TestStreamProcessorsAreBoundedAndDeadLettered(t *testing.T) {
	for stage, s := range both() {
		var mappings, fromQueues []resource
		for _, m := range s.ofType("AWS::Lambda::EventSourceMapping") {
			if _, ok := m.Properties["StartingPosition"]; ok {
				mappings = append(mappings, m)
			} else {
				fromQueues = append(fromQueues, m)
			}
		}
		if len(mappings) != len(s.processors) {
			t.Errorf("%s: %d stream event source mappings, want %d (one per processor)", stage, len(mappings), len(s.processors))
		}
		// Every dead-letter queue feeds the archiver, which archives each
		// parked batch with its records while the stream holds them.
		archiver := s.functionID(routes.DlqArchiver.Function)
		queues := map[string]bool{}
		for _, m := range fromQueues {
			if logicalID(m.Properties["FunctionName"]) != archiver || m.Properties["FunctionResponseTypes"] == nil {
				t.Errorf("%s: a queue mapping %v does not feed the archiver reporting item failures", stage, m.Properties)
			}
			queues[mustJSON(m.Properties["EventSourceArn"])] = true
		}
		for _, p := range s.processorFunctions() {
			if q := mustJSON(s.ref(s.stack.Processors.DeadLetterQueue(p.Function).QueueArn())); !queues[q] {
				t.Errorf("%s: the dead-letter queue of %s feeds no archiver", stage, p.Function)
			}
		}
		perStream := map[string]int{}
		for _, m := range mappings {
			raw, _ := json.Marshal(m.Properties["EventSourceArn"])
			perStream[string(raw)]++
		}
		for stream, n := range perStream {
			if n > 2 {
				t.Errorf("%s: %d readers on stream %s, at most 2", stage, n, stream)
			}
		}
		for _, p := range s.processors {
			dlq := s.stack.Processors.DeadLetterQueue(p.Function)
			check(t, stage+": mapping of "+p.Function, func() {
				s.template.HasResourceProperties(jsii.String("AWS::Lambda::EventSourceMapping"), like(
					"FunctionName", s.ref(s.stack.Functions.Get(p.Function).FunctionName()),
					"EventSourceArn", s.ref(s.stack.Data.Table(p.Source).TableStreamArn()),
					"StartingPosition", "TRIM_HORIZON",
					"BatchSize", p.BatchSize,
					"MaximumBatchingWindowInSeconds", p.BatchWindow.Seconds(),
					"BisectBatchOnFunctionError", true,
					"MaximumRetryAttempts", p.MaxRetries,
					"MaximumRecordAgeInSeconds", p.MaxRecordAge.Seconds(),
					"FunctionResponseTypes", []any{"ReportBatchItemFailures"},
					"DestinationConfig", map[string]any{"OnFailure": map[string]any{"Destination": s.ref(dlq.QueueArn())}},
				))
			})
			check(t, stage+": dead-letter queue of "+p.Function, func() {
				s.template.HasResource(jsii.String("AWS::SQS::Queue"), like(
					"Properties", like("SqsManagedSseEnabled", true, "MessageRetentionPeriod", 14*24*3600),
				))
			})
		}
		// One queue per processor function, whatever number of streams it
		// reads: the redrive tool finds it by the function's output.
		fns := s.processorFunctions()
		check(t, stage+": one dead-letter queue per processor function", func() {
			s.template.ResourceCountIs(jsii.String("AWS::SQS::Queue"), jsii.Number(float64(len(fns))))
		})
		for _, p := range fns {
			if _, ok := s.outputs["Dlq"+routes.Camel(p.Function)]; !ok {
				t.Errorf("%s: no output with the dead-letter queue URL of %s", stage, p.Function)
			}
		}
		for _, fn := range s.declaredFunctions() {
			if fn.mappings == 0 {
				continue
			}
			id := s.functionID(fn.name)
			n := 0
			for _, m := range mappings {
				if logicalID(m.Properties["FunctionName"]) == id {
					n++
				}
			}
			if n != fn.mappings {
				t.Errorf("%s: %s has %d event source mappings, want %d (one per declared stream)", stage, fn.name, n, fn.mappings)
			}
		}
	}
}

// A processor with a Tick is also invoked on a schedule with no records, so
// Redis repairs and snapshots happen even when nothing is written.
func TestProcessorsWithATickRunOnASchedule(t *testing.T) {
	for stage, s := range both() {
		ticks := 0
		for _, p := range s.processorFunctions() {
			if p.Tick == 0 {
				continue
			}
			ticks++
			fn := s.stack.Functions.Get(p.Function)
			check(t, stage+": schedule of "+p.Function, func() {
				s.template.HasResourceProperties(jsii.String("AWS::Events::Rule"), like(
					"ScheduleExpression", fmt.Sprintf("rate(%d minute%s)", int(p.Tick.Minutes()), plural(int(p.Tick.Minutes()))),
					"State", "ENABLED",
					"Targets", assertions.Match_ArrayWith(&[]any{like(
						"Arn", s.ref(fn.FunctionArn()),
						"Input", `{"Records":[]}`,
					)}),
				))
			})
		}
		if n := len(s.ofType("AWS::Events::Rule")); n != ticks {
			t.Errorf("%s: %d schedules, want %d", stage, n, ticks)
		}
	}
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func TestTablesFollowTheSchema(t *testing.T) {
	for stage, s := range both() {
		check(t, stage+": table count", func() {
			s.template.ResourceCountIs(jsii.String("AWS::DynamoDB::Table"), jsii.Number(float64(len(schema.Tables()))))
		})
		for id, name := range s.tableIDs() {
			decl, _ := schema.ByName(name)
			props := s.resources[id].Properties
			pitr, _ := props["PointInTimeRecoverySpecification"].(map[string]any)
			if pitr["PointInTimeRecoveryEnabled"] != !decl.NoBackup {
				t.Errorf("%s/%s: point-in-time recovery %v, declared NoBackup=%v", stage, name, pitr["PointInTimeRecoveryEnabled"], decl.NoBackup)
			}
			if props["BillingMode"] != "PAY_PER_REQUEST" {
				t.Errorf("%s/%s: billing %v, want on-demand", stage, name, props["BillingMode"])
			}
			stream, _ := props["StreamSpecification"].(map[string]any)
			if got := stream["StreamViewType"]; (got == "NEW_AND_OLD_IMAGES") != decl.Stream || (!decl.Stream && got != nil) {
				t.Errorf("%s/%s: stream %v, declared stream=%v", stage, name, got, decl.Stream)
			}
			ttl, _ := props["TimeToLiveSpecification"].(map[string]any)
			if decl.TTLAttribute != "" && (ttl["AttributeName"] != decl.TTLAttribute || ttl["Enabled"] != true) {
				t.Errorf("%s/%s: TTL %v, want on %s", stage, name, ttl, decl.TTLAttribute)
			}
			if decl.TTLAttribute == "" && ttl != nil {
				t.Errorf("%s/%s: TTL %v, but none is declared", stage, name, ttl)
			}
			keys, _ := json.Marshal(props["KeySchema"])
			if !strings.Contains(string(keys), `{"AttributeName":"`+decl.PartitionKey.Name+`","KeyType":"HASH"}`) {
				t.Errorf("%s/%s: key schema %s, want partition key %s", stage, name, keys, decl.PartitionKey.Name)
			}
			if got, want := indexNames(props["GlobalSecondaryIndexes"]), declaredIndexNames(decl.GlobalIndexes); !slices.Equal(got, want) {
				t.Errorf("%s/%s: global indexes %v, want %v", stage, name, got, want)
			}
			if got, want := indexNames(props["LocalSecondaryIndexes"]), declaredIndexNames(decl.LocalIndexes); !slices.Equal(got, want) {
				t.Errorf("%s/%s: local indexes %v, want %v", stage, name, got, want)
			}
			protected := stage == "prod"
			if (props["DeletionProtectionEnabled"] == true) != protected {
				t.Errorf("%s/%s: deletion protection %v, want %v", stage, name, props["DeletionProtectionEnabled"], protected)
			}
			if want := map[bool]string{true: "Retain", false: "Delete"}[protected]; s.resources[id].DeletionPolicy != want {
				t.Errorf("%s/%s: deletion policy %q, want %q", stage, name, s.resources[id].DeletionPolicy, want)
			}
			if _, ok := s.outputs["Table"+name]; !ok {
				t.Errorf("%s: no output with the name of table %s", stage, name)
			}
		}
	}
}

// A user's analytics secret, once deleted by their erasure, cannot be
// restored (crypto-shredding is final): the AnalyticsSecrets table has
// point-in-time recovery off, explicitly, while every other table keeps it.
func TestAnalyticsSecretsCannotBeRestoredWhileTheOtherTablesCan(t *testing.T) {
	for stage, s := range both() {
		for id, name := range s.tableIDs() {
			pitr, _ := s.resources[id].Properties["PointInTimeRecoverySpecification"].(map[string]any)
			want := name != schema.AnalyticsSecrets.Name
			if got, ok := pitr["PointInTimeRecoveryEnabled"].(bool); !ok || got != want {
				t.Errorf("%s/%s: point-in-time recovery %v, want %v", stage, name, pitr["PointInTimeRecoveryEnabled"], want)
			}
		}
	}
}

func indexNames(v any) []string {
	list, _ := v.([]any)
	var names []string
	for _, ix := range list {
		m, _ := ix.(map[string]any)
		names = append(names, m["IndexName"].(string))
	}
	sort.Strings(names)
	return names
}

func declaredIndexNames(ixs []schema.Index) []string {
	var names []string
	for _, ix := range ixs {
		names = append(names, ix.Name)
	}
	sort.Strings(names)
	return names
}

func TestServerlessCacheAdmitsOnlyRallyFunctions(t *testing.T) {
	for stage, s := range both() {
		engine := map[string]string{"dev": "valkey", "prod": "redis"}[stage]
		functionSG := s.ref(s.stack.Cache.FunctionSecurityGroup.SecurityGroupId())
		caches := s.ofType("AWS::ElastiCache::ServerlessCache")
		if len(caches) != 1 {
			t.Fatalf("%s: %d serverless caches, want 1", stage, len(caches))
		}
		var cacheSGs []any
		for _, c := range caches {
			if c.Properties["Engine"] != engine {
				t.Errorf("%s: cache engine %v, want %s", stage, c.Properties["Engine"], engine)
			}
			if subnets, _ := c.Properties["SubnetIds"].([]any); len(subnets) != 2 {
				t.Errorf("%s: cache in %d subnets, want 2 (two AZs)", stage, len(subnets))
			}
			cacheSGs, _ = c.Properties["SecurityGroupIds"].([]any)
		}
		if len(cacheSGs) != 1 {
			t.Fatalf("%s: cache has security groups %v, want one", stage, cacheSGs)
		}
		cacheSG := logicalID(cacheSGs[0])
		if inline := s.resources[cacheSG].Properties["SecurityGroupIngress"]; inline != nil {
			t.Errorf("%s: cache security group has inline ingress %v", stage, inline)
		}
		var admitted []any
		for _, rule := range s.ofType("AWS::EC2::SecurityGroupIngress") {
			if logicalID(rule.Properties["GroupId"]) == cacheSG {
				admitted = append(admitted, rule.Properties["SourceSecurityGroupId"])
				if rule.Properties["FromPort"] != 6379.0 || rule.Properties["ToPort"] != 6380.0 {
					t.Errorf("%s: cache ingress on ports %v-%v, want 6379-6380", stage, rule.Properties["FromPort"], rule.Properties["ToPort"])
				}
			}
		}
		if raw, _ := json.Marshal(admitted); len(admitted) != 1 || logicalID(admitted[0]) != logicalID(functionSG) {
			t.Errorf("%s: cache admits %s, want only the functions' security group", stage, raw)
		}
		check(t, stage+": isolated network", func() {
			s.template.ResourceCountIs(jsii.String("AWS::EC2::NatGateway"), jsii.Number(0))
			s.template.ResourceCountIs(jsii.String("AWS::EC2::InternetGateway"), jsii.Number(0))
			s.template.ResourceCountIs(jsii.String("AWS::EC2::Subnet"), jsii.Number(2))
			s.template.AllResourcesProperties(jsii.String("AWS::EC2::Subnet"), like("MapPublicIpOnLaunch", false))
		})
		check(t, stage+": DynamoDB gateway endpoint", func() {
			s.template.HasResourceProperties(jsii.String("AWS::EC2::VPCEndpoint"), like(
				"VpcEndpointType", "Gateway",
				"ServiceName", like("Fn::Join", assertions.Match_ArrayWith(&[]any{
					assertions.Match_ArrayWith(&[]any{".dynamodb"}),
				})),
			))
		})
		if _, ok := s.outputs["CacheEndpoint"]; !ok {
			t.Errorf("%s: no cache endpoint output", stage)
		}
	}
}

// Every function reads at least the log key's secret at start, so the
// functions in the VPC (isolated subnets) reach Secrets Manager through an
// interface endpoint that admits their security group.
func TestVpcFunctionsReachTheirSecretsThroughAnEndpoint(t *testing.T) {
	for stage, s := range both() {
		inVPC := 0
		for _, fn := range s.declaredFunctions() {
			if fn.uses.Redis {
				inVPC++
			}
		}
		if inVPC == 0 {
			t.Fatalf("%s: no function runs in the VPC", stage)
		}
		check(t, stage+": the Secrets Manager endpoint", func() {
			s.template.HasResourceProperties(jsii.String("AWS::EC2::VPCEndpoint"), like(
				"VpcEndpointType", "Interface",
				"PrivateDnsEnabled", true,
				"ServiceName", like("Fn::Join", assertions.Match_ArrayWith(&[]any{
					assertions.Match_ArrayWith(&[]any{".secretsmanager"}),
				})),
			))
			s.template.HasResourceProperties(jsii.String("AWS::EC2::SecurityGroupIngress"), like(
				"SourceSecurityGroupId", s.ref(s.stack.Cache.FunctionSecurityGroup.SecurityGroupId()),
				"FromPort", 443, "ToPort", 443,
			))
		})
	}
}

func TestOnlyRedisUsersRunInTheVpc(t *testing.T) {
	for stage, s := range both() {
		functionSG := logicalID(s.ref(s.stack.Cache.FunctionSecurityGroup.SecurityGroupId()))
		for _, fn := range s.declaredFunctions() {
			vpc, inVPC := s.resources[s.functionID(fn.name)].Properties["VpcConfig"].(map[string]any)
			if inVPC != fn.uses.Redis {
				t.Errorf("%s/%s: in VPC=%v, uses Redis=%v", stage, fn.name, inVPC, fn.uses.Redis)
				continue
			}
			if inVPC {
				sgs, _ := vpc["SecurityGroupIds"].([]any)
				if len(sgs) != 1 || logicalID(sgs[0]) != functionSG {
					t.Errorf("%s/%s: security groups %v, want the functions' group", stage, fn.name, sgs)
				}
			}
		}
	}
}

// wildcardActions are the only actions that may be granted on "*": none of
// them supports resource-level permissions.
var wildcardActions = []string{
	"xray:PutTraceSegments", "xray:PutTelemetryRecords",
	"ec2:CreateNetworkInterface", "ec2:DescribeNetworkInterfaces", "ec2:DescribeSubnets",
	"ec2:DeleteNetworkInterface", "ec2:AssignPrivateIpAddresses", "ec2:UnassignPrivateIpAddresses",
	"dynamodb:ListStreams",
}

var dynamoWrites = []string{"dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:BatchWriteItem"}

type statement struct {
	Effect    string
	Action    any
	Resource  any
	Condition map[string]map[string]any
}

func strs(v any) []string {
	switch v := v.(type) {
	case string:
		return []string{v}
	case []any:
		var out []string
		for _, x := range v {
			if s, ok := x.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

func resourceList(v any) []any {
	if list, ok := v.([]any); ok {
		return list
	}
	return []any{v}
}

// statementsOf returns every statement of every policy attached to fn's role.
func statementsOf(s *synthesized, fn string) []statement {
	role := s.roleID(fn)
	var out []statement
	for _, p := range s.ofType("AWS::IAM::Policy") {
		attached := false
		for _, r := range resourceList(p.Properties["Roles"]) {
			attached = attached || logicalID(r) == role
		}
		if !attached {
			continue
		}
		raw, _ := json.Marshal(p.Properties["PolicyDocument"])
		var doc struct{ Statement []statement }
		_ = json.Unmarshal(raw, &doc)
		out = append(out, doc.Statement...)
	}
	return out
}

// tablesIn returns the declared tables a resource expression refers to
// (table ARN, index ARN or stream ARN).
func tablesIn(expr any, tables map[string]string) []string {
	raw, _ := json.Marshal(expr)
	var names []string
	for id, name := range tables {
		if strings.Contains(string(raw), `"`+id+`"`) {
			names = append(names, name)
		}
	}
	return names
}

// indexIn is the index a resource expression names (<table ARN>/index/<name>),
// "" for the table itself.
var indexIn = regexp.MustCompile(`/index/([^"]*)"`)

// Each function is granted exactly the actions it declares on each table
// and index: on the table itself, or on the one index a Query or Scan
// reads (never <table>/index/*), and, for a call limited to some
// attributes, only those and the key. Nothing else of a table, no
// managed policy, and of the secrets only reading those it reads: the log
// key's, and those it declares.
func TestEachFunctionIsGrantedOnlyItsDeclaredTables(t *testing.T) {
	for stage, s := range both() {
		tables := s.tableIDs()
		secretIDs := map[string]routes.Secret{}
		for _, sec := range routes.Secrets() {
			secretIDs[logicalID(s.ref(s.stack.Functions.Secret(sec).SecretArn()))] = sec
		}
		for _, fn := range s.declaredFunctions() {
			where := stage + "/" + fn.name
			if managed := s.resources[s.roleID(fn.name)].Properties["ManagedPolicyArns"]; managed != nil {
				t.Errorf("%s: role has managed policies %v", where, managed)
			}
			want := map[string]routes.Action{}
			narrow := map[string]routes.Call{}
			for _, c := range routes.MergeCalls(fn.uses.Calls) {
				if len(c.Attributes) > 0 {
					narrow[c.Resource()] = c
					continue
				}
				want[c.Resource()] |= c.Actions
			}
			got := map[string]routes.Action{}
			secretsGranted := map[routes.Secret]bool{}
			for _, st := range statementsOf(s, fn.name) {
				actions := strs(st.Action)
				for _, res := range resourceList(st.Resource) {
					if res == "*" {
						for _, a := range actions {
							if !slices.Contains(wildcardActions, a) {
								t.Errorf("%s: %s granted on every resource", where, a)
							}
						}
						continue
					}
					for id, sec := range secretIDs {
						if logicalID(res) != id && !strings.Contains(mustJSON(res), `"`+id+`"`) {
							continue
						}
						secretsGranted[sec] = true
						for _, a := range actions {
							if a != "secretsmanager:GetSecretValue" && a != "secretsmanager:DescribeSecret" {
								t.Errorf("%s: granted %s on the secret of the key that %s", where, a, sec.Purpose)
							}
						}
					}
					for _, name := range tablesIn(res, tables) {
						if strings.Contains(mustJSON(res), "StreamArn") {
							if !fn.reads(name) {
								t.Errorf("%s: granted the %s stream, which it does not process", where, name)
							}
							continue
						}
						resource := name
						if m := indexIn.FindStringSubmatch(mustJSON(res)); m != nil {
							resource = name + "/index/" + m[1]
						}
						if c, ok := narrow[resource]; ok && st.Condition != nil {
							checkCall(t, where, c, actions, st)
							continue
						}
						for _, a := range actions {
							if routes.ActionOf(a) == 0 {
								t.Errorf("%s: granted %s on %s, which no declaration names", where, a, resource)
							}
							got[resource] |= routes.ActionOf(a)
						}
					}
				}
			}
			for _, resource := range slices.Sorted(maps.Keys(got)) {
				if strings.HasSuffix(resource, "/index/*") {
					t.Errorf("%s: granted every index of %s", where, strings.TrimSuffix(resource, "/index/*"))
				}
			}
			for resource := range maps.Keys(mergeKeys(got, want)) {
				if got[resource] != want[resource] {
					t.Errorf("%s: granted %v on %s, declared %v", where, got[resource], resource, want[resource])
				}
			}
			for _, sec := range routes.Secrets() {
				if want := sec == routes.LogKey || slices.Contains(fn.uses.Secrets, sec); secretsGranted[sec] != want {
					t.Errorf("%s: can read the key that %s=%v, reads it=%v", where, sec.Purpose, secretsGranted[sec], want)
				}
			}
		}
	}
}

func mergeKeys(a, b map[string]routes.Action) map[string]routes.Action {
	out := maps.Clone(a)
	maps.Copy(out, b)
	return out
}

func appendMissing(list []string, s string) []string {
	if slices.Contains(list, s) {
		return list
	}
	return append(list, s)
}

// checkCall asserts an attribute-limited call's statement allows exactly
// its actions, on the table alone, and only its attributes (and the key).
func checkCall(t *testing.T, where string, c routes.Call, actions []string, st statement) {
	t.Helper()
	want := c.Actions.IAM()
	slices.Sort(want)
	got := slices.Sorted(slices.Values(actions))
	if !slices.Equal(got, want) {
		t.Errorf("%s: granted %v on %s, declared %v", where, got, c.Table.Name, want)
	}
	if strings.Contains(mustJSON(st.Resource), "/index/") || strings.Contains(mustJSON(st.Resource), "StreamArn") {
		t.Errorf("%s: a narrow grant on %s reaches %s", where, c.Table.Name, mustJSON(st.Resource))
	}
	attrs := strs(st.Condition["ForAllValues:StringEquals"]["dynamodb:Attributes"])
	wantAttrs := append([]string{c.Table.PartitionKey.Name}, c.Attributes...)
	slices.Sort(attrs)
	slices.Sort(wantAttrs)
	if !slices.Equal(attrs, wantAttrs) {
		t.Errorf("%s: may touch attributes %v of %s, want %v", where, attrs, c.Table.Name, wantAttrs)
	}
	if st.Condition["StringEqualsIfExists"]["dynamodb:Select"] != "SPECIFIC_ATTRIBUTES" {
		t.Errorf("%s: reads of %s are not limited to projected attributes: %v", where, c.Table.Name, st.Condition)
	}
}

func mustJSON(v any) string {
	raw, _ := json.Marshal(v)
	return string(raw)
}

func TestAlarmsCoverErrorsHandledFailuresDeadLettersAndStreamLag(t *testing.T) {
	for stage, s := range both() {
		topic := s.ref(s.stack.Observability.Topic.TopicArn())
		check(t, stage+": every alarm notifies the topic", func() {
			s.template.AllResourcesProperties(jsii.String("AWS::CloudWatch::Alarm"), like(
				"AlarmActions", []any{topic},
				"TreatMissingData", "notBreaching",
			))
		})
		check(t, stage+": topic encrypted", func() {
			s.template.HasResourceProperties(jsii.String("AWS::SNS::Topic"), like("KmsMasterKeyId", assertions.Match_AnyValue()))
		})
		// Invocation errors are watched by feature, at most ten functions an
		// alarm: each function's errors are in exactly one.
		as := s.alarms(t)
		for _, fn := range s.declaredFunctions() {
			var found []alarm
			for _, a := range findMath(as, "FILL(m0, 0)") {
				if a.Threshold == 1 && a.uses("AWS/Lambda", "Errors", map[string]any{"FunctionName": s.ref(s.stack.Functions.Get(fn.name).FunctionName())}) {
					found = append(found, a)
				}
			}
			if len(found) != 1 {
				t.Errorf("%s: %d alarms on the errors of %s, want 1", stage, len(found), fn.name)
			}
		}
		// Handled failures are no Lambda errors: Rally's own metrics are.
		isProcessor := map[string]bool{}
		for _, p := range s.processors {
			isProcessor[p.Function] = true
		}
		for _, p := range s.processorFunctions() {
			dims := []any{
				map[string]any{"Name": "Function", "Value": s.ref(s.stack.Functions.Get(routes.DlqArchiver.Function).FunctionName())},
				map[string]any{"Name": "Processor", "Value": p.Function},
			}
			for _, metric := range []string{deadletters.MetricArchived, deadletters.MetricLost} {
				check(t, stage+": "+metric+" alarm of "+p.Function, func() {
					s.template.HasResourceProperties(jsii.String("AWS::CloudWatch::Alarm"), like(
						"Namespace", obs.Namespace, "MetricName", metric, "Dimensions", dims, "Threshold", 1,
					))
				})
			}
		}
		for _, fn := range s.declaredFunctions() {
			if slices.ContainsFunc(s.consumers, func(c routes.Consumer) bool { return c.Function == fn.name }) {
				continue
			}
			dims := []any{map[string]any{"Name": "Function", "Value": s.ref(s.stack.Functions.Get(fn.name).FunctionName())}}
			metric, threshold := api.MetricServerErrors, float64(stack.ServerErrorsThreshold)
			if isProcessor[fn.name] {
				metric, threshold = streams.MetricBatchFailures, 1
			}
			check(t, stage+": handled-failure alarm of "+fn.name, func() {
				s.template.HasResourceProperties(jsii.String("AWS::CloudWatch::Alarm"), like(
					"Namespace", obs.Namespace, "MetricName", metric, "Dimensions", dims, "Statistic", "Sum", "Threshold", threshold,
				))
			})
		}
		for _, p := range s.processors {
			fnDims := []any{map[string]any{"Name": "FunctionName", "Value": s.ref(s.stack.Functions.Get(p.Function).FunctionName())}}
			check(t, stage+": iterator age alarm of "+p.Function, func() {
				s.template.HasResourceProperties(jsii.String("AWS::CloudWatch::Alarm"), like(
					"Namespace", "AWS/Lambda", "MetricName", "IteratorAge", "Dimensions", fnDims, "Statistic", "Maximum",
				))
			})
			queueDims := []any{map[string]any{"Name": "QueueName", "Value": s.ref(s.stack.Processors.DeadLetterQueue(p.Function).QueueName())}}
			check(t, stage+": dead-letter alarm of "+p.Function, func() {
				s.template.HasResourceProperties(jsii.String("AWS::CloudWatch::Alarm"), like(
					"Namespace", "AWS/SQS", "MetricName", "ApproximateNumberOfMessagesVisible", "Dimensions", queueDims,
					"ComparisonOperator", "GreaterThanOrEqualToThreshold", "Threshold", 1,
				))
			})
		}
	}
	check(t, "prod emails the on-call address", func() {
		prod.template.HasResourceProperties(jsii.String("AWS::SNS::Subscription"), like("Protocol", "email", "Endpoint", prodEmail))
	})
	check(t, "dev has no email subscription", func() {
		dev.template.ResourceCountIs(jsii.String("AWS::SNS::Subscription"), jsii.Number(0))
	})
}

// cdk-nag's AwsSolutions and Serverless packs find nothing unsuppressed in
// the stack or its nested stacks; every suppression says why in code.
func TestNagChecksPass(t *testing.T) {
	for stage, s := range both() {
		// A nested stack is no artifact of its own: its constructs'
		// findings are the parent's annotations.
		annotations := assertions.Annotations_FromStack(s.stack.Stack)
		for _, pack := range []string{"AwsSolutions", "Serverless"} {
			finding := assertions.Match_StringLikeRegexp(jsii.String(pack + "-.*"))
			for _, e := range append(*annotations.FindError(jsii.String("*"), finding), *annotations.FindWarning(jsii.String("*"), finding)...) {
				t.Errorf("%s: %s: %v", stage, *e.Id, e.Entry.Data)
			}
			// The suppressed findings prove the checks ran over this stack.
			ignored := annotations.FindInfo(jsii.String("*"), assertions.Match_StringLikeRegexp(jsii.String(pack+"-.*was triggered but suppressed")))
			if len(*ignored) == 0 {
				t.Errorf("%s: no %s findings recorded at all: were the checks applied?", stage, pack)
			}
		}
	}
}

// Deleting a protected (prod) stack leaves its data behind; deleting any
// other stage cleans up after itself.
func TestProtectedStagesRetainTheirData(t *testing.T) {
	stateful := []string{"AWS::DynamoDB::Table", "AWS::SQS::Queue", "AWS::Logs::LogGroup", "AWS::SecretsManager::Secret", "AWS::KMS::Key"}
	for stage, policy := range map[string]string{"dev": "Delete", "prod": "Retain"} {
		s := both()[stage]
		for _, typ := range stateful {
			check(t, stage+": "+typ, func() {
				s.template.AllResources(jsii.String(typ), like("DeletionPolicy", policy))
			})
		}
	}
	check(t, "dev user pool", func() {
		dev.template.AllResources(jsii.String("AWS::Cognito::UserPool"), like("DeletionPolicy", "Delete"))
	})
}

// Only the redrive route may invoke functions, and only the stream
// processors; it and the dlq-archiver are told every processor's deployed
// name, so what they act on is named as it is declared.
func TestOnlyTheRedriveInvokesAndOnlyProcessors(t *testing.T) {
	for stage, s := range both() {
		processors := map[string]bool{}
		for _, p := range s.processorFunctions() {
			processors[s.functionID(p.Function)] = true
		}
		for _, fn := range s.declaredFunctions() {
			invoked := map[string]bool{}
			for _, st := range statementsOf(s, fn.name) {
				if !slices.Contains(strs(st.Action), "lambda:InvokeFunction") {
					continue
				}
				for _, res := range resourceList(st.Resource) {
					id := logicalID(res)
					if id == "" {
						// <function ARN>:* is a Fn::Join around the ARN.
						raw := mustJSON(res)
						for p := range processors {
							if strings.Contains(raw, `"`+p+`"`) {
								id = p
							}
						}
					}
					if !processors[id] {
						t.Errorf("%s: %s may invoke %s, which is no stream processor", stage, fn.name, mustJSON(res))
					}
					invoked[id] = true
				}
			}
			if fn.name == routes.RedriveDeadLetters.Function && len(invoked) != len(processors) {
				t.Errorf("%s: the redrive may invoke %d of the %d processors", stage, len(invoked), len(processors))
			}
			if fn.name != routes.RedriveDeadLetters.Function && len(invoked) > 0 {
				t.Errorf("%s: %s may invoke functions", stage, fn.name)
			}
		}
		for _, fn := range []string{routes.RedriveDeadLetters.Function, routes.DlqArchiver.Function} {
			env := s.resources[s.functionID(fn)].Properties["Environment"].(map[string]any)["Variables"].(map[string]any)
			for _, p := range s.processorFunctions() {
				if got := logicalID(env[routes.FunctionEnvVar(p.Function)]); got != s.functionID(p.Function) {
					t.Errorf("%s: %s is not told %s's deployed name (%v)", stage, fn, p.Function, env[routes.FunctionEnvVar(p.Function)])
				}
			}
		}
	}
}

// API Gateway caps the total a stage passes on before any Lambda runs: the
// defaults, or what the context gives.
func TestTheStageThrottlesEveryRouteBeforeAnyLambdaRuns(t *testing.T) {
	for stage, want := range map[string][2]float64{
		"dev":  {stack.DefaultThrottleRate, stack.DefaultThrottleBurst},
		"prod": {prodThrottleRate, prodThrottleBurst},
	} {
		s := both()[stage]
		check(t, stage+": stage throttling", func() {
			s.template.HasResourceProperties(jsii.String("AWS::ApiGatewayV2::Stage"), like(
				"StageName", stack.StageName,
				"DefaultRouteSettings", like("ThrottlingRateLimit", want[0], "ThrottlingBurstLimit", want[1]),
			))
		})
	}
}

// Browsers on the configured origins may call the API: API Gateway answers
// their preflights (no OPTIONS route, no authorizer) with the methods the
// routes use and the headers games send, and lets scripts read the budget
// headers. A stage without origins configures no CORS at all.
func TestWebOriginsGetCORSOnlyWhenConfigured(t *testing.T) {
	check(t, "dev: no CORS", func() {
		dev.template.HasResourceProperties(jsii.String("AWS::ApiGatewayV2::Api"), like(
			"ProtocolType", "HTTP", "CorsConfiguration", assertions.Match_Absent()))
	})
	methods := routes.Methods(prod.routes)
	check(t, "prod: CORS for its origins", func() {
		prod.template.HasResourceProperties(jsii.String("AWS::ApiGatewayV2::Api"), like(
			"CorsConfiguration", assertions.Match_ObjectEquals(obj(
				"AllowOrigins", prodOrigins,
				"AllowMethods", methods,
				"AllowHeaders", routes.CORSAllowHeaders,
				"ExposeHeaders", routes.CORSExposeHeaders,
				"AllowCredentials", false,
				"MaxAge", routes.CORSMaxAge.Seconds(),
			))))
	})
	for _, m := range []string{"GET", "POST", "PUT", "DELETE"} {
		if !slices.Contains(methods, m) {
			t.Errorf("preflights allow %v; the routes use %s", methods, m)
		}
	}
	for _, h := range []string{"Retry-After", "RateLimit-Remaining"} {
		if !slices.Contains(routes.CORSExposeHeaders, h) {
			t.Errorf("scripts cannot read %s: exposed %v", h, routes.CORSExposeHeaders)
		}
	}
	for id, r := range prod.ofType("AWS::ApiGatewayV2::Route") {
		if key, _ := r.Properties["RouteKey"].(string); strings.HasPrefix(key, "OPTIONS ") {
			t.Errorf("route %s (%s): API Gateway answers preflights itself, an OPTIONS route would need the authorizer", id, key)
		}
	}
}

// Every processor and queue consumer keeps concurrency of its own, so a
// flood of requests cannot starve them; routes share the rest. The
// declared reservations leave most of an account's default concurrency to
// the routes.
func TestProcessorsAndConsumersHaveReservedConcurrency(t *testing.T) {
	declared := map[string]int{}
	for _, p := range routes.Processors() {
		declared[p.Function] = int(p.Reserved)
	}
	for _, c := range routes.Consumers() {
		declared[c.Function] = int(c.Reserved)
	}
	total := 0
	for _, n := range declared {
		total += n
	}
	// A quarter at most: the routes keep 750 of the default 1,000 at the
	// stage's default 1,000 requests a second.
	if total > stack.DefaultAccountConcurrency/4 {
		t.Errorf("the declared reservations add up to %d of an account's default %d", total, stack.DefaultAccountConcurrency)
	}
	t.Logf("reserved %d of %d; %d left to the routes", total, stack.DefaultAccountConcurrency, stack.DefaultAccountConcurrency-total)
	for stage, s := range both() {
		want := maps.Clone(declared)
		if stage == "prod" {
			maps.Copy(want, prodReserved)
		}
		for _, fn := range s.declaredFunctions() {
			got, has := s.resources[s.functionID(fn.name)].Properties["ReservedConcurrentExecutions"]
			n, reserved := want[fn.name]
			switch {
			case reserved && got != float64(n):
				t.Errorf("%s/%s: reserved concurrency %v, want %d", stage, fn.name, got, n)
			case !reserved && has:
				t.Errorf("%s/%s: a route function reserves %v; routes share what is left", stage, fn.name, got)
			}
		}
	}
}

// grantsOf is what fn's role may do on each declared table (not its
// stream): the DynamoDB actions granted.
func grantsOf(s *synthesized, fn string) map[string][]string {
	tables := s.tableIDs()
	out := map[string][]string{}
	for _, st := range statementsOf(s, fn) {
		for _, res := range resourceList(st.Resource) {
			if strings.Contains(mustJSON(res), "StreamArn") {
				continue
			}
			for _, name := range tablesIn(res, tables) {
				for _, a := range strs(st.Action) {
					out[name] = appendMissing(out[name], a)
				}
			}
		}
	}
	return out
}

// The grants the end-to-end access test (infra/local/access) found wider
// than the code's calls are narrowed: these functions may not touch what
// they never call.
func TestNarrowedGrantsStayNarrow(t *testing.T) {
	for stage, s := range both() {
		// A toggle keeps its Idempotency-Keys on the edge itself.
		for _, fn := range []string{routes.UnfavoriteGame.Function, routes.LikePost.Function, routes.UnlikePost.Function, routes.ToggleLike.Function} {
			g := grantsOf(s, fn)
			if _, ok := g["Idempotency"]; ok {
				t.Errorf("%s/%s: granted Idempotency, which it never uses", stage, fn)
			}
			if !slices.Contains(g["Reactions"], "dynamodb:UpdateItem") {
				t.Errorf("%s/%s: cannot write its edge in Reactions: %v", stage, fn, g["Reactions"])
			}
		}
		for _, fn := range []string{routes.FavoriteGame.Function} {
			if !slices.Contains(grantsOf(s, fn)["Idempotency"], "dynamodb:PutItem") {
				t.Errorf("%s/%s: cannot keep Idempotency-Key records", stage, fn)
			}
		}
		streak := grantsOf(s, routes.GetStreak.Function)
		for _, a := range streak["Counters"] {
			if slices.Contains(dynamoWrites, a) {
				t.Errorf("%s/get-streak: may %s Counters; it only reads the cache generation", stage, a)
			}
		}
		if !slices.Contains(streak["Counters"], "dynamodb:GetItem") {
			t.Errorf("%s/get-streak: cannot read Counters: %v", stage, streak["Counters"])
		}
		for _, fn := range []string{routes.GetLeaderboard.Function, routes.PlayerRank.Function} {
			if _, ok := grantsOf(s, fn)["Players"]; ok {
				t.Errorf("%s/%s: granted Players; it shows no display names or friends", stage, fn)
			}
		}
		// Top lists read display names, friends ranks a friend list.
		for fn, read := range map[string]string{routes.LeaderboardTop.Function: "dynamodb:BatchGetItem", routes.FriendsRank.Function: "dynamodb:GetItem"} {
			if g := grantsOf(s, fn)["Players"]; !slices.Equal(g, []string{read}) {
				t.Errorf("%s/%s: Players granted %v, want %s alone", stage, fn, g, read)
			}
		}
	}
}

func (s *synthesized) servesServices(fn string) bool {
	for _, r := range s.routes {
		if r.Function == fn && r.Auth == routes.Service {
			return true
		}
	}
	return false
}

// Service routes answer only the roles they declare: by default two roles
// the stack creates, assumable within the account, the game server's
// allowed to invoke the game routes alone and the operator's every service
// route; or the existing principals a deployment names for a role
// (gameServerRoleArns, operatorRoleArns), and then the stack creates none
// for it. Each function admits exactly the principals of the roles its
// routes admit.
func TestEachRoleMayCallOnlyTheRoutesThatAdmitIt(t *testing.T) {
	created := map[string]map[routes.Role]string{} // stage → role → logical id
	for stage, s := range both() {
		created[stage] = map[routes.Role]string{}
		prefix := "rally-" + strings.TrimPrefix(*s.stack.StackName(), "Rally-") + "-"
		for id, r := range s.resources {
			name, _ := r.Properties["RoleName"].(string)
			if r.Type != "AWS::IAM::Role" || !strings.HasPrefix(name, prefix) {
				continue
			}
			role := routes.Role(strings.TrimPrefix(name, prefix))
			if !slices.Contains(routes.Roles(), role) {
				t.Errorf("%s: created %s, which is no service role", stage, name)
				continue
			}
			created[stage][role] = id
			trust := mustJSON(r.Properties["AssumeRolePolicyDocument"])
			if !strings.Contains(trust, ":root") || strings.Contains(trust, "lambda.amazonaws.com") {
				t.Errorf("%s: trust %s, want the account's principals", name, trust)
			}
			policies := mustJSON(r.Properties["Policies"])
			if strings.Contains(policies, `"dynamodb:`) || strings.Count(policies, `"Action"`) != 1 ||
				!strings.Contains(policies, `"execute-api:Invoke"`) || strings.Contains(policies, `"Deny"`) {
				t.Errorf("%s: its policy grants more than execute-api:Invoke: %s", name, policies)
			}
			allowed := invokable(r.Properties["Policies"])
			for _, rt := range s.routes {
				if named := slices.Contains(allowed, rt.Method+pathParams.ReplaceAllString(rt.Path, "*")); named != rt.Admits(role) {
					t.Errorf("%s: names %s = %v, want %v (the route admits %v)", name, rt.Key(), named, rt.Admits(role), rt.Admitted())
				}
				// IAM's * matches across slashes: a pattern of another
				// route must not reach this one either.
				if rt.Admits(role) {
					continue
				}
				request := rt.Method + pathParams.ReplaceAllString(rt.Path, "x")
				for _, pattern := range allowed {
					if globMatches(pattern, request) {
						t.Errorf("%s: its resource %s lets it invoke %s", name, pattern, rt.Key())
					}
				}
			}
		}
	}
	if len(created["dev"]) != 2 {
		t.Fatalf("dev created the roles %v, want the game server's and the operator's", slices.Collect(maps.Keys(created["dev"])))
	}
	if _, ok := created["prod"][routes.GameServer]; ok || created["prod"][routes.Operator] == "" {
		t.Fatalf("prod, given its game servers' principals, created %v; want the operator's role alone", slices.Collect(maps.Keys(created["prod"])))
	}
	given := map[string]map[routes.Role][]string{"dev": {}, "prod": {routes.GameServer: prodGameServers}}
	for stage, s := range both() {
		for _, fn := range s.declaredFunctions() {
			var want []string
			for _, r := range s.routes {
				if r.Function != fn.name || r.Auth != routes.Service {
					continue
				}
				for _, role := range r.Admitted() {
					if id := created[stage][role]; id != "" {
						want = appendMissing(want, id)
					}
					for _, arn := range given[stage][role] {
						want = appendMissing(want, arn)
					}
				}
			}
			env, has := environment(s, fn.name)["RALLY_SERVICE_ROLES"]
			if !has {
				if len(want) > 0 {
					t.Errorf("%s/%s: no RALLY_SERVICE_ROLES, want %v", stage, fn.name, want)
				}
				continue
			}
			got := principalsIn(env)
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("%s/%s: RALLY_SERVICE_ROLES admits %v, want %v", stage, fn.name, got, want)
			}
		}
	}
	if _, ok := dev.outputs["OperatorRoleArn"]; !ok {
		t.Error("dev: no OperatorRoleArn output")
	}
	if _, ok := dev.outputs["GameServerRoleArn"]; !ok {
		t.Error("dev: no GameServerRoleArn output")
	}
	if _, ok := prod.outputs["GameServerRoleArn"]; ok {
		t.Error("prod: a GameServerRoleArn output, but it created no game-server role")
	}
}

var pathParams = regexp.MustCompile(`\{[^}]+\}`)

// invokable lists what an inline policy lets its role invoke, as
// METHOD/path with the ARN's wildcards (PUT/v1/games/*).
func invokable(policies any) []string {
	var out []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		case string:
			if _, route, ok := strings.Cut(v, "/"+stack.StageName+"/"); ok {
				out = append(out, route)
			}
		}
	}
	walk(policies)
	return out
}

// globMatches reports whether an IAM resource pattern (* any characters,
// slashes included; ? one) matches s.
func globMatches(pattern, s string) bool {
	re := "^" + strings.NewReplacer(`\*`, ".*", `\?`, ".").Replace(regexp.QuoteMeta(pattern)) + "$"
	return regexp.MustCompile(re).MatchString(s)
}

// principalsIn lists who an allow-list admits: the logical id of each
// role the template names, and each literal ARN.
func principalsIn(v any) []string {
	var out []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if id := logicalID(v); id != "" {
				out = appendMissing(out, id)
				return
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		case string:
			for _, arn := range strings.Split(v, ",") {
				if arn = strings.TrimSpace(arn); strings.HasPrefix(arn, "arn:") {
					out = appendMissing(out, arn)
				}
			}
		}
	}
	walk(v)
	return out
}
