package binaries_test

import (
	"strings"
	"testing"

	"github.com/rallyhq/rally/infra/local/binaries"
	"github.com/rallyhq/rally/infra/local/template"
)

func TestDirectPointsAFunctionAtTheLocalStack(t *testing.T) {
	const secret = "arn:aws:secretsmanager:us-east-1:000000000000:secret:Rally-dev-Functions-CursorSecret"
	d := binaries.Direct{
		DynamoDB: "http://127.0.0.1:8000", Lambda: "http://localhost:3000",
		Secrets: map[string]string{secret: "cursor-key"}, AnalyticsDir: "/tmp/analytics",
		ServiceRoles: []string{"arn:aws:iam::000000000000:user/rallylocal"},
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
		"RALLY_SERVICE_ROLES":               "arn:aws:iam::000000000000:role/rally-dev-operator,arn:aws:iam::000000000000:user/rallylocal",
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

	fn.Env["RALLY_SECRET_ARN"] = "arn:aws:secretsmanager:us-east-1:000000000000:secret:Other"
	if _, err := d.Environ(fn); err == nil || !strings.Contains(err.Error(), "RALLY_SECRET_ARN") {
		t.Errorf("a secret the stack does not hold: %v, want an error naming RALLY_SECRET_ARN", err)
	}
}
