package app

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/rallyhq/rally/shared/config"
	"github.com/rallyhq/rally/shared/routes"
)

// A deployed function that pages (list-favorites) refuses to start without
// the cursor secret rather than serve lists whose cursors it cannot sign;
// the local stage has a key of its own, and a function that never pages
// needs none.
func TestAFunctionThatPagesRefusesToStartWithoutTheCursorSecret(t *testing.T) {
	ctx := context.Background()
	opts := Options{LogOutput: io.Discard}
	_, err := New(ctx, config.Config{Stage: "prod", Region: "us-east-1", LogKey: "k", Function: routes.ListFavorites.Function}, opts)
	if err == nil || !strings.Contains(err.Error(), "RALLY_SECRET_ARN") {
		t.Fatalf("list-favorites without its secret in prod: %v, want an error naming RALLY_SECRET_ARN", err)
	}
	d, err := New(ctx, config.Config{Stage: config.LocalStage, Region: "us-east-1", Function: routes.ListFavorites.Function}, opts)
	if err != nil {
		t.Fatalf("locally: %v", err)
	}
	if _, err := d.Cursors.Encode("s", 1); err != nil {
		t.Fatalf("the local stage signs no cursor: %v", err)
	}
	if _, err := New(ctx, config.Config{Stage: "prod", Region: "us-east-1", LogKey: "k", Function: routes.FavoriteGame.Function}, opts); err != nil {
		t.Fatalf("a function that never pages: %v", err)
	}
}

// A deployed function refuses to start without the key of its logs' user
// hashes, and one serving service routes without the roles allowed to
// call them; the local stage has stand-ins for both.
func TestADeployedFunctionRefusesToStartWithoutItsLogKeyOrServiceRoles(t *testing.T) {
	ctx := context.Background()
	opts := Options{LogOutput: io.Discard}
	_, err := New(ctx, config.Config{Stage: "prod", Region: "us-east-1", Function: routes.FavoriteGame.Function}, opts)
	if err == nil || !strings.Contains(err.Error(), "RALLY_LOG_KEY") {
		t.Fatalf("without a log key: %v, want an error naming RALLY_LOG_KEY", err)
	}
	_, err = New(ctx, config.Config{Stage: "prod", Region: "us-east-1", LogKey: "k", Function: routes.SubmitScore.Function}, opts)
	if err == nil || !strings.Contains(err.Error(), "RALLY_SERVICE_ROLES") {
		t.Fatalf("a service route's function without its allow-list: %v, want an error naming RALLY_SERVICE_ROLES", err)
	}
	if _, err := New(ctx, config.Config{Stage: config.LocalStage, Region: "us-east-1", Function: routes.SubmitScore.Function}, opts); err != nil {
		t.Fatalf("locally: %v", err)
	}
}

// A deployed function that looks erasure records up refuses to start
// without the erasure key's secret, and one that does not never reads it.
func TestAFunctionThatLooksErasuresUpRefusesToStartWithoutTheErasureKey(t *testing.T) {
	ctx := context.Background()
	opts := Options{LogOutput: io.Discard}
	for _, fn := range []string{routes.EraseUser.Function, routes.ErasureStatus.Function, routes.ErasureProcessor.Function, routes.AnalyticsShipper.Function} {
		_, err := New(ctx, config.Config{Stage: "prod", Region: "us-east-1", LogKey: "k", ServiceRoles: []string{"arn:aws:iam::1:role/r"}, Function: fn}, opts)
		if err == nil || !strings.Contains(err.Error(), "RALLY_ERASURE_KEY_ARN") {
			t.Errorf("%s without the erasure key in prod: %v, want an error naming RALLY_ERASURE_KEY_ARN", fn, err)
		}
	}
	d, err := New(ctx, config.Config{Stage: "prod", Region: "us-east-1", LogKey: "k", Function: routes.FavoriteGame.Function}, opts)
	if err != nil {
		t.Fatalf("a function that looks no erasure up: %v", err)
	}
	if d.Key(routes.ErasureKey) != nil {
		t.Error("a function that looks no erasure up holds the erasure key")
	}
	d, err = New(ctx, config.Config{Stage: config.LocalStage, Region: "us-east-1", Function: routes.ErasureStatus.Function}, opts)
	if err != nil {
		t.Fatalf("locally: %v", err)
	}
	if current, _ := d.Key(routes.ErasureKey).Keys(); string(current) != routes.ErasureKey.Local {
		t.Errorf("the local erasure key is %q, want the local stand-in", current)
	}
}
