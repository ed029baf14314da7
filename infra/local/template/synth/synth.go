// Package synth synthesizes the Rally stack in process, for the local
// stack's real-binary path when cdk.out is missing or stale, and for tests:
// the template `cdk synth` would write, without cross-compiling the
// functions first (the stack only needs each function's asset directory).
package synth

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"

	"github.com/rallyhq/rally/infra/local/template"
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

// stackSources are what the template is synthesized from: a template
// older than any of them may be stale.
var stackSources = []string{"infra/stack", "infra/main.go", "shared/routes", "shared/schema", "cdk.json"}

// Load reads root/cdk.out/Rally-<stage>.template.json when it is newer
// than the stack code; otherwise it synthesizes the stack in process into
// <state>/synth (reused while it is newer than the code), and says so on
// log.
func Load(root, stage, stateDir string, log io.Writer) (*template.Template, error) {
	name := "Rally-" + stage + ".template.json"
	code, err := newest(root, stackSources)
	if err != nil {
		return nil, err
	}
	for _, dir := range []string{filepath.Join(root, "cdk.out"), filepath.Join(stateDir, "synth")} {
		path := filepath.Join(dir, name)
		if st, err := os.Stat(path); err == nil && st.ModTime().After(code) {
			fmt.Fprintf(log, "rally: functions' environment and roles from %s\n", path)
			return template.Read(path)
		}
	}
	out := filepath.Join(stateDir, "synth", name)
	fmt.Fprintf(log, "rally: cdk.out/%s is missing or older than the stack code; synthesizing Rally-%s in process into %s (about a minute)\n", name, stage, out)
	raw, err := Template(root, stage)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(out, raw, 0o644); err != nil {
		return nil, err
	}
	return template.Parse(raw)
}

// newest is the latest modification time of the files under paths.
func newest(root string, paths []string) (time.Time, error) {
	var latest time.Time
	for _, p := range paths {
		err := filepath.WalkDir(filepath.Join(root, p), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if info, err := d.Info(); err == nil && !d.IsDir() && info.ModTime().After(latest) {
				latest = info.ModTime()
			}
			return nil
		})
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return latest, err
		}
	}
	return latest, nil
}
