package stack_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"

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
	// prodServiceRole is an existing role the prod fixture allows to call
	// service routes, in place of the roles the stack would create.
	prodServiceRole = "arn:aws:iam::123456789012:role/studio/game-backend"
)

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
		Routes:          prodRoutes,
		Stage:           "prod",
		Protect:         true,
		BuildDir:        buildDir,
		JWTIssuer:       prodIssuer,
		JWTAudience:     []string{prodAudience},
		RedisEngine:     stack.EngineRedis,
		LogRetention:    awslogs.RetentionDays_THREE_MONTHS,
		AlarmEmail:      prodEmail,
		ServiceRoleARNs: []string{prodServiceRole},
	})
	if err != nil {
		return err
	}
	// LogIgnores turns every suppressed finding into an info annotation, so
	// the tests can tell the checks ran.
	awscdk.Aspects_Of(app).Add(cdknag.NewAwsSolutionsChecks(&cdknag.NagPackProps{
		LogIgnores: jsii.Bool(true), Reports: jsii.Bool(false),
	}), nil)
	if dev, err = synthesize(devStack, routes.All(), routes.Processors()); err != nil {
		return err
	}
	prod, err = synthesize(prodStack, prodRoutes, routes.Processors())
	return err
}

// prodDeclarations are the real routes, except that list-favorites also
// uses Redis: no declared function yet both runs in the VPC and reads the
// cursor secret, the case that needs a Secrets Manager endpoint.
func prodDeclarations() []routes.Route {
	out := slices.Clone(routes.All())
	for i, r := range out {
		if r.Function == routes.ListFavorites.Function {
			out[i].Uses.Redis = true
		}
	}
	return out
}

func synthesize(s *stack.Stack, rs []routes.Route, ps []routes.Processor) (out *synthesized, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("synthesize %s: %v", *s.StackName(), r)
		}
	}()
	template := assertions.Template_FromStack(s.Stack, nil)
	raw, err := json.Marshal(template.ToJSON())
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
		resources: doc.Resources, outputs: doc.Outputs,
	}, nil
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
func logicalID(expr any) string {
	m, ok := expr.(map[string]any)
	if !ok {
		return ""
	}
	if id, ok := m["Ref"].(string); ok {
		return id
	}
	if att, ok := m["Fn::GetAtt"].([]any); ok && len(att) == 2 {
		id, _ := att[0].(string)
		return id
	}
	return ""
}

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
