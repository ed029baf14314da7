package stack

import (
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssecretsmanager"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"

	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
)

// Function sizing. 512 MB buys enough CPU (Lambda scales CPU with memory)
// to keep TLS handshakes to the cache and DynamoDB off the cold-start
// latency; HTTP functions must finish well inside API Gateway's 30 s.
const functionMemoryMB = 512

const (
	defaultLogLevel = "info"
	// keyLength is the length of each generated key: 64 alphanumeric
	// characters carry about 380 bits.
	keyLength = 64
)

// FunctionsProps configures the functions.
type FunctionsProps struct {
	Stage      string
	BuildDir   string
	Routes     []routes.Route
	Processors []routes.Processor
	Consumers  []routes.Consumer
	Data       *Data
	Cache      *Cache
	Analytics  *Analytics
	Exports    *Exports
	// ImportBucket is the bucket import files are read from (Props).
	ImportBucket string
	LogRetention awslogs.RetentionDays
	Protect      bool
	// Reserved is the reserved concurrency of the processors and
	// consumers, by function (stack.Reserved).
	Reserved map[string]int
}

// Functions owns one Lambda per declared route and processor function, each
// with its own role granted exactly what its declarations' Uses list, and
// the secrets holding the keys they read (routes.Secrets).
type Functions struct {
	constructs.Construct
	secrets   map[string]awssecretsmanager.Secret
	byName    map[string]awslambda.Function
	routes    []string
	consumers []string
	linked    []spec
}

// spec is what a route and a processor have in common for their function.
type spec struct {
	name        string
	description string
	uses        routes.Uses
	timeout     time.Duration
	// sources are the tables whose streams it reads: it is told their
	// names too, which is how it knows a record's table by its ARN (the
	// analytics shipper, the dlq-archiver).
	sources []schema.Table
}

// NewFunctions creates every function.
func NewFunctions(scope constructs.Construct, id string, props FunctionsProps) *Functions {
	f := &Functions{
		Construct: constructs.NewConstruct(scope, jsii.String(id)),
		secrets:   map[string]awssecretsmanager.Secret{}, byName: map[string]awslambda.Function{},
	}
	for _, sec := range routes.Secrets() {
		f.secrets[sec.Name] = newKeySecret(f.Construct, sec, props)
	}
	added := map[string]bool{}
	for _, r := range props.Routes {
		if !added[r.Function] {
			added[r.Function] = true
			f.add(props, spec{name: r.Function, description: r.Key() + ": " + r.Summary, uses: r.Uses, timeout: routes.RouteTimeout})
			f.routes = append(f.routes, r.Function)
		}
	}
	for _, p := range processorSpecs(props.Processors) {
		f.add(props, p)
	}
	// Consumers last: one that acts on the processors is told their names.
	for _, c := range props.Consumers {
		f.add(props, spec{name: c.Function, description: "queue consumer: " + c.Summary, uses: c.Uses, timeout: routes.ProcessorTimeout, sources: c.Uses.Streams})
		f.consumers = append(f.consumers, c.Function)
	}
	f.link(props)
	return f
}

// newKeySecret creates the secret holding the key of sec, generated at
// deploy time: its value never appears in the template, and functions are
// given only its ARN.
func newKeySecret(scope constructs.Construct, sec routes.Secret, props FunctionsProps) awssecretsmanager.Secret {
	description := "Rally " + props.Stage + ": the key that " + sec.Purpose
	reason := "The key is rotated by putting a new secret value (aws secretsmanager put-secret-value): functions " +
		"use AWSCURRENT, still accept what was made under AWSPREVIOUS (cursors in flight, erasure records written " +
		"before), and read the secret again within minutes. A scheduled rotation would need a rotation Lambda of its " +
		"own, which this stack, near CloudFormation's resource limit, leaves out."
	if !sec.Rotates {
		description += "; never rotate it"
		reason = "The key names users by a keyed hash that must stay the same over time (a rotation would split a " +
			"user's log lines between two hashes), so it is never rotated."
	}
	secret := awssecretsmanager.NewSecret(scope, jsii.String(sec.Name+"Secret"), &awssecretsmanager.SecretProps{
		Description: jsii.String(description),
		GenerateSecretString: &awssecretsmanager.SecretStringGenerator{
			PasswordLength:     jsii.Number(keyLength),
			ExcludePunctuation: jsii.Bool(true),
		},
		RemovalPolicy: removal(props.Protect),
	})
	suppress(secret, "SMG4", reason)
	return secret
}

