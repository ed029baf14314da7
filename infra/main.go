// Command infra is Rally's CDK app: it synthesizes the Rally-<stage> stack
// (see infra/stack) from the declarations in shared/routes and shared/schema.
// Run it through the CDK CLI from the repository root after `make build`:
//
//	npx cdk synth -c stage=prod -c alarmEmail=oncall@example.com
//
// Context keys (cdk.json holds the defaults; -c key=value overrides):
//
//	stage             deployment name, lowercase (default "dev"); the stack is
//	                  Rally-<stage>; "local" is refused (the local stack's stage).
//	protect           true gives tables, the user pool and the other stateful
//	                  resources deletion protection and keeps them when the
//	                  stack is deleted; false lets them go with it. Default:
//	                  true for every stage but "dev" and "test".
//	jwtIssuer         https URL of an external OIDC issuer for player tokens;
//	jwtAudience       its audience(s), comma-separated. Give both or neither:
//	                  with neither, the stack creates a Cognito user pool.
//	redisEngine       valkey (default) or redis: the ElastiCache Serverless engine.
//	logRetentionDays  retention of function, access and flow logs (default 30;
//	                  one of the periods CloudWatch Logs offers).
//	alarmEmail        optional address subscribed to the alarm topic.
//	gameServerRoleArns  existing IAM roles (or users) game servers call the
//	                  game routes as, comma-separated or a JSON list; with
//	                  none, the stack creates rally-<stage>-game-server.
//	operatorRoleArns  existing IAM roles (or users) operators call every
//	                  service route as; with none, the stack creates
//	                  rally-<stage>-operator.
//	serviceRoleArns   the former single list, read as operatorRoleArns (its
//	                  principals keep every service route, as before) with a
//	                  warning; not with either of the two above.
//	corsOrigins       web origins allowed to call the API from a browser
//	                  (https://game.example.com[:port], comma-separated or a JSON
//	                  list); with none (the default) the API configures no CORS.
//	                  "*" allows any origin, but not with corsAllowCredentials.
//	corsAllowCredentials  true lets browsers send credentials (cookies); player
//	                  tokens travel in Authorization, so games do not need it.
//	buildDir          where `make build` put <function>/bootstrap (default "build").
//	throttleRate      requests a second the API's stage passes on, all callers
//	                  together (default 1000); throttleBurst its burst (default 2000).
//	reservedConcurrency  overrides of the processors' and consumers' reserved
//	                  concurrency: {"counter-processor": 100} in cdk.json, or
//	                  counter-processor=100,streak-processor=10 with -c.
//	accountConcurrency   the account's Lambda concurrency quota in the region
//	                  (default 1000); the reservations must leave 100 of it.
//
// The stack is environment-agnostic and does no lookups, so synthesis needs
// no AWS credentials. cdk-nag's AwsSolutions and Serverless checks run on
// every synthesis; an unsuppressed finding fails it.
package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"

	"github.com/rallyhq/rally/infra/stack"
)

// main does not call jsii.Close: the runtime already waits on its node
// process, and closing it as well is a race (-race reports it when `make
// test` synthesizes through this app). Node exits when this process's pipe
// to it closes.
func main() {
	app := awscdk.NewApp(nil)
	props, err := propsFromContext(app)
	var s *stack.Stack
	if err == nil {
		s, err = stack.New(app, "Rally-"+props.Stage, props)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "rally infra:", err)
		os.Exit(1)
	}
	if len((contextValues{app}).list(legacyServiceRoles)) > 0 {
		awscdk.Annotations_Of(s.Stack).AddWarningV2(jsii.String("rally:"+legacyServiceRoles), jsii.String(
			legacyServiceRoles+" are read as operatorRoleArns: they may call every service route. "+
				"Give game servers' roles as gameServerRoleArns, so they may call the game routes alone."))
	}
	awscdk.Aspects_Of(app).Add(cdknag.NewAwsSolutionsChecks(&cdknag.NagPackProps{Verbose: jsii.Bool(true)}), nil)
	awscdk.Aspects_Of(app).Add(cdknag.NewServerlessChecks(&cdknag.NagPackProps{Verbose: jsii.Bool(true)}), nil)
	app.Synth(nil)
}

func propsFromContext(app awscdk.App) (stack.Props, error) {
	c := contextValues{app}
	p := stack.Props{
		Stage:              c.text("stage", "dev"),
		BuildDir:           c.text("buildDir", "build"),
		JWTIssuer:          c.text("jwtIssuer", ""),
		JWTAudience:        c.list("jwtAudience"),
		RedisEngine:        c.text("redisEngine", stack.EngineValkey),
		AlarmEmail:         c.text("alarmEmail", ""),
		GameServerRoleARNs: c.list("gameServerRoleArns"),
		OperatorRoleARNs:   c.list("operatorRoleArns"),
		CORSOrigins:        c.list("corsOrigins"),
		ImportBucket:       c.text("importBucket", ""),
	}
	if legacy := c.list(legacyServiceRoles); len(legacy) > 0 {
		if len(p.GameServerRoleARNs) > 0 || len(p.OperatorRoleARNs) > 0 {
			return p, fmt.Errorf("context %s is the former name of operatorRoleArns; give gameServerRoleArns and operatorRoleArns alone", legacyServiceRoles)
		}
		p.OperatorRoleARNs = legacy
	}
	var err error
	if p.Protect, err = c.boolean("protect", protectedByDefault(p.Stage)); err != nil {
		return p, err
	}
	if p.CORSCredentials, err = c.boolean("corsAllowCredentials", false); err != nil {
		return p, err
	}
	days, err := c.number("logRetentionDays", 30)
	if err != nil {
		return p, err
	}
	if p.LogRetention, err = stack.RetentionFromDays(days); err != nil {
		return p, err
	}
	if p.ThrottleRate, err = c.positive("throttleRate", stack.DefaultThrottleRate); err != nil {
		return p, err
	}
	burst, err := c.positive("throttleBurst", stack.DefaultThrottleBurst)
	if err == nil && burst != float64(int(burst)) {
		err = fmt.Errorf("context throttleBurst=%v must be a whole number of requests", burst)
	}
	if err != nil {
		return p, err
	}
	p.ThrottleBurst = int(burst)
	if p.AccountConcurrency, err = c.number("accountConcurrency", stack.DefaultAccountConcurrency); err != nil {
		return p, err
	}
	if p.AccountConcurrency < stack.UnreservedMinimum {
		return p, fmt.Errorf("context accountConcurrency=%d must be at least %d", p.AccountConcurrency, stack.UnreservedMinimum)
	}
	if p.Reserved, err = c.counts("reservedConcurrency"); err != nil {
		return p, err
	}
	return p, nil
}

