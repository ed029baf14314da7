package secrets_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	smtypes "github.com/aws/aws-sdk-go-v2/service/secretsmanager/types"

	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/secrets"
)

// A key is the secret's AWSCURRENT version and, for a key that rotates,
// its AWSPREVIOUS one; a secret never rotated has no AWSPREVIOUS, which
// is fine, and one without a current version gives no key.
func TestAKeyIsTheSecretsCurrentAndPreviousVersions(t *testing.T) {
	ctx := context.Background()
	sm := &fakeSecrets{versions: map[string]string{"AWSCURRENT": "new-key"}}
	current, previous, err := secrets.Versions(sm, "arn:secret", true)(ctx)
	if err != nil || string(current) != "new-key" || previous != nil {
		t.Fatalf("never rotated: %q %q %v", current, previous, err)
	}
	sm.set("AWSPREVIOUS", "old-key")
	current, previous, err = secrets.Versions(sm, "arn:secret", true)(ctx)
	if err != nil || string(current) != "new-key" || string(previous) != "old-key" {
		t.Fatalf("rotated: %q %q %v", current, previous, err)
	}
	current, previous, err = secrets.Versions(sm, "arn:secret", false)(ctx)
	if err != nil || string(current) != "new-key" || previous != nil {
		t.Fatalf("a key that never rotates: %q %q %v", current, previous, err)
	}
	sm.set("AWSCURRENT", "")
	if _, _, err := secrets.Versions(sm, "arn:secret", true)(ctx); err == nil {
		t.Fatal("a secret without a current version gave keys")
	}
}

// An instance that read a key before a rotation picks the new versions up
// once those it holds are older than MaxAge, or when asked to reload (no
// more than once every ReloadEvery); a failed read keeps the versions it
// holds, and fixed keys never change.
func TestARingReadsARotatedKeyWhenItsVersionsGrowOld(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewSettable()
	sm := &fakeSecrets{versions: map[string]string{"AWSCURRENT": "key-1"}}
	ring, err := secrets.Load(ctx, secrets.Versions(sm, "arn:secret", true), clk)
	if err != nil {
		t.Fatal(err)
	}
	sm.set("AWSCURRENT", "key-2")
	sm.set("AWSPREVIOUS", "key-1")
	if ring.Refresh(ctx) || ring.Reload(ctx) {
		t.Fatal("the ring read the secret again at once")
	}
	clk.Advance(secrets.MaxAge)
	if !ring.Refresh(ctx) {
		t.Fatal("versions older than MaxAge were not read again")
	}
	if current, previous := ring.Keys(); string(current) != "key-2" || string(previous) != "key-1" {
		t.Fatalf("after the refresh: %q %q, want key-2 and key-1", current, previous)
	}

	sm.fail(true)
	clk.Advance(secrets.MaxAge)
	if ring.Refresh(ctx) {
		t.Fatal("a failed read changed the keys")
	}
	if current, _ := ring.Keys(); string(current) != "key-2" {
		t.Fatalf("a failed read dropped the key held: %q", current)
	}
	sm.fail(false)
	sm.set("AWSCURRENT", "key-3")
	if ring.Refresh(ctx) {
		t.Fatal("the secret was read again within ReloadEvery of a failed read")
	}
	clk.Advance(secrets.ReloadEvery)
	if !ring.Reload(ctx) {
		t.Fatal("a reload after ReloadEvery did not read the rotated key")
	}
	if reads := sm.reads(); reads != 4*2 {
		t.Errorf("%d reads of the secret, want 4 loads of two versions", reads)
	}

	fixed := secrets.Fixed([]byte("k"), nil)
	clk.Advance(secrets.MaxAge)
	if fixed.Refresh(ctx) || fixed.Reload(ctx) {
		t.Error("fixed keys changed")
	}
	var none *secrets.Ring
	if current, previous := none.Keys(); current != nil || previous != nil || none.Reload(ctx) {
		t.Error("a nil ring holds a key")
	}
}

// fakeSecrets answers GetSecretValue from versions by stage, and as
// Secrets Manager does for a stage no version carries.
type fakeSecrets struct {
	mu       sync.Mutex
	versions map[string]string
	failing  bool
	n        int
}

func (f *fakeSecrets) set(stage, v string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.versions[stage] = v
}

func (f *fakeSecrets) fail(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failing = on
}

func (f *fakeSecrets) reads() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

func (f *fakeSecrets) GetSecretValue(_ context.Context, in *secretsmanager.GetSecretValueInput, _ ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	if f.failing {
		return nil, errors.New("connection refused")
	}
	v, ok := f.versions[aws.ToString(in.VersionStage)]
	if !ok {
		return nil, &smtypes.ResourceNotFoundException{Message: aws.String("Secrets Manager can't find the specified secret value for staging label: " + aws.ToString(in.VersionStage))}
	}
	return &secretsmanager.GetSecretValueOutput{SecretString: aws.String(v)}, nil
}
