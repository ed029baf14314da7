package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"

	"github.com/rallyhq/rally/infra/stack"
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
