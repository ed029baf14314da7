package main

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/jsii-runtime-go"

	"github.com/rallyhq/rally/infra/stack"
	"github.com/rallyhq/rally/shared/routes"
)

func appWith(ctx map[string]any) awscdk.App {
	return awscdk.NewApp(&awscdk.AppProps{Context: &ctx})
}

// Context arrives as JSON values from cdk.json and as strings from -c; both
// must mean the same thing.
func TestPropsFromContext(t *testing.T) {
	defaults, err := propsFromContext(appWith(nil))
	if err != nil {
		t.Fatal(err)
	}
	if defaults.Stage != "dev" || defaults.Protect || defaults.RedisEngine != "valkey" ||
		defaults.LogRetention != awslogs.RetentionDays_ONE_MONTH || defaults.JWTIssuer != "" || defaults.BuildDir != "build" ||
		defaults.ThrottleRate != stack.DefaultThrottleRate || defaults.ThrottleBurst != stack.DefaultThrottleBurst ||
		defaults.AccountConcurrency != stack.DefaultAccountConcurrency || len(defaults.Reserved) != 0 {
		t.Errorf("defaults = %+v", defaults)
	}

	for name, ctx := range map[string]map[string]any{
		"from -c":       {"stage": "prod-eu", "logRetentionDays": "90", "jwtIssuer": "https://id.example.com", "jwtAudience": "game, admin", "redisEngine": "redis"},
		"from cdk.json": {"stage": "prod-eu", "logRetentionDays": 90.0, "jwtIssuer": "https://id.example.com", "jwtAudience": []any{"game", "admin"}, "redisEngine": "redis"},
	} {
		p, err := propsFromContext(appWith(ctx))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if p.Stage != "prod-eu" || !p.Protect || p.LogRetention != awslogs.RetentionDays_THREE_MONTHS ||
			p.JWTIssuer != "https://id.example.com" || !slices.Equal(p.JWTAudience, []string{"game", "admin"}) || p.RedisEngine != "redis" {
			t.Errorf("%s: props = %+v", name, p)
		}
	}

	for _, bad := range []any{"thirty", 31.0, 7.5} {
		if _, err := propsFromContext(appWith(map[string]any{"logRetentionDays": bad})); err == nil {
			t.Errorf("logRetentionDays=%v accepted", bad)
		}
	}
}

// Throttling and reserved concurrency read the same from -c strings and
// cdk.json values; a value that is not a positive number (or not a count
// per function) stops synthesis with the key's name.
func TestThrottlingAndReservationsFromContext(t *testing.T) {
	for name, ctx := range map[string]map[string]any{
		"from -c": {"throttleRate": "250.5", "throttleBurst": "500", "accountConcurrency": "3000",
			"reservedConcurrency": "counter-processor=100, streak-processor=10"},
		"from cdk.json": {"throttleRate": 250.5, "throttleBurst": 500.0, "accountConcurrency": 3000.0,
			"reservedConcurrency": map[string]any{"counter-processor": 100.0, "streak-processor": 10.0}},
		"JSON with -c": {"throttleRate": "250.5", "throttleBurst": "500", "accountConcurrency": "3000",
			"reservedConcurrency": `{"counter-processor":100,"streak-processor":10}`},
	} {
		p, err := propsFromContext(appWith(ctx))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if p.ThrottleRate != 250.5 || p.ThrottleBurst != 500 || p.AccountConcurrency != 3000 ||
			len(p.Reserved) != 2 || p.Reserved["counter-processor"] != 100 || p.Reserved["streak-processor"] != 10 {
			t.Errorf("%s: props = %+v", name, p)
		}
	}
	for key, bad := range map[string][]any{
		"throttleRate":        {"fast", 0.0, "-5", -1.0},
		"throttleBurst":       {"lots", 0.0, "2.5", -100.0},
		"accountConcurrency":  {"many", 50.0},
		"reservedConcurrency": {"counter-processor", "counter-processor=ten", map[string]any{"counter-processor": 2.5}, 7.0},
	} {
		for _, v := range bad {
			_, err := propsFromContext(appWith(map[string]any{key: v}))
			if err == nil || !strings.Contains(err.Error(), key) {
				t.Errorf("%s=%v: error %v, want one naming %s", key, v, err, key)
			}
		}
	}
}

