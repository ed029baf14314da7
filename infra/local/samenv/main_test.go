package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"

	"github.com/rallyhq/rally/infra/local/stack"
	infra "github.com/rallyhq/rally/infra/stack"
	"github.com/rallyhq/rally/shared/app"
	"github.com/rallyhq/rally/shared/config"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
)

var (
	synthOnce sync.Once
	synthRaw  []byte
	synthErr  error
)

// synthesized is the Rally-dev template as `cdk synth` writes it (the
// parent stack, where the functions are), synthesized once in process.
func synthesized(t *testing.T) map[string]any {
	t.Helper()
	synthOnce.Do(func() { synthRaw, synthErr = synthesize() })
	if synthErr != nil {
		t.Fatal(synthErr)
	}
	var out map[string]any
	if err := json.Unmarshal(synthRaw, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func synthesize() (_ []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("synthesize: %v", r)
		}
	}()
	tmp, err := os.MkdirTemp("", "rally-samenv")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	for _, fn := range routes.Functions() {
		if err := os.MkdirAll(filepath.Join(tmp, fn), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(tmp, fn, "bootstrap"), []byte("not a binary"), 0o755); err != nil {
			return nil, err
		}
	}
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "cdk.json"))
	if err != nil {
		return nil, err
	}
	var cfg struct {
		Context map[string]any `json:"context"`
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, err
	}
	app := awscdk.NewApp(&awscdk.AppProps{Context: &cfg.Context, Outdir: jsii.String(filepath.Join(tmp, "cdk.out"))})
	s, err := infra.New(app, "Rally-dev", infra.Props{Stage: "dev", BuildDir: tmp})
	if err != nil {
		return nil, err
	}
	return json.Marshal(assertions.Template_FromStack(s.Stack, nil).ToJSON())
}

var testLocal = Local{DynamoDB: "http://ddb.test:8000", Redis: "redis://redis.test:6379", API: "http://api.test:3000"}

// Every declared function gets, under its logical id, every variable the
// template gives it with a value a local run can use: no CloudFormation
// expression is left, tables are the names make dev creates, Redis and
// DynamoDB are the local ones, and the service allow-list is the local
// roles.
func TestEveryFunctionGetsItsTemplateEnvironmentWithLocalValues(t *testing.T) {
	template := synthesized(t)
	fns, err := Functions(template)
	if err != nil {
		t.Fatal(err)
	}
	envVars, err := EnvVars(fns, testLocal)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range routes.Functions() {
		fn, ok := fns[name]
		if !ok {
			t.Errorf("function %s is not in the template", name)
			continue
		}
		env := envVars[fn.LogicalID]
		for v := range fn.Env {
			if _, ok := env[v]; !ok {
				t.Errorf("%s: %s is in the template but not in the env-vars file", name, v)
			}
		}
		for v, value := range env {
			if strings.Contains(value, "Fn::") || strings.Contains(value, "{{resolve") || strings.Contains(value, "Ref") {
				t.Errorf("%s: %s = %q is not a local value", name, v, value)
			}
		}
		if env["RALLY_DYNAMODB_ENDPOINT"] != testLocal.DynamoDB || env["RALLY_FUNCTION"] != name || env["RALLY_STAGE"] != config.LocalStage {
			t.Errorf("%s: endpoint %q, function %q", name, env["RALLY_DYNAMODB_ENDPOINT"], env["RALLY_FUNCTION"])
		}
		uses, _ := routes.UsesOf(name)
		for _, tbl := range uses.Tables() {
			if env[tbl.EnvVar()] != tbl.Name {
				t.Errorf("%s: %s = %q, want the local table %s", name, tbl.EnvVar(), env[tbl.EnvVar()], tbl.Name)
			}
		}
		if uses.Redis && (env["RALLY_REDIS_URL"] != testLocal.Redis || env["RALLY_REDIS_CLUSTER"] != "false") {
			t.Errorf("%s: redis %q cluster %q", name, env["RALLY_REDIS_URL"], env["RALLY_REDIS_CLUSTER"])
		}
		// The local operator everywhere, the local game server on the
		// game routes alone.
		want := []string{stack.OperatorUser, stack.OperatorRole}
		if slices.Contains(routes.AdmittedBy(routes.All(), name), routes.GameServer) {
			want = []string{stack.GameServerUser, stack.GameServerRole, stack.OperatorUser, stack.OperatorRole}
		}
		if roles, ok := env["RALLY_SERVICE_ROLES"]; ok && roles != strings.Join(want, ",") {
			t.Errorf("%s: RALLY_SERVICE_ROLES %q, want %q", name, roles, strings.Join(want, ","))
		}
		known := append(uses.Tables(), sources(name)...)
		for v := range env {
			if strings.HasPrefix(v, "RALLY_TABLE_") && !slices.ContainsFunc(known, func(t schema.Table) bool { return t.EnvVar() == v }) {
				t.Errorf("%s: given %s, a table it does not use", name, v)
			}
		}
	}
}

