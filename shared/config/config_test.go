package config

import (
	"os"
	"strings"
	"testing"

	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
)

// clearEnv unsets every RALLY_ variable for the test.
func clearEnv(t *testing.T) {
	t.Helper()
	for _, v := range os.Environ() {
		if k, _, _ := strings.Cut(v, "="); strings.HasPrefix(k, "RALLY_") {
			t.Setenv(k, "")
		}
	}
}

// A deployed function told no name for a table it uses, or for a table
// whose stream it reads, does not start, and says which variable is
// missing; the local stage falls back to RALLY_TABLE_PREFIX + the
// logical name.
func TestADeployedFunctionIsToldEveryTableItUses(t *testing.T) {
	tests := []struct {
		name     string
		stage    string
		function string
		missing  schema.Table
		want     string // "" starts
	}{
		{"a table it writes", "prod", routes.PutGame.Function, schema.Games, "RALLY_TABLE_GAMES"},
		{"a table it reads", "prod", routes.GetJob.Function, schema.Jobs, "RALLY_TABLE_JOBS"},
		{"the table whose stream it reads", "prod", routes.AnalyticsShipper.Function, schema.ScoreEvents, "RALLY_TABLE_SCOREEVENTS"},
		{"a table it does not use", "prod", routes.PutGame.Function, schema.Streaks, ""},
		{"locally", LocalStage, routes.PutGame.Function, schema.Games, ""},
		{"in a process serving several functions", "prod", "", schema.Games, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearEnv(t)
			t.Setenv("RALLY_STAGE", tt.stage)
			t.Setenv("RALLY_FUNCTION", tt.function)
			t.Setenv("RALLY_TABLE_PREFIX", "Rally-prod-")
			for _, table := range schema.Tables() {
				if table.Name != tt.missing.Name {
					t.Setenv(table.EnvVar(), "Rally-prod-"+table.Name+"-ABC123")
				}
			}
			c, err := FromEnv()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("FromEnv: %v, want it to start", err)
			case tt.want == "" && c.Tables.Of(tt.missing) != "Rally-prod-"+tt.missing.Name:
				t.Fatalf("%s is named %q, want the prefix and its logical name", tt.missing.Name, c.Tables.Of(tt.missing))
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), tt.function)):
				t.Fatalf("FromEnv: %v, want an error naming %s and %s", err, tt.function, tt.want)
			}
		})
	}
}

// Each declared secret is read from its own variables: its ARN, or the
// key itself.
func TestEverySecretIsReadFromItsVariables(t *testing.T) {
	clearEnv(t)
	for _, sec := range routes.Secrets() {
		t.Setenv(sec.ARNVar, "arn of "+sec.Name)
		t.Setenv(sec.KeyVar, "key of "+sec.Name)
	}
	c, err := FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	for _, sec := range routes.Secrets() {
		if arn, key := c.Secret(sec); arn != "arn of "+sec.Name || key != "key of "+sec.Name {
			t.Errorf("%s: ARN %q, key %q, want those of %s and %s", sec.Name, arn, key, sec.ARNVar, sec.KeyVar)
		}
	}
}
