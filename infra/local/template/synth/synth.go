// Package synth synthesizes the Rally stack in process, for the local
// stack's real-binary path when cdk.out is missing or stale, and for tests:
// the template `cdk synth` would write, without cross-compiling the
// functions first (the stack only needs each function's asset directory).
package synth

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"

	"github.com/rallyhq/rally/infra/stack"
	"github.com/rallyhq/rally/shared/routes"
)

// Template synthesizes Rally-<stage> with the context of the cdk.json in
// root (the repository) and returns its template's JSON. It takes about a
// minute: jsii runs aws-cdk-lib in node.
func Template(root, stage string) (raw []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("synth: %v", r)
		}
	}()
	if os.Getenv("JSII_DEPRECATED") == "" {
		// aws-cdk-lib's own deprecation warnings say nothing about Rally.
		_ = os.Setenv("JSII_DEPRECATED", "quiet")
	}
	tmp, err := os.MkdirTemp("", "rally-synth")
	if err != nil {
		return nil, fmt.Errorf("synth: %w", err)
	}
	defer os.RemoveAll(tmp)
	build := filepath.Join(tmp, "build")
	for _, fn := range routes.Functions() {
		if err := os.MkdirAll(filepath.Join(build, fn), 0o755); err != nil {
			return nil, fmt.Errorf("synth: %w", err)
		}
		if err := os.WriteFile(filepath.Join(build, fn, "bootstrap"), []byte("not built"), 0o755); err != nil {
			return nil, fmt.Errorf("synth: %w", err)
		}
	}
	ctx, err := cdkContext(root)
	if err != nil {
		return nil, err
	}
	// As the CDK CLI does: the template names each resource's construct.
	ctx["aws:cdk:enable-path-metadata"] = true
	app := awscdk.NewApp(&awscdk.AppProps{Context: &ctx, Outdir: jsii.String(filepath.Join(tmp, "cdk.out"))})
	s, err := stack.New(app, "Rally-"+stage, stack.Props{Stage: stage, BuildDir: build})
	if err != nil {
		return nil, fmt.Errorf("synth: %w", err)
	}
	assembly := app.Synth(nil)
	artifact := assembly.GetStackArtifact(s.ArtifactId())
	return json.Marshal(artifact.Template())
}

// cdkContext is the context in root/cdk.json (feature flags included).
func cdkContext(root string) (map[string]any, error) {
	raw, err := os.ReadFile(filepath.Join(root, "cdk.json"))
	if err != nil {
		return nil, fmt.Errorf("synth: %w", err)
	}
	var cfg struct {
		Context map[string]any `json:"context"`
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("synth: cdk.json: %w", err)
	}
	return cfg.Context, nil
}