// Each function starts with its env-vars entry as it would in SAM's
// container (only that environment): its configuration loads, it is the
// local stage (local stand-ins for the deployment's secrets) and it reaches
// the local DynamoDB.
func TestEveryFunctionStartsWithItsLocalEnvironment(t *testing.T) {
	fns, err := Functions(synthesized(t))
	if err != nil {
		t.Fatal(err)
	}
	envVars, err := EnvVars(fns, testLocal)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range sortedNames(fns) {
		t.Run(name, func(t *testing.T) {
			for _, v := range os.Environ() {
				if k, _, _ := strings.Cut(v, "="); strings.HasPrefix(k, "RALLY_") {
					t.Setenv(k, "")
				}
			}
			for k, v := range envVars[fns[name].LogicalID] {
				t.Setenv(k, v)
			}
			cfg, err := config.FromEnv()
			if err != nil {
				t.Fatal(err)
			}
			if !cfg.Local() || cfg.DynamoDBEndpoint != testLocal.DynamoDB || cfg.Function != name {
				t.Errorf("stage %q, DynamoDB %q, function %q", cfg.Stage, cfg.DynamoDBEndpoint, cfg.Function)
			}
			d, err := app.New(context.Background(), cfg, app.Options{LogOutput: io.Discard, Function: name})
			if err != nil {
				t.Fatalf("the function would not start: %v", err)
			}
			_ = d
		})
	}
}

// SAM sets only variables the template declares: the SAM copy declares the
// local-only ones on each function, and the synthesized template is left
// as it was.
func TestTheSAMTemplateDeclaresTheLocalVariables(t *testing.T) {
	template := synthesized(t)
	before, _ := json.Marshal(template)
	fns, _ := Functions(template)
	envVars, err := EnvVars(fns, testLocal)
	if err != nil {
		t.Fatal(err)
	}
	sam, err := SAMTemplate(template, envVars)
	if err != nil {
		t.Fatal(err)
	}
	if after, _ := json.Marshal(template); string(after) != string(before) {
		t.Error("SAMTemplate changed the synthesized template")
	}
	samFns, err := Functions(sam)
	if err != nil {
		t.Fatal(err)
	}
	for name, fn := range samFns {
		for v := range envVars[fn.LogicalID] {
			if _, ok := fn.Env[v]; !ok {
				t.Errorf("%s: the SAM template does not declare %s, so --env-vars cannot set it", name, v)
			}
		}
		if fn.LogicalID != fns[name].LogicalID {
			t.Errorf("%s: logical id %s in the SAM template, %s in the synthesized one", name, fn.LogicalID, fns[name].LogicalID)
		}
	}
}

// make sam-env FN=<name> writes both files and prints the command for the
// function's logical id and its sample event, which exists.
func TestRunWritesTheFilesAndPrintsTheCommand(t *testing.T) {
	dir := t.TempDir()
	templatePath := filepath.Join(dir, "Rally-dev.template.json")
	raw, _ := json.Marshal(synthesized(t))
	if err := os.WriteFile(templatePath, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "local", "sam-env.json")
	events := filepath.Join("..", "..", "..", "events")
	if err := run(templatePath, out, "favorite-game", events, testLocal); err != nil {
		t.Fatal(err)
	}
	var envVars map[string]map[string]string
	raw, err := os.ReadFile(out)
	if err == nil {
		err = json.Unmarshal(raw, &envVars)
	}
	if err != nil {
		t.Fatal(err)
	}
	fns, _ := Functions(synthesized(t))
	fn := fns["favorite-game"]
	if envVars[fn.LogicalID]["RALLY_TABLE_REACTIONS"] != "Reactions" {
		t.Errorf("env-vars for %s: %v", fn.LogicalID, envVars[fn.LogicalID])
	}
	if _, err := os.Stat(filepath.Join(dir, "Rally-dev.sam.template.json")); err != nil {
		t.Errorf("no SAM template: %v", err)
	}
	cmd := Command(filepath.Join(dir, "Rally-dev.sam.template.json"), out, fn, sampleEvent(events, fn.Name))
	if !strings.Contains(cmd, " "+fn.LogicalID+" ") || !strings.Contains(cmd, "-e "+filepath.Join(events, "favorite-game.json")) ||
		!strings.Contains(cmd, "--env-vars "+out) {
		t.Errorf("command %q", cmd)
	}
	// Every function is invoked with its sample; a function with none
	// would be invoked with an empty event, never a file that is not there.
	for _, name := range routes.Functions() {
		if cmd := Command("t.json", "e.json", fns[name], sampleEvent(events, name)); !strings.Contains(cmd, "-e ") {
			t.Errorf("%s has no sample event in events/: %s", name, cmd)
		}
	}
	if cmd := Command("t.json", "e.json", fn, sampleEvent(events, "no-such-function")); !strings.Contains(cmd, "--no-event") {
		t.Errorf("without a sample: %s", cmd)
	}
	if err := run(templatePath, out, "no-such-function", events, testLocal); err == nil || !strings.Contains(err.Error(), "favorite-game") {
		t.Errorf("an unknown function: %v, want an error listing the functions", err)
	}
}

// A value CloudFormation resolves that samenv has no local value for stops
// it, naming the function and the variable, rather than passing an
// expression the function would read as a string.
func TestAnUnknownDeployTimeValueIsRefused(t *testing.T) {
	fn := Function{Name: "favorite-game", LogicalID: "Fn1", Env: map[string]any{
		"RALLY_FUNCTION":  "favorite-game",
		"RALLY_NEW_THING": map[string]any{"Ref": "SomethingNew"},
	}}
	_, err := Env(fn, testLocal)
	if err == nil || !strings.Contains(err.Error(), "RALLY_NEW_THING") || !strings.Contains(err.Error(), "favorite-game") {
		t.Fatalf("Env = %v, want an error naming favorite-game and RALLY_NEW_THING", err)
	}
}

// sources are the tables whose streams function reads: the stack names
// them to it too (a record's table is known by its stream ARN).
func sources(function string) []schema.Table {
	var out []schema.Table
	for _, p := range routes.Processors() {
		if p.Function == function {
			out = append(out, p.Source)
		}
	}
	for _, c := range routes.Consumers() {
		if c.Function == function {
			out = append(out, c.Uses.Streams...)
		}
	}
	return out
}