// Secret is the secret holding the key of sec.
func (f *Functions) Secret(sec routes.Secret) awssecretsmanager.Secret {
	secret, ok := f.secrets[sec.Name]
	if !ok {
		panic(fmt.Sprintf("stack: secret %s is not declared", sec.Name))
	}
	return secret
}

// processorSpecs merges the processor declarations by function: a Lambda
// that reads several streams is declared once per stream, and is granted
// the union of what those declarations use.
func processorSpecs(ps []routes.Processor) []spec {
	var order []string
	byName := map[string]*spec{}
	sources := map[string][]string{}
	summaries := map[string][]string{}
	for _, p := range ps {
		s, ok := byName[p.Function]
		if !ok {
			s = &spec{name: p.Function, timeout: routes.ProcessorTimeout}
			byName[p.Function] = s
			order = append(order, p.Function)
		}
		s.uses = unionUses(s.uses, p.Uses)
		if !slices.ContainsFunc(s.sources, func(t schema.Table) bool { return t.Name == p.Source.Name }) {
			s.sources = append(s.sources, p.Source)
		}
		sources[p.Function] = appendNew(sources[p.Function], p.Source.Name)
		summaries[p.Function] = appendNew(summaries[p.Function], p.Summary)
	}
	out := make([]spec, 0, len(order))
	for _, name := range order {
		s := byName[name]
		streams := strings.Join(sources[name], ", ") + " stream"
		if len(sources[name]) > 1 {
			streams += "s"
		}
		s.description = streams + ": " + strings.Join(summaries[name], "; ")
		out = append(out, *s)
	}
	return out
}

// grantImports lets fn read the objects of the import bucket: an import
// names its file with s3://bucket/key, any key of the bucket.
func grantImports(fn awslambda.Function, bucket string) {
	fn.AddToRolePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions:   jsii.Strings("s3:GetObject"),
		Resources: jsii.Strings("arn:" + *awscdk.Aws_PARTITION() + ":s3:::" + bucket + "/*"),
	}))
	suppress(fn.Role(), "IAM5", "Import files are read from the import bucket the operator names at deployment "+
		"(context importBucket), any key of it: s3:GetObject only, on that bucket's objects.", importsWildcard)
}

// importsWildcard matches the S3 grant on the import bucket's objects.
var importsWildcard = &cdknag.RegexAppliesTo{Regex: jsii.String(`/^Resource::arn:<AWS::Partition>:s3:::[a-z0-9.-]+\/\*$/g`)}

// unionUses is everything a or b uses: the calls of either, each
// resource's actions joined.
func unionUses(a, b routes.Uses) routes.Uses {
	return routes.Uses{
		Calls:     routes.MergeCalls(append(slices.Clone(a.Calls), b.Calls...)),
		Redis:     a.Redis || b.Redis,
		Secrets:   routes.MergeSecrets(a.Secrets, b.Secrets),
		Analytics: a.Analytics || b.Analytics,
		Documents: a.Documents | b.Documents,
		Imports:   a.Imports || b.Imports,
	}
}

func appendNew(list []string, s string) []string {
	if slices.Contains(list, s) {
		return list
	}
	return append(list, s)
}

// Get returns the function named fn; it panics for an undeclared name.
func (f *Functions) Get(fn string) awslambda.Function {
	l, ok := f.byName[fn]
	if !ok {
		panic(fmt.Sprintf("stack: function %s is not declared", fn))
	}
	return l
}

// Routes lists the functions that serve routes, in declaration order.
func (f *Functions) Routes() []string { return f.routes }