// Web origins read the same from -c and cdk.json; none configures no CORS.
func TestCORSFromContext(t *testing.T) {
	defaults, err := propsFromContext(appWith(nil))
	if err != nil {
		t.Fatal(err)
	}
	if len(defaults.CORSOrigins) != 0 || defaults.CORSCredentials {
		t.Errorf("CORS by default: origins %v, credentials %v; want none", defaults.CORSOrigins, defaults.CORSCredentials)
	}
	want := []string{"https://play.example.com", "http://localhost:5173"}
	for name, ctx := range map[string]map[string]any{
		"from -c":       {"corsOrigins": "https://play.example.com, http://localhost:5173", "corsAllowCredentials": "true"},
		"JSON with -c":  {"corsOrigins": `["https://play.example.com","http://localhost:5173"]`, "corsAllowCredentials": "true"},
		"from cdk.json": {"corsOrigins": []any{"https://play.example.com", "http://localhost:5173"}, "corsAllowCredentials": true},
	} {
		p, err := propsFromContext(appWith(ctx))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !slices.Equal(p.CORSOrigins, want) || !p.CORSCredentials {
			t.Errorf("%s: origins %v, credentials %v", name, p.CORSOrigins, p.CORSCredentials)
		}
	}
	for _, bad := range []any{"yes", 1.0} {
		if _, err := propsFromContext(appWith(map[string]any{"corsAllowCredentials": bad})); err == nil ||
			!strings.Contains(err.Error(), "corsAllowCredentials") {
			t.Errorf("corsAllowCredentials=%v: error %v, want one naming the key", bad, err)
		}
	}
}

// Every stage keeps its data unless it is a throwaway one, dev or test, or
// the deployer says otherwise with -c protect; a stage's name beginning
// with prod says nothing.
func TestProtectionFromContext(t *testing.T) {
	for _, tc := range []struct {
		ctx  map[string]any
		want bool
	}{
		{nil, false},
		{map[string]any{"stage": "test"}, false},
		{map[string]any{"stage": "staging"}, true},
		{map[string]any{"stage": "live"}, true},
		{map[string]any{"stage": "dev-eu"}, true},
		{map[string]any{"stage": "prod", "protect": "false"}, false},
		{map[string]any{"stage": "prod", "protect": false}, false},
		{map[string]any{"stage": "dev", "protect": "true"}, true},
		{map[string]any{"stage": "test", "protect": true}, true},
		{map[string]any{"stage": "staging", "protect": ""}, true},
	} {
		p, err := propsFromContext(appWith(tc.ctx))
		if err != nil {
			t.Fatalf("%v: %v", tc.ctx, err)
		}
		if p.Protect != tc.want {
			t.Errorf("%v: protect %v, want %v", tc.ctx, p.Protect, tc.want)
		}
	}
	for _, bad := range []any{"yes", 1.0, "on"} {
		if _, err := propsFromContext(appWith(map[string]any{"protect": bad})); err == nil || !strings.Contains(err.Error(), "protect") {
			t.Errorf("protect=%v: error %v, want one naming the key", bad, err)
		}
	}
}

