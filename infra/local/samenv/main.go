// Command samenv prepares `sam local invoke` for Rally's functions from the
// synthesized template (cdk.out/Rally-<stage>.template.json): the
// --env-vars file giving each function, by its logical id, its environment
// with every value CloudFormation would resolve at deploy time (table
// names, the cache endpoint, secrets, role ARNs) replaced by what the local
// stack uses, and the command that invokes a function by its declared name.
//
// SAM sets only variables the template declares, so samenv also writes a
// copy of the template beside it (Rally-<stage>.sam.template.json) whose
// functions declare the local-only ones: RALLY_DYNAMODB_ENDPOINT (without
// it a function would call DynamoDB in AWS with your credentials), and
// RALLY_ANALYTICS_DIR, RALLY_EXPORTS_DIR or RALLY_LAMBDA_ENDPOINT where the
// function sends analytics events, writes export documents or invokes other
// functions.
//
//	make build && npx cdk synth
//	make sam-env FN=favorite-game
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/rallyhq/rally/infra/local/stack"
	"github.com/rallyhq/rally/shared/config"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
)

// Local is where a function running in SAM's container finds the local
// stack's services.
type Local struct {
	DynamoDB string // DynamoDB Local holding the tables make dev creates
	Redis    string
	API      string // make dev's gateway, which serves Lambda's Invoke API
}

// DefaultLocal reaches services on the Docker host by the name Docker
// Desktop gives it (on Linux: sam local invoke --add-host
// host.docker.internal:host-gateway, and services listening beyond
// 127.0.0.1).
var DefaultLocal = Local{
	DynamoDB: "http://host.docker.internal:8000",
	Redis:    "redis://host.docker.internal:6379",
	API:      "http://host.docker.internal:3000",
}

// Variables only the local runs need, declared in the SAM template copy.
const (
	dynamoDBEndpointVar = "RALLY_DYNAMODB_ENDPOINT"
	analyticsDirVar     = "RALLY_ANALYTICS_DIR"
	lambdaEndpointVar   = "RALLY_LAMBDA_ENDPOINT"
	exportsDirVar       = "RALLY_EXPORTS_DIR"
	exportLinksVar      = "RALLY_EXPORT_LINKS"
)

// Function is one function of the template: its declared name, logical id
// and environment as synthesized.
type Function struct {
	Name      string
	LogicalID string
	Env       map[string]any
}

// Functions reads the template's Lambda functions, by declared name (their
// RALLY_FUNCTION variable).
func Functions(template map[string]any) (map[string]Function, error) {
	resources, _ := template["Resources"].(map[string]any)
	if len(resources) == 0 {
		return nil, errors.New("samenv: the template has no Resources")
	}
	out := map[string]Function{}
	for _, id := range slices.Sorted(maps.Keys(resources)) {
		r, _ := resources[id].(map[string]any)
		if r["Type"] != "AWS::Lambda::Function" {
			continue
		}
		props, _ := r["Properties"].(map[string]any)
		env, _ := props["Environment"].(map[string]any)
		vars, _ := env["Variables"].(map[string]any)
		name, _ := vars["RALLY_FUNCTION"].(string)
		if name == "" {
			continue // not a Rally function (a CDK helper)
		}
		if first, dup := out[name]; dup {
			return nil, fmt.Errorf("samenv: function %s is both %s and %s", name, first.LogicalID, id)
		}
		out[name] = Function{Name: name, LogicalID: id, Env: vars}
	}
	if len(out) == 0 {
		return nil, errors.New("samenv: the template has no Rally functions (RALLY_FUNCTION)")
	}
	return out, nil
}

// Env is fn's environment for a local run: every variable the template
// declares, with values CloudFormation resolves replaced by local ones,
// and the local-only variables. A variable with an unresolved value
// samenv knows no local value for is an error naming it.
func Env(fn Function, local Local) (map[string]string, error) {
	tables := map[string]string{}
	for _, t := range schema.Tables() {
		tables[t.EnvVar()] = t.Name // make dev creates them unprefixed
	}
	functions := map[string]string{}
	for _, name := range routes.Functions() {
		functions[routes.FunctionEnvVar(name)] = name // the Invoke API serves declared names
	}
	secretARNs := map[string]bool{}
	for _, sec := range routes.Secrets() {
		secretARNs[sec.ARNVar] = true
	}
	out := map[string]string{dynamoDBEndpointVar: local.DynamoDB}
	var errs []error
	for name, v := range fn.Env {
		literal, isLiteral := v.(string)
		switch {
		case tables[name] != "":
			out[name] = tables[name]
		case functions[name] != "":
			out[name] = functions[name]
			out[lambdaEndpointVar] = local.API
		case name == "RALLY_STAGE":
			// The stage that starts with local stand-ins for the secrets a
			// deployment gives (log, cursor and erasure keys).
			out[name] = config.LocalStage
		case secretARNs[name]:
			// No Secrets Manager beside SAM's container: the function uses
			// the secret's local key (routes.Secret Local), as the local
			// stack does, so cursors and hashes agree with it.
			out[name] = ""
		case name == "RALLY_REDIS_URL":
			out[name] = local.Redis
		case name == "RALLY_REDIS_CLUSTER":
			out[name] = "false" // one local redis-server
		case name == "RALLY_TRACING":
			out[name] = "false" // no X-Ray daemon beside SAM's container
		case name == "RALLY_FIREHOSE_STREAM":
			out[name] = "" // events are written as Parquet files instead
			out[analyticsDirVar] = "/tmp/rally-analytics"
		case name == "RALLY_EXPORT_BUCKET":
			out[name] = "" // documents are written as files instead
			out[exportsDirVar] = "/tmp/rally-exports"
			out[exportLinksVar] = local.API
		case name == "RALLY_SERVICE_ROLES":
			// The local principals of the roles its routes admit.
			out[name] = strings.Join(stack.DefaultPrincipals().Of(routes.AdmittedBy(routes.All(), fn.Name)), ",")
		case isLiteral:
			out[name] = literal
		default:
			raw, _ := json.Marshal(v)
			errs = append(errs, fmt.Errorf("samenv: %s (%s): %s is %s, and samenv has no local value for it", fn.Name, fn.LogicalID, name, raw))
		}
	}
	return out, errors.Join(errs...)
}