// Consumers lists the queue consumers, in declaration order.
func (f *Functions) Consumers() []string { return f.consumers }

// Names lists the function names in a stable order.
func (f *Functions) Names() []string {
	names := make([]string, 0, len(f.byName))
	for n := range f.byName {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func (f *Functions) add(props FunctionsProps, s spec) {
	id := routes.Camel(s.name)
	scope := constructs.NewConstruct(f.Construct, jsii.String(id))
	logs := awslogs.NewLogGroup(scope, jsii.String("Logs"), &awslogs.LogGroupProps{
		Retention: props.LogRetention, RemovalPolicy: removal(props.Protect),
	})
	// An explicit role keeps AWS managed policies (which may write to any
	// log group) off the function: it may write only its own log group.
	role := awsiam.NewRole(scope, jsii.String("Role"), &awsiam.RoleProps{
		AssumedBy:   awsiam.NewServicePrincipal(jsii.String("lambda.amazonaws.com"), nil),
		Description: jsii.String("Rally " + s.name),
	})
	logs.GrantWrite(role)

	env := map[string]*string{
		"RALLY_STAGE":     jsii.String(props.Stage),
		"RALLY_FUNCTION":  jsii.String(s.name),
		"RALLY_TRACING":   jsii.String("true"),
		"RALLY_LOG_LEVEL": jsii.String(defaultLogLevel),
	}
	// Each key the function reads (the log key, which every function
	// names users in its logs by, and those it declares) is read from its
	// secret at start: the environment holds only the secret's ARN, since
	// anyone allowed lambda:GetFunctionConfiguration reads the
	// environment.
	for _, sec := range s.uses.Keys() {
		env[sec.ARNVar] = f.Secret(sec).SecretArn()
	}
	fp := &awslambda.FunctionProps{
		Description:  jsii.String(truncate(s.description, 256)),
		Runtime:      awslambda.Runtime_PROVIDED_AL2023(),
		Architecture: awslambda.Architecture_ARM_64(),
		Handler:      jsii.String("bootstrap"),
		Code:         awslambda.Code_FromAsset(jsii.String(filepath.Join(props.BuildDir, s.name)), nil),
		MemorySize:   jsii.Number(functionMemoryMB),
		Timeout:      awscdk.Duration_Seconds(jsii.Number(s.timeout.Seconds())),
		Tracing:      awslambda.Tracing_ACTIVE,
		Role:         role,
		LogGroup:     logs,
		Environment:  &env,
	}
	if n, ok := props.Reserved[s.name]; ok {
		// Routes share what the reservations leave; a processor keeps its
		// own share whatever the routes take (and takes no more).
		fp.ReservedConcurrentExecutions = jsii.Number(float64(n))
	}
	if s.uses.Redis {
		env["RALLY_REDIS_URL"] = props.Cache.URL
		env["RALLY_REDIS_CLUSTER"] = jsii.String("true")
		fp.Vpc = props.Cache.Vpc
		fp.VpcSubnets = &awsec2.SubnetSelection{SubnetType: awsec2.SubnetType_PRIVATE_ISOLATED}
		fp.SecurityGroups = &[]awsec2.ISecurityGroup{props.Cache.FunctionSecurityGroup}
		// The actions of AWSLambdaVPCAccessExecutionRole, inline: Lambda
		// manages the function's network interfaces with them.
		role.AddToPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Actions: jsii.Strings(
				"ec2:CreateNetworkInterface", "ec2:DescribeNetworkInterfaces", "ec2:DescribeSubnets",
				"ec2:DeleteNetworkInterface", "ec2:AssignPrivateIpAddresses", "ec2:UnassignPrivateIpAddresses",
			),
			Resources: jsii.Strings("*"),
		}))
	}
	if s.uses.Analytics {
		env["RALLY_FIREHOSE_STREAM"] = props.Analytics.StreamName
	}
	for _, t := range append(s.uses.Tables(), s.sources...) {
		env[t.EnvVar()] = props.Data.Table(t).TableName()
	}

	fn := awslambda.NewFunction(scope, jsii.String("Function"), fp)
	for _, c := range routes.MergeCalls(s.uses.Calls) {
		fn.AddToRolePolicy(callStatement(props.Data.Table(c.Table), c))
	}
	for _, sec := range s.uses.Keys() {
		f.Secret(sec).GrantRead(fn, nil)
	}
	if s.uses.Analytics {
		props.Analytics.GrantPutRecords(fn)
	}
	props.Exports.grant(fn, s.uses.Documents)
	if s.uses.Imports && props.ImportBucket != "" {
		grantImports(fn, props.ImportBucket)
	}
	for _, t := range s.uses.Streams {
		props.Data.Table(t).GrantStream(fn, *jsii.Strings(routes.StreamReadActions...)...)
	}
	suppress(role, "IAM5", "Only actions without resource-level permissions use Resource '*': "+
		"xray:PutTraceSegments/PutTelemetryRecords (active tracing), the EC2 network-interface actions "+
		"Lambda needs for functions in the VPC, and dynamodb:ListStreams for stream processors. "+
		"The stack tests assert no other action is granted on '*'.", "Resource::*")
	suppressServerless(fn, "LambdaDLQ", "No invocation of this function loses data without one: routes are invoked "+
		"synchronously by API Gateway, stream processors by event source mappings whose failed batches go to the "+
		"processor's dead-letter queue, the dlq-archiver by SQS (a failed message stays in its queue). The only "+
		"asynchronous invocation is a processor's scheduled tick, which carries no records; the next tick repeats it.")
	f.byName[s.name] = fn
	if s.uses.Processors || s.uses.Invokes {
		f.linked = append(f.linked, s)
	}
}

