package app

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	smtypes "github.com/aws/aws-sdk-go-v2/service/secretsmanager/types"

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

// The cursor keys are the secret's AWSCURRENT and AWSPREVIOUS versions; a
// secret never rotated has no AWSPREVIOUS, which is fine.
func TestCursorKeysAreTheCurrentAndPreviousVersions(t *testing.T) {
	ctx := context.Background()
	versions := map[string]string{"AWSCURRENT": "new-key"}
	sm := fakeSecrets(versions)
	current, previous, err := secretVersions(ctx, sm, "arn:secret")
	if err != nil || string(current) != "new-key" || previous != nil {
		t.Fatalf("never rotated: %q %q %v", current, previous, err)
	}
	versions["AWSPREVIOUS"] = "old-key"
	current, previous, err = secretVersions(ctx, sm, "arn:secret")
	if err != nil || string(current) != "new-key" || string(previous) != "old-key" {
		t.Fatalf("rotated: %q %q %v", current, previous, err)
	}
	delete(versions, "AWSCURRENT")
	if _, _, err := secretVersions(ctx, sm, "arn:secret"); err == nil {
		t.Fatal("a secret without a current version gave keys")
	}
}

// fakeSecrets answers GetSecretValue from versions by stage, and as
// Secrets Manager does for a stage no version carries.
type fakeSecrets map[string]string

func (f fakeSecrets) GetSecretValue(_ context.Context, in *secretsmanager.GetSecretValueInput, _ ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error) {
	v, ok := f[aws.ToString(in.VersionStage)]
	if !ok {
		return nil, &smtypes.ResourceNotFoundException{Message: aws.String("Secrets Manager can't find the specified secret value for staging label: " + aws.ToString(in.VersionStage))}
	}
	return &secretsmanager.GetSecretValueOutput{SecretString: aws.String(v)}, nil
}
