// Command infra is Rally's CDK app: it synthesizes the Rally-<stage> stack
// (see infra/stack) from the declarations in shared/routes and shared/schema.
// Run it through the CDK CLI from the repository root after `make build`:
//
//	npx cdk synth -c stage=prod -c alarmEmail=oncall@example.com
//
// Context keys (cdk.json holds the defaults; -c key=value overrides):
//
//	stage             deployment name, lowercase (default "dev"); the stack is
//	                  Rally-<stage>. Stages named prod* get deletion protection
//	                  and retain their data when the stack is deleted.
//	jwtIssuer         https URL of an external OIDC issuer for player tokens;
//	jwtAudience       its audience(s), comma-separated. Give both or neither:
//	                  with neither, the stack creates a Cognito user pool.
//	redisEngine       valkey (default) or redis: the ElastiCache Serverless engine.
//	logRetentionDays  retention of function, access and flow logs (default 30;
//	                  one of the periods CloudWatch Logs offers).
//	alarmEmail        optional address subscribed to the alarm topic.
//	serviceRoleArns   existing IAM roles (or users) allowed to call the service
//	                  routes, comma-separated or a JSON list; with none, the
//	                  stack creates rally-<stage>-game-server and -operator.
//	buildDir          where `make build` put <function>/bootstrap (default "build").
//
// The stack is environment-agnostic and does no lookups, so synthesis needs
// no AWS credentials. cdk-nag's AwsSolutions checks run on every synthesis;
// an unsuppressed finding fails it.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"

	"github.com/rallyhq/rally/infra/stack"
)

func main() {
	defer jsii.Close()
	app := awscdk.NewApp(nil)
	props, err := propsFromContext(app)
	if err == nil {
		_, err = stack.New(app, "Rally-"+props.Stage, props)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "rally infra:", err)
		os.Exit(1)
	}
	awscdk.Aspects_Of(app).Add(cdknag.NewAwsSolutionsChecks(&cdknag.NagPackProps{Verbose: jsii.Bool(true)}), nil)
	app.Synth(nil)
}

func propsFromContext(app awscdk.App) (stack.Props, error) {
	c := contextValues{app}
	p := stack.Props{
		Stage:           c.text("stage", "dev"),
		BuildDir:        c.text("buildDir", "build"),
		JWTIssuer:       c.text("jwtIssuer", ""),
		JWTAudience:     c.list("jwtAudience"),
		RedisEngine:     c.text("redisEngine", stack.EngineValkey),
		AlarmEmail:      c.text("alarmEmail", ""),
		ServiceRoleARNs: c.list("serviceRoleArns"),
	}
	p.Protect = strings.HasPrefix(p.Stage, "prod")
	days, err := c.number("logRetentionDays", 30)
	if err != nil {
		return p, err
	}
	if p.LogRetention, err = stack.RetentionFromDays(days); err != nil {
		return p, err
	}
	return p, nil
}

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
