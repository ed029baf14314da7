package stack_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"

	"github.com/rallyhq/rally/infra/local/template"
	"github.com/rallyhq/rally/infra/stack"
	"github.com/rallyhq/rally/shared/routes"
)

// synthesized is one synthesized stack: the constructs (to find a
// declaration's resources) and its template.
type synthesized struct {
	stack    *stack.Stack
	template assertions.Template
	// routes and processors are the declarations the stack was built from.
	routes     []routes.Route
	processors []routes.Processor
	consumers  []routes.Consumer
	// resources is the template's Resources section, for checks the
	// assertions matchers cannot express (e.g. comparing two resources).
	resources map[string]resource
	outputs   map[string]any
	// sizes counts the resources of the stack and of each nested stack,
	// by construct path: CloudFormation deploys at most 500 a stack.
	sizes map[string]int
}

type resource struct {
	Type           string         `json:"Type"`
	Properties     map[string]any `json:"Properties"`
	DeletionPolicy string         `json:"DeletionPolicy"`
}

// Synthesis is slow (jsii runs aws-cdk-lib in node), so every test shares
// one app holding two stacks: the defaults (dev, Cognito, valkey) and a
// protected production stage with an external issuer and the redis engine.
var (
	dev, prod *synthesized
	buildDir  string
)

// External issuer used by the prod fixture.
const (
	prodIssuer   = "https://auth.example.com/"
	prodAudience = "rally-game"
	prodEmail    = "oncall@example.com"
	// The prod fixture's stage throttling and reservations, given as
	// context would give them.
	prodThrottleRate  = 250.5
	prodThrottleBurst = 600
)

// prodGameServers are existing principals the prod fixture's game servers
// call as, in place of the game-server role the stack would create; it
// creates the operator role.
var prodGameServers = []string{"arn:aws:iam::123456789012:role/studio/game-backend", "arn:aws:iam::123456789012:user/matchmaker"}

// prodOrigins are the web origins the prod fixture lets browsers call from.
var prodOrigins = []string{"https://play.example.com", "http://localhost:5173"}

var prodReserved = map[string]int{"counter-processor": 120}

func TestMain(m *testing.M) { os.Exit(run(m)) }