// The game server's and the operator's principals read the same from -c
// and cdk.json; the former single list is read as the operator's (what it
// allowed before), and refused beside the new keys.
func TestServiceRolesFromContext(t *testing.T) {
	const backend, ops = "arn:aws:iam::123456789012:role/game-backend", "arn:aws:iam::123456789012:role/ops"
	for name, ctx := range map[string]map[string]any{
		"from -c":       {"gameServerRoleArns": backend, "operatorRoleArns": ops},
		"JSON with -c":  {"gameServerRoleArns": `["` + backend + `"]`, "operatorRoleArns": `["` + ops + `"]`},
		"from cdk.json": {"gameServerRoleArns": []any{backend}, "operatorRoleArns": []any{ops}},
	} {
		p, err := propsFromContext(appWith(ctx))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !slices.Equal(p.GameServerRoleARNs, []string{backend}) || !slices.Equal(p.OperatorRoleARNs, []string{ops}) {
			t.Errorf("%s: game servers %v, operators %v", name, p.GameServerRoleARNs, p.OperatorRoleARNs)
		}
	}
	legacy, err := propsFromContext(appWith(map[string]any{"serviceRoleArns": backend + "," + ops}))
	if err != nil {
		t.Fatal(err)
	}
	if len(legacy.GameServerRoleARNs) != 0 || !slices.Equal(legacy.OperatorRoleARNs, []string{backend, ops}) {
		t.Errorf("serviceRoleArns: game servers %v, operators %v; want both as operators", legacy.GameServerRoleARNs, legacy.OperatorRoleARNs)
	}
	for _, mixed := range []map[string]any{
		{"serviceRoleArns": backend, "operatorRoleArns": ops},
		{"serviceRoleArns": backend, "gameServerRoleArns": ops},
	} {
		if _, err := propsFromContext(appWith(mixed)); err == nil || !strings.Contains(err.Error(), "serviceRoleArns") {
			t.Errorf("%v: error %v, want one naming serviceRoleArns", mixed, err)
		}
	}
}

// What -c protect (or its default) decides is what the template says:
// the tables and the user pool keep deletion protection and are retained
// with the stack, or neither.
func TestTheTemplateFollowsProtection(t *testing.T) {
	build := t.TempDir()
	fn := routes.PutGame.Function
	if err := os.MkdirAll(filepath.Join(build, fn), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(build, fn, "bootstrap"), []byte("not a binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ctx  map[string]any
		want bool
	}{
		{map[string]any{"stage": "dev"}, false},
		{map[string]any{"stage": "staging"}, true},
		{map[string]any{"stage": "prod", "protect": "false"}, false},
		{map[string]any{"stage": "test", "protect": "true"}, true},
	} {
		// cdk.json's feature flags, as `cdk synth` gives them.
		ctx := cdkJSONContext(t)
		maps.Copy(ctx, tc.ctx)
		ctx["buildDir"] = build
		app := appWith(ctx)
		p, err := propsFromContext(app)
		if err != nil {
			t.Fatal(err)
		}
		// Every table and the user pool, behind one route: what protection
		// covers, quicker to synthesize than every function.
		p.Routes, p.Processors, p.Consumers = []routes.Route{routes.PutGame}, []routes.Processor{}, []routes.Consumer{}
		s, err := stack.New(app, "Rally-"+p.Stage, p)
		if err != nil {
			t.Fatal(err)
		}
		tpl := assertions.Template_FromStack(s.Stack, nil)
		policy := map[bool]string{true: "Retain", false: "Delete"}[tc.want]
		for typ, props := range map[string]map[string]any{
			"AWS::DynamoDB::Table":   {"DeletionProtectionEnabled": tc.want},
			"AWS::Cognito::UserPool": {"DeletionProtection": map[bool]string{true: "ACTIVE", false: "INACTIVE"}[tc.want]},
		} {
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Errorf("%v: %s: %v", tc.ctx, typ, r)
					}
				}()
				tpl.AllResources(jsii.String(typ), assertions.Match_ObjectLike(&map[string]any{"DeletionPolicy": policy}))
				tpl.AllResourcesProperties(jsii.String(typ), assertions.Match_ObjectLike(&props))
			}()
		}
	}
}

func cdkJSONContext(t *testing.T) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "cdk.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Context map[string]any `json:"context"`
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatalf("cdk.json: %v", err)
	}
	return cfg.Context
}