// legacyServiceRoles is the context key deployments named their service
// roles with before the game server and the operator were told apart.
const legacyServiceRoles = "serviceRoleArns"

// protectedByDefault reports whether a stage keeps its data without
// -c protect: every stage but the throwaway ones, dev and test, so a
// staging or production stage named anything at all is protected.
func protectedByDefault(stage string) bool { return stage != "dev" && stage != "test" }

// contextValues reads CDK context values, which arrive as JSON values from
// cdk.json and as strings from -c on the command line.
type contextValues struct{ app awscdk.App }

func (c contextValues) raw(key string) any { return c.app.Node().TryGetContext(jsii.String(key)) }

func (c contextValues) text(key, def string) string {
	switch v := c.raw(key).(type) {
	case string:
		if v = strings.TrimSpace(v); v != "" {
			return v
		}
	case nil:
	default:
		return fmt.Sprint(v)
	}
	return def
}

func (c contextValues) number(key string, def int) (int, error) {
	switch v := c.raw(key).(type) {
	case nil:
		return def, nil
	case float64:
		if v == float64(int(v)) {
			return int(v), nil
		}
	case string:
		if v == "" {
			return def, nil
		}
		if n, err := strconv.Atoi(v); err == nil {
			return n, nil
		}
	}
	return 0, fmt.Errorf("context %s=%v is not a whole number", key, c.raw(key))
}

// positive reads a number greater than zero (a JSON number or a string).
func (c contextValues) positive(key string, def float64) (float64, error) {
	var n float64
	switch v := c.raw(key).(type) {
	case nil:
		return def, nil
	case float64:
		n = v
	case string:
		if strings.TrimSpace(v) == "" {
			return def, nil
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return 0, fmt.Errorf("context %s=%q is not a number", key, v)
		}
		n = f
	default:
		return 0, fmt.Errorf("context %s=%v is not a number", key, v)
	}
	if !(n > 0) || math.IsInf(n, 0) {
		return 0, fmt.Errorf("context %s=%v must be a positive number", key, n)
	}
	return n, nil
}

// counts reads function names with whole numbers: a JSON object (cdk.json)
// or name=n pairs separated by commas (-c).
func (c contextValues) counts(key string) (map[string]int, error) {
	out := map[string]int{}
	set := func(name string, v any) error {
		name = strings.TrimSpace(name)
		var n int
		switch v := v.(type) {
		case float64:
			if v != float64(int(v)) {
				return fmt.Errorf("context %s: %s=%v is not a whole number", key, name, v)
			}
			n = int(v)
		case string:
			var err error
			if n, err = strconv.Atoi(strings.TrimSpace(v)); err != nil {
				return fmt.Errorf("context %s: %s=%q is not a whole number", key, name, v)
			}
		default:
			return fmt.Errorf("context %s: %s=%v is not a whole number", key, name, v)
		}
		if name == "" {
			return fmt.Errorf("context %s: a value without a function name", key)
		}
		out[name] = n
		return nil
	}
	switch v := c.raw(key).(type) {
	case nil:
		return nil, nil
	case map[string]any:
		for name, n := range v {
			if err := set(name, n); err != nil {
				return nil, err
			}
		}
	case string:
		var obj map[string]any
		if err := json.Unmarshal([]byte(v), &obj); err == nil {
			for name, n := range obj {
				if err := set(name, n); err != nil {
					return nil, err
				}
			}
			break
		}
		for _, pair := range strings.Split(v, ",") {
			if strings.TrimSpace(pair) == "" {
				continue
			}
			name, n, ok := strings.Cut(pair, "=")
			if !ok {
				return nil, fmt.Errorf("context %s: %q is not function=number", key, pair)
			}
			if err := set(name, n); err != nil {
				return nil, err
			}
		}
	default:
		return nil, fmt.Errorf("context %s=%v must map function names to whole numbers", key, v)
	}
	return out, nil
}

// boolean reads true or false (a JSON boolean or a string); absent or
// empty is def.
func (c contextValues) boolean(key string, def bool) (bool, error) {
	switch v := c.raw(key).(type) {
	case nil:
		return def, nil
	case bool:
		return v, nil
	case string:
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "":
			return def, nil
		case "false":
			return false, nil
		case "true":
			return true, nil
		}
	}
	return false, fmt.Errorf("context %s=%v must be true or false", key, c.raw(key))
}

// list accepts a JSON array, a JSON-encoded array string or a
// comma-separated string.
func (c contextValues) list(key string) []string {
	var items []string
	switch v := c.raw(key).(type) {
	case []any:
		for _, x := range v {
			items = append(items, fmt.Sprint(x))
		}
	case string:
		if err := json.Unmarshal([]byte(v), &items); err != nil {
			items = strings.Split(v, ",")
		}
	}
	var out []string
	for _, s := range items {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
