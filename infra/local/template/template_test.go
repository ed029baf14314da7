package template_test

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/rallyhq/rally/infra/local/policy"
	"github.com/rallyhq/rally/infra/local/template"
	"github.com/rallyhq/rally/infra/local/template/synth"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
)

// synthesized is the real stack's template, synthesized once (about a
// minute: jsii runs aws-cdk-lib in node).
var synthesized []byte

func TestMain(m *testing.M) {
	var err error
	if synthesized, err = synth.Template("../../..", "dev"); err != nil {
		fmt.Fprintln(os.Stderr, "template tests: synthesize the stack:", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// local names every table with a prefix, so a name the template resolved
// is provably the local stack's.
var local = template.Local{
	Tables:    schema.NamesFromEnv("t-"),
	RedisURL:  "redis://127.0.0.1:6399",
	AccountID: "000000000000",
	SecretValue: func(s template.Secret) string {
		return "value of " + s.Name
	},
}

func functions(t *testing.T, raw []byte) map[string]template.Function {
	t.Helper()
	tpl, err := template.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	fns, err := tpl.Functions(local)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]template.Function{}
	for _, fn := range fns {
		out[fn.Name] = fn
	}
	return out
}

func TestEveryDeclaredFunctionComesWithItsEnvironmentResolvedForTheLocalStack(t *testing.T) {
	fns := functions(t, synthesized)
	tpl, _ := template.Parse(synthesized)
	byARN := map[string]template.Secret{}
	for _, s := range tpl.Secrets(local) {
		byARN[s.ARN] = s
	}
	for _, name := range routes.Functions() {
		fn, ok := fns[name]
		if !ok {
			t.Errorf("%s: not found in the template", name)
			continue
		}
		uses, _ := routes.UsesOf(name)
		want := map[string]string{"RALLY_FUNCTION": name, "RALLY_STAGE": "dev"}
		for _, table := range uses.Tables() {
			want[table.EnvVar()] = "t-" + table.Name
		}
		if uses.Redis {
			want["RALLY_REDIS_URL"] = local.RedisURL
			want["RALLY_REDIS_CLUSTER"] = "false"
		}
		for k, v := range want {
			if fn.Env[k] != v {
				t.Errorf("%s: %s=%q, want %q", name, k, fn.Env[k], v)
			}
		}
		// Each secret it reads comes as its local ARN, never as a key.
		for _, sec := range routes.Secrets() {
			arn, has := fn.Env[sec.ARNVar]
			if want := sec == routes.LogKey || slices.Contains(uses.Secrets, sec); has != want {
				t.Errorf("%s: %s set=%v, reads the key that %s=%v", name, sec.ARNVar, has, sec.Purpose, want)
			}
			if s, ok := byARN[arn]; has && (!ok || !strings.Contains(s.Name, sec.Name+"Secret")) {
				t.Errorf("%s: %s=%q, want the local ARN of its secret", name, sec.ARNVar, arn)
			}
			if v, ok := fn.Env[sec.KeyVar]; ok {
				t.Errorf("%s: %s=%q: the template gives the key itself", name, sec.KeyVar, v)
			}
		}
		if fn.Timeout <= 0 || fn.MemoryMB <= 0 {
			t.Errorf("%s: timeout %s, memory %d MB", name, fn.Timeout, fn.MemoryMB)
		}
		for k, v := range fn.Env {
			if strings.Contains(v, "{{resolve:") || strings.Contains(v, "Fn::") || strings.Contains(v, "rediss://") {
				t.Errorf("%s: %s=%q is not resolved for the local stack", name, k, v)
			}
		}
	}
	if fn := fns[routes.RedriveDeadLetters.Function]; fn.Env[routes.FunctionEnvVar(routes.CounterProcessor.Function)] != routes.CounterProcessor.Function {
		t.Errorf("redrive-dead-letters knows the counter processor as %q, want its local name", fn.Env[routes.FunctionEnvVar(routes.CounterProcessor.Function)])
	}
}

func TestEachRoleGrantsItsTablesAsLocalARNs(t *testing.T) {
	fns := functions(t, synthesized)
	allows := func(fn template.Function, action, arn string) bool {
		return slices.ContainsFunc(fn.Statements, func(s policy.Statement) bool {
			return s.Effect == "Allow" && slices.Contains(s.Actions, action) && slices.Contains(s.Resources, arn)
		})
	}
	const table = "arn:aws:dynamodb:us-east-1:000000000000:table/"
	for _, name := range routes.Functions() {
		fn := fns[name]
		uses, _ := routes.UsesOf(name)
		for _, c := range uses.Calls {
			arn := table + "t-" + c.Resource()
			for _, action := range c.Actions.IAM() {
				if !allows(fn, action, arn) {
					t.Errorf("%s: no %s on %s in %+v", name, action, arn, fn.Statements)
				}
			}
		}
		for _, s := range uses.Streams {
			if !allows(fn, "dynamodb:GetRecords", table+"t-"+s.Name+"/stream/*") {
				t.Errorf("%s: no dynamodb:GetRecords on the %s stream", name, s.Name)
			}
		}
		for _, st := range fn.Statements {
			for _, r := range st.Resources {
				if r != "*" && !strings.HasPrefix(r, "arn:aws:") {
					t.Errorf("%s: resource %q is not an ARN", name, r)
				}
			}
		}
	}
	if fn := fns[routes.RedriveDeadLetters.Function]; !allows(fn, "lambda:InvokeFunction", "arn:aws:lambda:us-east-1:000000000000:function:counter-processor") {
		t.Errorf("redrive-dead-letters may not invoke the counter processor: %+v", fn.Statements)
	}
	if fn := fns[routes.AnalyticsShipper.Function]; !slices.ContainsFunc(fn.Statements, func(s policy.Statement) bool {
		return slices.Contains(s.Actions, "firehose:PutRecordBatch") &&
			slices.Contains(s.Resources, "arn:aws:firehose:us-east-1:000000000000:deliverystream/"+fn.Env["RALLY_FIREHOSE_STREAM"])
	}) {
		t.Errorf("the analytics shipper may not put records to its stream %q: %+v", fn.Env["RALLY_FIREHOSE_STREAM"], fn.Statements)
	}
}

// mutate applies change to the synthesized template's resources.
func mutate(t *testing.T, change func(resources map[string]any)) []byte {
	t.Helper()
	var doc map[string]any
	if err := json.Unmarshal(synthesized, &doc); err != nil {
		t.Fatal(err)
	}
	change(doc["Resources"].(map[string]any))
	raw, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func functionResource(resources map[string]any, name string) map[string]any {
	for _, r := range resources {
		res := r.(map[string]any)
		meta, _ := res["Metadata"].(map[string]any)
		if path, _ := meta["aws:cdk:path"].(string); strings.HasSuffix(path, "/Functions/"+routes.Camel(name)+"/Function/Resource") {
			return res
		}
	}
	return nil
}

func TestADeclaredFunctionMissingFromTheTemplateIsAnErrorNamingIt(t *testing.T) {
	raw := mutate(t, func(resources map[string]any) {
		for id, r := range resources {
			if r.(map[string]any)["Type"] == "AWS::Lambda::Function" && strings.HasPrefix(id, "FunctionsDlqArchiver") {
				delete(resources, id)
			}
		}
	})
	tpl, err := template.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	_, err = tpl.Functions(local)
	if err == nil || !strings.Contains(err.Error(), "dlq-archiver") {
		t.Fatalf("functions of a template without the dlq-archiver: %v, want an error naming it", err)
	}
}

func TestAnUnresolvableVariableIsAnErrorNamingIt(t *testing.T) {
	raw := mutate(t, func(resources map[string]any) {
		res := functionResource(resources, "favorite-game")
		vars := res["Properties"].(map[string]any)["Environment"].(map[string]any)["Variables"].(map[string]any)
		vars["RALLY_PARTNER_URL"] = map[string]any{"Fn::ImportValue": "PartnerStack-Url"}
	})
	tpl, err := template.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	_, err = tpl.Functions(local)
	if err == nil || !strings.Contains(err.Error(), "favorite-game: environment variable RALLY_PARTNER_URL") {
		t.Fatalf("a variable importing another stack's value: %v, want an error naming the function and variable", err)
	}
}

// A grant limited to some attributes keeps its Condition: the local check
// allows reading and updating those attributes and the key, and nothing
// wider.
func TestAGrantOnSomeAttributesKeepsItsConditions(t *testing.T) {
	fns := functions(t, synthesized)
	const table = "arn:aws:dynamodb:us-east-1:000000000000:table/"
	checked := 0
	for _, name := range routes.Functions() {
		uses, _ := routes.UsesOf(name)
		for _, g := range uses.Calls {
			whole := slices.ContainsFunc(uses.Calls, func(c routes.Call) bool {
				return c.Table.Name == g.Table.Name && c.Index == "" && len(c.Attributes) == 0
			})
			if len(g.Attributes) == 0 || whole {
				continue
			}
			checked++
			role := policy.Policy(fns[name].Statements)
			arn := table + "t-" + g.Table.Name
			granted := append([]string{g.Table.PartitionKey.Name}, g.Attributes...)
			for _, iam := range g.Actions.IAM() {
				action := strings.TrimPrefix(iam, "dynamodb:")
				keys := policy.Keys{"dynamodb:Attributes": granted}
				if action == "GetItem" {
					keys["dynamodb:Select"] = []string{"SPECIFIC_ATTRIBUTES"}
				}
				if !role.Allows("dynamodb:"+action, arn, keys) {
					t.Errorf("%s may not %s %v of %s: %+v", name, action, granted, g.Table.Name, fns[name].Statements)
				}
				keys["dynamodb:Attributes"] = append(slices.Clone(granted), "not_granted")
				if role.Allows("dynamodb:"+action, arn, keys) {
					t.Errorf("%s may %s an attribute of %s it was not granted", name, action, g.Table.Name)
				}
			}
			if g.Actions&routes.GetItem != 0 && role.Allows("dynamodb:GetItem", arn, policy.Keys{
				"dynamodb:Attributes": granted[:1], "dynamodb:Select": {"ALL_ATTRIBUTES"},
			}) {
				t.Errorf("%s may read whole items of %s", name, g.Table.Name)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no function has a grant on some attributes: nothing was checked")
	}
}

// A Condition the local check cannot evaluate is an error naming it,
// never dropped (dropped, the role would allow locally what AWS refuses).
func TestAConditionTheLocalCheckCannotEvaluateIsAnError(t *testing.T) {
	raw := mutate(t, func(resources map[string]any) {
		role := functionResource(resources, "favorite-game")["Properties"].(map[string]any)["Role"]
		for _, r := range resources {
			res := r.(map[string]any)
			if res["Type"] != "AWS::IAM::Policy" || !slices.ContainsFunc(res["Properties"].(map[string]any)["Roles"].([]any), func(x any) bool {
				return template.LogicalID(x) == template.LogicalID(role)
			}) {
				continue
			}
			doc := res["Properties"].(map[string]any)["PolicyDocument"].(map[string]any)
			st := doc["Statement"].([]any)[0].(map[string]any)
			st["Condition"] = map[string]any{"StringEquals": map[string]any{"aws:SourceVpce": "vpce-0123"}}
		}
	})
	tpl, err := template.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	_, err = tpl.Functions(local)
	if err == nil || !strings.Contains(err.Error(), "favorite-game") || !strings.Contains(err.Error(), "aws:SourceVpce") {
		t.Fatalf("a statement conditioned on aws:SourceVpce: %v, want an error naming the function and the key", err)
	}
}

// Each processor is invoked by a mapping from each stream it reads, with
// its dead-letter queue as the on-failure destination, and the dlq-archiver
// by one from each of those queues; each role allows what Lambda does with
// it to run them.
func TestEachMappingIsRunAsItsFunctionsRole(t *testing.T) {
	fns := functions(t, synthesized)
	const stream = "arn:aws:dynamodb:us-east-1:000000000000:table/"
	dlqs := map[string]bool{}
	for _, name := range routes.Functions() {
		fn := fns[name]
		if err := fn.CheckMappings(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		var want []string
		for _, p := range routes.Processors() {
			if p.Function == name {
				want = append(want, stream+"t-"+p.Source.Name+"/stream/*")
			}
		}
		var got []string
		for _, m := range fn.Mappings {
			if name == routes.DlqArchiver.Function {
				continue
			}
			got = append(got, m.Source)
			if !strings.HasPrefix(m.OnFailure, "arn:aws:sqs:us-east-1:000000000000:") {
				t.Errorf("%s: mapping %s parks failed batches in %q, want a queue", name, m.LogicalID, m.OnFailure)
			}
			dlqs[m.OnFailure] = true
		}
		slices.Sort(want)
		slices.Sort(got)
		if name != routes.DlqArchiver.Function && !slices.Equal(got, want) {
			t.Errorf("%s is fed from %v, want %v", name, got, want)
		}
	}
	var fed []string
	for _, m := range fns[routes.DlqArchiver.Function].Mappings {
		fed = append(fed, m.Source)
	}
	if len(fed) != len(dlqs) || slices.ContainsFunc(fed, func(q string) bool { return !dlqs[q] }) {
		t.Errorf("the dlq-archiver is fed from %v, want the processors' queues %v", fed, dlqs)
	}
}

// A role without a grant a mapping needs fails the check, naming the
// action and the resource.
func TestAMappingsMissingGrantIsNamed(t *testing.T) {
	fn := functions(t, synthesized)[routes.CounterProcessor.Function]
	for _, action := range []string{"dynamodb:GetRecords", "sqs:SendMessage", "dynamodb:ListStreams"} {
		without := fn
		without.Statements = nil
		for _, st := range fn.Statements {
			st.Actions = slices.DeleteFunc(slices.Clone(st.Actions), func(a string) bool { return a == action })
			if len(st.Actions) > 0 {
				without.Statements = append(without.Statements, st)
			}
		}
		err := without.CheckMappings()
		if err == nil || !strings.Contains(err.Error(), "counter-processor: its role may not "+action+" on ") {
			t.Errorf("the counter processor's role without %s: %v, want an error naming it", action, err)
		}
	}
}