// link tells the functions that act on the stream processors their
// deployed names, and lets those that invoke them do so (and nothing else).
func (f *Functions) link(props FunctionsProps) {
	for _, s := range f.linked {
		fn := f.Get(s.name)
		for _, name := range processorNames(props.Processors) {
			processor := f.Get(name)
			fn.AddEnvironment(jsii.String(routes.FunctionEnvVar(name)), processor.FunctionName(), nil)
			if s.uses.Invokes {
				processor.GrantInvoke(fn)
			}
		}
		if s.uses.Invokes {
			suppress(fn.Role(), "IAM5", "A redrive invokes the stream processors; lambda:InvokeFunction is granted "+
				"on each processor and its versions (<function ARN>:*), nothing else.", versionWildcard)
		}
	}
}

func processorNames(ps []routes.Processor) []string {
	var out []string
	for _, p := range ps {
		out = appendNew(out, p.Function)
	}
	return out
}

// callStatement allows exactly c's actions on its table, or on the one
// index it names (<table ARN>/index/<name>), and nothing on its stream;
// when c names attributes, only on those and the key: a read must project
// them, an update may name no other.
func callStatement(table awsdynamodb.Table, c routes.Call) awsiam.PolicyStatement {
	resource := table.TableArn()
	if c.Index != "" {
		resource = jsii.String(*table.TableArn() + "/index/" + c.Index)
	}
	st := awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions:   jsii.Strings(c.Actions.IAM()...),
		Resources: &[]*string{resource},
	})
	if len(c.Attributes) > 0 {
		attrs := []string{c.Table.PartitionKey.Name}
		if c.Table.SortKey != nil {
			attrs = append(attrs, c.Table.SortKey.Name)
		}
		attrs = append(attrs, c.Attributes...)
		st.AddCondition(jsii.String("ForAllValues:StringEquals"), map[string]any{"dynamodb:Attributes": attrs})
		st.AddCondition(jsii.String("StringEqualsIfExists"), map[string]any{
			"dynamodb:Select":       "SPECIFIC_ATTRIBUTES",
			"dynamodb:ReturnValues": []string{"NONE", "UPDATED_OLD", "UPDATED_NEW"},
		})
	}
	return st
}

// truncate cuts s to at most n characters (Lambda's description limit).
func truncate(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n])
	}
	return s
}
