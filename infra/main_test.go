package main

import (
	"slices"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
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
		defaults.LogRetention != awslogs.RetentionDays_ONE_MONTH || defaults.JWTIssuer != "" || defaults.BuildDir != "build" {
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
