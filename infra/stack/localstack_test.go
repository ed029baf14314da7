package stack_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// localStackServices maps a CloudFormation type prefix (the service part
// of AWS::Service::Resource, or the whole type) to the LocalStack services
// (their names in SERVICES, as /_localstack/health lists them) that must
// run to deploy and serve it.
var localStackServices = map[string][]string{
	"AWS::ApiGatewayV2::":    {"apigateway"}, // one LocalStack service serves REST and HTTP APIs
	"AWS::Athena::":          {"athena"},
	"AWS::CDK::Metadata":     {"cloudformation"},
	"AWS::CloudFormation::":  {"cloudformation"},
	"AWS::CloudWatch::":      {"cloudwatch"},
	"AWS::Cognito::":         {"cognito-idp"},
	"AWS::DynamoDB::":        {"dynamodb"},
	"AWS::EC2::":             {"ec2"},
	"AWS::ElastiCache::":     {"elasticache"},
	"AWS::Events::":          {"events"},
	"AWS::Glue::":            {"glue"},
	"AWS::IAM::":             {"iam", "sts"},
	"AWS::KMS::":             {"kms"},
	"AWS::KinesisFirehose::": {"firehose"},
	"AWS::Lambda::":          {"lambda"},
	"AWS::Logs::":            {"logs"},
	"AWS::S3::":              {"s3"},
	"AWS::SNS::":             {"sns"},
	"AWS::SQS::":             {"sqs"},
	"AWS::Scheduler::":       {"scheduler"},
	"AWS::SecretsManager::":  {"secretsmanager"},
	"AWS::SSM::":             {"ssm"},
	"AWS::XRay::":            {"xray"},
}

// localStackServicesFor is what deploying a template with these resources
// needs: each type's services, what cdklocal itself uses (CloudFormation,
// the bootstrap's S3 assets bucket, SSM version parameter, IAM roles and
// STS), DynamoDB Streams for a table with a stream and X-Ray for a
// function with active tracing. An unmapped type is returned apart.
func localStackServicesFor(resources map[string]resource) (need map[string][]string, unmapped []string) {
	need = map[string][]string{}
	add := func(service, why string) {
		if !slices.Contains(need[service], why) {
			need[service] = append(need[service], why)
		}
	}
	for _, s := range []string{"cloudformation", "s3", "ssm", "iam", "sts"} {
		add(s, "cdklocal bootstrap and deploy")
	}
	for _, r := range resources {
		prefix := r.Type
		if parts := strings.Split(r.Type, "::"); len(parts) == 3 {
			prefix = parts[0] + "::" + parts[1] + "::"
		}
		services, ok := localStackServices[prefix]
		if !ok {
			services, ok = localStackServices[r.Type]
		}
		if !ok {
			if !slices.Contains(unmapped, r.Type) {
				unmapped = append(unmapped, r.Type)
			}
			continue
		}
		for _, s := range services {
			add(s, r.Type)
		}
		if r.Type == "AWS::DynamoDB::Table" && r.Properties["StreamSpecification"] != nil {
			add("dynamodbstreams", "tables with a stream")
		}
		if tracing, _ := r.Properties["TracingConfig"].(map[string]any); r.Type == "AWS::Lambda::Function" && tracing["Mode"] == "Active" {
			add("xray", "functions with active tracing")
		}
	}
	sort.Strings(unmapped)
	return need, unmapped
}

// enabledLocalStackServices reads SERVICES from localstack.yml.
func enabledLocalStackServices(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "localstack.yml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*-\s*SERVICES=([a-z0-9,-]+)\s*$`).FindSubmatch(raw)
	if m == nil {
		t.Fatal("localstack.yml sets no SERVICES=a,b,c environment line")
	}
	return strings.Split(string(m[1]), ",")
}

// LocalStack loads only the services SERVICES lists: one the stack needs
// and the file forgets fails `cdklocal deploy` half-way. Every resource of
// the synthesized stacks (nested stacks included) must map to enabled
// services, and a new resource type must be mapped here first.
func TestLocalStackEnablesEveryServiceTheStackUses(t *testing.T) {
	enabled := enabledLocalStackServices(t)
	for name, s := range both() {
		need, unmapped := localStackServicesFor(s.resources)
		for _, typ := range unmapped {
			t.Errorf("%s: resource type %s has no LocalStack service in localStackServices; add its mapping (and the service to localstack.yml)", name, typ)
		}
		for service, why := range need {
			if !slices.Contains(enabled, service) {
				t.Errorf("%s: localstack.yml SERVICES lacks %s, needed by %s", name, service, strings.Join(why, ", "))
			}
		}
	}
	// The services every deployment of Rally needs whatever its options.
	need, _ := localStackServicesFor(dev.resources)
	for _, s := range []string{"apigateway", "cognito-idp", "dynamodbstreams", "ec2", "elasticache", "firehose", "sns"} {
		if _, ok := need[s]; !ok {
			t.Errorf("the dev stack does not need %s: is a resource type mapped wrongly?", s)
		}
	}
}
