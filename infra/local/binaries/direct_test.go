package binaries_test

import (
	"strings"
	"testing"

	"github.com/rallyhq/rally/infra/local/binaries"
	"github.com/rallyhq/rally/infra/local/template"
	"github.com/rallyhq/rally/shared/routes"
)

func TestDirectPointsAFunctionAtTheLocalStack(t *testing.T) {
	const secret = "arn:aws:secretsmanager:us-east-1:000000000000:secret:Rally-dev-Functions-CursorSecret"
	d := binaries.Direct{
		DynamoDB: "http://127.0.0.1:8000", Lambda: "http://localhost:3000",
		Secrets: map[string]string{secret: "cursor-key"}, AnalyticsDir: "/tmp/analytics",
		Principals: routes.Principals{
			routes.GameServer: {"arn:aws:iam::000000000000:user/rallyserver"},
			routes.Operator:   {"arn:aws:iam::000000000000:user/rallylocal"},
		},
	}
	const logKey = "arn:aws:secretsmanager:us-east-1:000000000000:secret:Rally-dev-Functions-LogKeySecret"
	d.Secrets[logKey] = "log-key"
	fn := template.Function{Name: "list-favorites", Env: map[string]string{
		"RALLY_SECRET_ARN":      secret,
		"RALLY_LOG_KEY_ARN":     logKey,
		"RALLY_FIREHOSE_STREAM": "Rally-dev-Analytics-DeliveryStream",
		"RALLY_SERVICE_ROLES":   "arn:aws:iam::000000000000:role/rally-dev-operator",
		"RALLY_TABLE_REACTIONS": "Reactions",
	}}
	env, err := d.Environ(fn)
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{
		"AWS_ENDPOINT_URL_DYNAMODB":         "http://127.0.0.1:8000",
		"AWS_ENDPOINT_URL_DYNAMODB_STREAMS": "http://127.0.0.1:8000",
		"AWS_ENDPOINT_URL_LAMBDA":           "http://localhost:3000",
		"RALLY_CURSOR_KEY":                  "cursor-key",
		"RALLY_LOG_KEY":                     "log-key",
		"RALLY_ANALYTICS_DIR":               "/tmp/analytics",
		"RALLY_TABLE_REACTIONS":             "Reactions",
		// list-favorites serves players alone: no local caller joins.
		"RALLY_SERVICE_ROLES": "arn:aws:iam::000000000000:role/rally-dev-operator",
	} {
		if env[k] != want {
			t.Errorf("%s=%q, want %q", k, env[k], want)
		}
	}
	for _, gone := range []string{"RALLY_SECRET_ARN", "RALLY_LOG_KEY_ARN", "RALLY_FIREHOSE_STREAM"} {
		if _, ok := env[gone]; ok {
			t.Errorf("%s is still set: the binary would call a service nothing serves locally", gone)
		}
	}
	if fn.Env["RALLY_SECRET_ARN"] != secret {
		t.Error("Environ changed the template's environment")
	}

	// The local callers of the roles a function's routes admit join its
	// allow-list: the game server on a game route, the operator alone on
	// an operations route.
	for name, want := range map[string]string{
		"put-game":  "arn:aws:iam::000000000000:role/rally-dev-operator,arn:aws:iam::000000000000:user/rallyserver,arn:aws:iam::000000000000:user/rallylocal",
		"start-job": "arn:aws:iam::000000000000:role/rally-dev-operator,arn:aws:iam::000000000000:user/rallylocal",
	} {
		env, err := d.Environ(template.Function{Name: name, Env: map[string]string{"RALLY_SERVICE_ROLES": "arn:aws:iam::000000000000:role/rally-dev-operator"}})
		if err != nil {
			t.Fatal(err)
		}
		if env["RALLY_SERVICE_ROLES"] != want {
			t.Errorf("%s: RALLY_SERVICE_ROLES=%q, want %q", name, env["RALLY_SERVICE_ROLES"], want)
		}
	}

	fn.Env["RALLY_SECRET_ARN"] = "arn:aws:secretsmanager:us-east-1:000000000000:secret:Other"
	if _, err := d.Environ(fn); err == nil || !strings.Contains(err.Error(), "RALLY_SECRET_ARN") {
		t.Errorf("a secret the stack does not hold: %v, want an error naming RALLY_SECRET_ARN", err)
	}
}