// jsii.Close is not called: it waits on the node process that the runtime
// already waits on, a race -race reports. Node exits when this process's
// pipe to it closes.
func run(m *testing.M) int {
	tmp, err := os.MkdirTemp("", "rally-infra-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)
	if err := setUp(tmp); err != nil {
		fmt.Fprintln(os.Stderr, "infra/stack tests: set up:", err)
		return 1
	}
	return m.Run()
}

func setUp(tmp string) error {
	buildDir = filepath.Join(tmp, "build")
	if err := fakeBuild(buildDir, routes.Functions()); err != nil {
		return err
	}
	ctx, err := cdkContext()
	if err != nil {
		return err
	}
	app := awscdk.NewApp(&awscdk.AppProps{Context: &ctx, Outdir: jsii.String(filepath.Join(tmp, "cdk.out"))})
	devStack, err := stack.New(app, "Rally-test", stack.Props{Stage: "test", BuildDir: buildDir})
	if err != nil {
		return err
	}
	prodRoutes := prodDeclarations()
	prodStack, err := stack.New(app, "Rally-prod", stack.Props{
		Routes:        prodRoutes,
		Stage:         "prod",
		Protect:       true,
		BuildDir:      buildDir,
		JWTIssuer:     prodIssuer,
		JWTAudience:   []string{prodAudience},
		RedisEngine:   stack.EngineRedis,
		LogRetention:  awslogs.RetentionDays_THREE_MONTHS,
		AlarmEmail:    prodEmail,
		ThrottleRate:  prodThrottleRate,
		ThrottleBurst: prodThrottleBurst,
		Reserved:      prodReserved,
		CORSOrigins:   prodOrigins,
		ImportBucket:  prodImportBucket,
		// The game servers' roles are given, the operator's created.
		GameServerRoleARNs: prodGameServers,
	})
	if err != nil {
		return err
	}
	// LogIgnores turns every suppressed finding into an info annotation, so
	// the tests can tell the checks ran.
	awscdk.Aspects_Of(app).Add(cdknag.NewAwsSolutionsChecks(&cdknag.NagPackProps{
		LogIgnores: jsii.Bool(true), Reports: jsii.Bool(false),
	}), nil)
	awscdk.Aspects_Of(app).Add(cdknag.NewServerlessChecks(&cdknag.NagPackProps{
		LogIgnores: jsii.Bool(true), Reports: jsii.Bool(false),
	}), nil)
	if dev, err = synthesize(devStack, routes.All(), routes.Processors()); err != nil {
		return err
	}
	prod, err = synthesize(prodStack, prodRoutes, routes.Processors())
	return err
}

// prodDeclarations are the real routes.
func prodDeclarations() []routes.Route { return slices.Clone(routes.All()) }

func synthesize(s *stack.Stack, rs []routes.Route, ps []routes.Processor) (out *synthesized, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("synthesize %s: %v", *s.StackName(), r)
		}
	}()
	parent, err := templateJSON(assertions.Template_FromStack(s.Stack, nil))
	if err != nil {
		return nil, err
	}
	merged := map[string]any{}
	maps.Copy(merged, parent)
	resources := maps.Clone(parent["Resources"].(map[string]any))
	sizes := map[string]int{*s.StackName(): len(resources)}
	// Each nested stack's resources join the parent's, with every
	// reference to a parameter replaced by the parent's value for it, so
	// the tests read one template as if nothing were nested.
	for _, nested := range nestedStacks(s) {
		child, err := templateJSON(assertions.Template_FromStack(nested, nil))
		if err != nil {
			return nil, err
		}
		id := logicalID(resolve(s.Stack, nested.NestedStackResource().Ref()))
		stackResource, _ := resources[id].(map[string]any)
		props, _ := stackResource["Properties"].(map[string]any)
		params, _ := props["Parameters"].(map[string]any)
		inner, _ := substitute(child["Resources"], params).(map[string]any)
		sizes[*nested.Node().Path()] = len(inner)
		for rid, r := range inner {
			if _, dup := resources[rid]; dup {
				return nil, fmt.Errorf("nested stack %s: logical id %s is also the parent's", *nested.Node().Path(), rid)
			}
			resources[rid] = r
		}
	}
	merged["Resources"] = resources
	template := assertions.Template_FromJSON(&merged, nil)
	raw, err := json.Marshal(merged)
	if err != nil {
		return nil, err
	}
	var doc struct {
		Resources map[string]resource `json:"Resources"`
		Outputs   map[string]any      `json:"Outputs"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	return &synthesized{
		stack: s, template: template, routes: rs, processors: ps, consumers: routes.Consumers(),
		resources: doc.Resources, outputs: doc.Outputs, sizes: sizes,
	}, nil
}

func templateJSON(t assertions.Template) (map[string]any, error) {
	raw, err := json.Marshal(t.ToJSON())
	if err != nil {
		return nil, err
	}
	var out map[string]any
	return out, json.Unmarshal(raw, &out)
}

// nestedStacks are the stacks nested in s, at any depth.
func nestedStacks(s *stack.Stack) []awscdk.NestedStack {
	var out []awscdk.NestedStack
	for _, c := range *s.Node().FindAll(constructs.ConstructOrder_PREORDER) {
		if n, ok := c.(awscdk.NestedStack); ok && *awscdk.NestedStack_IsNestedStack(c) {
			out = append(out, n)
		}
	}
	return out
}

func resolve(s awscdk.Stack, token *string) any {
	raw, _ := json.Marshal(s.Resolve(token))
	var v any
	_ = json.Unmarshal(raw, &v)
	return v
}

// substitute replaces each {"Ref": parameter} in v with the parameter's
// value in params.
func substitute(v any, params map[string]any) any {
	switch v := v.(type) {
	case map[string]any:
		if ref, ok := v["Ref"].(string); ok && len(v) == 1 {
			if p, ok := params[ref]; ok {
				return p
			}
		}
		out := make(map[string]any, len(v))
		for k, x := range v {
			out[k] = substitute(x, params)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = substitute(x, params)
		}
		return out
	}
	return v
}

// fakeBuild stands in for `make build`: the stack only needs each
// function's asset directory to exist.
func fakeBuild(dir string, functions []string) error {
	for _, fn := range functions {
		if err := os.MkdirAll(filepath.Join(dir, fn), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, fn, "bootstrap"), []byte("not a binary"), 0o755); err != nil {
			return err
		}
	}
	return nil
}

// cdkContext is the context in cdk.json (feature flags included), so the
// tests synthesize what `cdk synth` does.
func cdkContext() (map[string]any, error) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "cdk.json"))
	if err != nil {
		return nil, err
	}
	var cfg struct {
		Context map[string]any `json:"context"`
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("cdk.json: %w", err)
	}
	return cfg.Context, nil
}

// check runs an assertions call, which panics on a mismatch, as a test
// error.
func check(t *testing.T, what string, assertion func()) {
	t.Helper()
	defer func() {
		t.Helper()
		if r := recover(); r != nil {
			t.Errorf("%s: %v", what, r)
		}
	}()
	assertion()
}

// ref resolves a construct attribute to the CloudFormation expression the
// template uses for it, e.g. {"Ref": "DataReactions3CAFCFEE"}.
func (s *synthesized) ref(token *string) any {
	resolved := s.stack.Resolve(token)
	raw, _ := json.Marshal(resolved)
	var v any
	_ = json.Unmarshal(raw, &v)
	return v
}

// logicalID is the logical id behind a {"Ref": id} or {"Fn::GetAtt": [id, _]}.
var logicalID = template.LogicalID

// ofType returns the resources of a CloudFormation type by logical id.
func (s *synthesized) ofType(typ string) map[string]resource {
	out := map[string]resource{}
	for id, r := range s.resources {
		if r.Type == typ {
			out[id] = r
		}
	}
	return out
}

func (s *synthesized) functionID(fn string) string {
	return logicalID(s.ref(s.stack.Functions.Get(fn).FunctionName()))
}

func (s *synthesized) roleID(fn string) string {
	return logicalID(s.ref(s.stack.Functions.Get(fn).Role().RoleName()))
}

// tableIDs maps each table's logical id to its declared name.
func (s *synthesized) tableIDs() map[string]string {
	out := map[string]string{}
	for _, t := range declaredTables() {
		out[logicalID(s.ref(s.stack.Data.Table(t).TableName()))] = t.Name
	}
	return out
}

func both() map[string]*synthesized { return map[string]*synthesized{"dev": dev, "prod": prod} }

func obj(kv ...any) *map[string]any {
	m := map[string]any{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	return &m
}

func like(kv ...any) assertions.Matcher { return assertions.Match_ObjectLike(obj(kv...)) }