// EnvVars is the --env-vars document: each function's environment by
// logical id.
func EnvVars(fns map[string]Function, local Local) (map[string]map[string]string, error) {
	out := map[string]map[string]string{}
	var errs []error
	for _, fn := range fns {
		env, err := Env(fn, local)
		errs = append(errs, err)
		out[fn.LogicalID] = env
	}
	return out, errors.Join(errs...)
}

// SAMTemplate is template with each function declaring the variables its
// local environment adds (empty: --env-vars gives them values).
func SAMTemplate(template map[string]any, envVars map[string]map[string]string) (map[string]any, error) {
	raw, err := json.Marshal(template)
	if err != nil {
		return nil, err
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, err
	}
	resources, _ := out["Resources"].(map[string]any)
	for id, env := range envVars {
		r, _ := resources[id].(map[string]any)
		props, _ := r["Properties"].(map[string]any)
		environment, _ := props["Environment"].(map[string]any)
		vars, _ := environment["Variables"].(map[string]any)
		if vars == nil {
			return nil, fmt.Errorf("samenv: %s has no environment in the template", id)
		}
		for name := range env {
			if _, ok := vars[name]; !ok {
				vars[name] = ""
			}
		}
	}
	return out, nil
}

// Command is the sam local invoke of fn with event, or with an empty
// event when there is none (a function added without its sample).
func Command(samTemplate, envFile string, fn Function, event string) string {
	e := "--no-event"
	if event != "" {
		e = "-e " + event
	}
	return fmt.Sprintf("sam local invoke -t %s %s %s --env-vars %s", samTemplate, fn.LogicalID, e, envFile)
}

// sampleEvent is fn's sample in eventsDir, "" when it has none.
func sampleEvent(eventsDir, fn string) string {
	path := filepath.Join(eventsDir, fn+".json")
	if _, err := os.Stat(path); err != nil {
		return ""
	}
	return path
}

func main() {
	stage := flag.String("stage", "dev", "the stage synthesized (cdk.out/Rally-<stage>.template.json)")
	template := flag.String("template", "", "the synthesized template (default cdk.out/Rally-<stage>.template.json)")
	out := flag.String("out", filepath.Join(".local", "sam-env.json"), "where to write the --env-vars file")
	fn := flag.String("fn", "", "a function name (e.g. favorite-game): print its sam local invoke command")
	local := DefaultLocal
	flag.StringVar(&local.DynamoDB, "dynamodb", local.DynamoDB, "DynamoDB endpoint as the function's container reaches it")
	flag.StringVar(&local.Redis, "redis", local.Redis, "Redis URL as the function's container reaches it")
	flag.StringVar(&local.API, "api", local.API, "the local stack (make dev) as the function's container reaches it")
	flag.Parse()
	if *template == "" {
		*template = filepath.Join("cdk.out", "Rally-"+*stage+".template.json")
	}
	if err := run(*template, *out, *fn, "events", local); err != nil {
		fmt.Fprintln(os.Stderr, "rally:", err)
		os.Exit(1)
	}
}

func run(templatePath, out, fnName, eventsDir string, local Local) error {
	raw, err := os.ReadFile(templatePath)
	if err != nil {
		return fmt.Errorf("%w (run make build && npx cdk synth first)", err)
	}
	var template map[string]any
	if err := json.Unmarshal(raw, &template); err != nil {
		return fmt.Errorf("%s: %w", templatePath, err)
	}
	fns, err := Functions(template)
	if err != nil {
		return err
	}
	envVars, err := EnvVars(fns, local)
	if err != nil {
		return err
	}
	sam, err := SAMTemplate(template, envVars)
	if err != nil {
		return err
	}
	samPath := strings.TrimSuffix(templatePath, ".template.json") + ".sam.template.json"
	if err := writeJSON(samPath, sam); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	if err := writeJSON(out, envVars); err != nil {
		return err
	}
	fmt.Printf("rally: wrote %s (%d functions) and %s\n", out, len(envVars), samPath)
	if fnName == "" {
		fmt.Println("rally: FN=<function> prints its command; functions:", strings.Join(sortedNames(fns), " "))
		return nil
	}
	f, ok := fns[fnName]
	if !ok {
		return fmt.Errorf("no function %q in %s; functions: %s", fnName, templatePath, strings.Join(sortedNames(fns), " "))
	}
	fmt.Println(Command(samPath, out, f, sampleEvent(eventsDir, f.Name)))
	return nil
}

func sortedNames(fns map[string]Function) []string {
	names := slices.Collect(maps.Keys(fns))
	sort.Strings(names)
	return names
}

func writeJSON(path string, v any) error {
	raw, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(raw, '\n'), 0o644)
}
