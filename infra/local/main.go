// Command local runs Rally's local stack (`make dev`): DynamoDB Local,
// Redis, the tables, every route behind a local API Gateway with JWT and
// SigV4 authorizers, and the stream processors fed by pollers. Ctrl-C stops
// everything it started.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/rallyhq/rally/infra/local/binaries"
	"github.com/rallyhq/rally/infra/local/dynamodblocal"
	"github.com/rallyhq/rally/infra/local/gateway"
	"github.com/rallyhq/rally/infra/local/stack"
	"github.com/rallyhq/rally/infra/local/template/synth"
	"github.com/rallyhq/rally/shared/routes"
)

func main() {
	port := flag.Int("port", 3000, "port of the local API on localhost")
	persist := flag.Bool("persist", false, "keep DynamoDB Local's data in .local/dynamodb across restarts")
	endpoint := flag.String("dynamodb-endpoint", "", "use this running DynamoDB instead of starting DynamoDB Local")
	stateDir := flag.String("state", ".local", "directory for the DLQ, analytics output and persisted data")
	corsOrigins := flag.String("cors-origins", strings.Join(gateway.DefaultCORSOrigins, ","),
		"web origins browsers may call the API from, comma-separated: http://host:port, scheme://host:* for any port, * for any; empty for no CORS")
	validate := flag.Bool("validate", true, "check every request against the OpenAPI document before its handler (a mismatch answers 400 and is logged); -validate=false leaves it to the handlers, as in AWS")
	bins := flag.Bool("binaries", false, "serve every route and processor through its real binary (built for the host, environment from the template), on the real clock")
	stage := flag.String("stage", "dev", "with -binaries: the stage of the template (cdk.out/Rally-<stage>.template.json)")
	instances := flag.Int("instances", 1, "with -binaries: instances of each function that may run at once (one starts warm, the others on demand); 1 queues concurrent requests for it")
	flag.Parse()
	if *instances < 1 {
		fmt.Fprintln(os.Stderr, "rally: -instances must be at least 1")
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	stopWithParent()
	started := time.Now()
	opts := stack.Options{
		Port:                  *port,
		Persist:               *persist,
		DynamoDBEndpoint:      *endpoint,
		RedisURL:              os.Getenv("REDIS_URL"),
		StateDir:              *stateDir,
		CORSOrigins:           splitList(*corsOrigins),
		SkipRequestValidation: !*validate,
		// Kept running for hours: worth the JVM's 2 s more to start.
		DynamoDBJVM: dynamodblocal.Steady,
	}
	var err error
	if *bins {
		opts.Binaries, err = prepareBinaries(ctx, *stage, *stateDir)
		if err != nil {
			fmt.Fprintln(os.Stderr, "rally:", err)
			os.Exit(1)
		}
		opts.Binaries.Instances = *instances
	}
	s, err := stack.Start(ctx, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rally:", explain(err))
		os.Exit(1)
	}
	banner(os.Stdout, s, time.Since(started), *corsOrigins, *validate, *instances)
	<-ctx.Done()
	stop() // a second Ctrl-C now kills at once; children die with us
	fmt.Fprintln(os.Stderr, "rally: stopping the local stack")
	if err := s.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "rally:", err)
		os.Exit(1)
	}
}

// splitList splits a comma-separated flag, never nil: an empty flag is an
// empty list.
func splitList(v string) []string {
	out := []string{}
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// prepareBinaries reads (or synthesizes) the template and builds every
// function for the host into <state>/bin, in one go build.
func prepareBinaries(ctx context.Context, stage, stateDir string) (*stack.Binaries, error) {
	tpl, err := synth.Load(".", stage, stateDir, os.Stdout)
	if err != nil {
		return nil, err
	}
	began := time.Now()
	fmt.Printf("rally: building %d functions for the host into %s/bin\n", len(routes.Functions()), stateDir)
	built, err := binaries.Build(ctx, ".", filepath.Join(stateDir, "bin"), routes.Functions()...)
	if err != nil {
		return nil, err
	}
	fmt.Printf("rally: built them in %.1fs\n", time.Since(began).Seconds())
	return &stack.Binaries{Template: tpl, Built: built}, nil
}

func explain(err error) string {
	switch {
	case errors.Is(err, dynamodblocal.ErrNoJava), errors.Is(err, dynamodblocal.ErrNoJar):
		return err.Error() + "\n(or point -dynamodb-endpoint at a running DynamoDB)"
	case errors.Is(err, syscall.EADDRINUSE):
		return err.Error() + "\n(another process uses the port; choose one with -port or make dev ARGS=-port=3001)"
	}
	return err.Error()
}

func banner(w io.Writer, s *stack.Stack, took time.Duration, corsOrigins string, validate bool, instances int) {
	info := s.Info()
	ddb := info.DynamoDBEndpoint + " (given endpoint)"
	if info.DynamoDBPID != 0 {
		where := "in memory"
		if info.Persisted != "" {
			where = "persisted in " + info.Persisted
		}
		ddb = fmt.Sprintf("DynamoDB Local %s (pid %d, %s)", info.DynamoDBEndpoint, info.DynamoDBPID, where)
	}
	fmt.Fprintf(w, "rally: local stack ready in %.1fs\n\n", took.Seconds())
	fmt.Fprintf(w, "  API          %s  (%d routes, OpenAPI at %s/openapi.json)\n", info.URL, info.Routes, info.URL)
	if info.DocsMissing != nil {
		fmt.Fprintf(w, "  docs         %s  (not drawn: %v)\n", info.Docs, errors.Unwrap(info.DocsMissing))
	} else {
		fmt.Fprintf(w, "  docs         %s  (API reference; its form gets a player token for Try it out)\n", info.Docs)
	}
	if validate {
		fmt.Fprintf(w, "  contract     every request is checked against the OpenAPI document first (400 and a log line when it breaks it; -validate=false to skip)\n")
	} else {
		fmt.Fprintf(w, "  contract     requests go to the handlers unchecked, as in AWS (-validate=false)\n")
	}
	fmt.Fprintf(w, "  DynamoDB     %s\n", ddb)
	fmt.Fprintf(w, "  Redis        %s %s\n", info.RedisKind, info.RedisURL)
	fmt.Fprintf(w, "  processors   %s (stream pollers; parked batches in the DeadLetters table)\n", strings.Join(info.Processors, ", "))
	fmt.Fprintf(w, "  analytics    %s/analytics/\n", info.StateDir)
	if corsOrigins == "" {
		corsOrigins = "none (-cors-origins is empty)"
	}
	fmt.Fprintf(w, "  CORS         web games from %s\n", corsOrigins)
	fmt.Fprintf(w, "  health       %s/_local/health   clock: %s/_local/clock   DLQ: %s/_local/dlq\n", info.URL, info.URL, info.URL)
	if len(info.Inits) > 0 {
		each := "one warm instance each (-instances=N runs up to N at once)"
		if instances > 1 {
			each = fmt.Sprintf("one warm instance each, up to %d at once", instances)
		}
		fmt.Fprintf(w, "  binaries     every function runs its real binary, %s, on the real clock (/_local/clock cannot move it); init ms:\n", each)
		var line []string
		for i, in := range info.Inits {
			line = append(line, fmt.Sprintf("%s %d", in.Function, in.Took.Milliseconds()))
			if len(line) == 4 || i == len(info.Inits)-1 {
				fmt.Fprintf(w, "               %s\n", strings.Join(line, ", "))
				line = nil
			}
		}
	}
	if len(info.Unbound) > 0 {
		fmt.Fprintf(w, "  not bound    %s (answer 500 until shared/app binds them)\n", strings.Join(info.Unbound, ", "))
	}
	token, err := s.Token("alice")
	if err != nil {
		token = "$(curl -s -X POST " + info.URL + `/_local/token -d '{"sub":"alice"}' | jq -r .token)`
	}
	game := fill(routes.FavoriteGame.Path, "space-race")
	fmt.Fprintf(w, "\nTry it (a token for player alice, valid 1h; mint others with POST /_local/token {\"sub\":\"bob\"}):\n\n")
	fmt.Fprintf(w, "  export TOKEN=%s\n", token)
	fmt.Fprintf(w, "  curl -X %s -H \"Authorization: Bearer $TOKEN\" %s%s\n", routes.FavoriteGame.Method, info.URL, game)
	fmt.Fprintf(w, "  curl -H \"Authorization: Bearer $TOKEN\" %s%s\n", info.URL, fill(routes.CountFavorites.Path, "space-race"))
	fmt.Fprintf(w, "\nService routes take SigV4: the game server (%s) calls the game routes, the operator (%s) every one:\n\n",
		envOr(stack.ServerAccessKeyEnv, stack.DefaultServerAccessKey), envOr(stack.AccessKeyEnv, stack.DefaultAccessKey))
	fmt.Fprintf(w, "  curl -X %s --aws-sigv4 \"aws:amz:us-east-1:execute-api\" --user %s:%s \\\n      -H 'Content-Type: application/json' -d '{\"title\":\"Space Race\",\"thumbnail_url\":\"https://example.com/space-race.png\"}' %s%s\n",
		routes.PutGame.Method, envOr(stack.ServerAccessKeyEnv, stack.DefaultServerAccessKey), envOr(stack.ServerSecretKeyEnv, stack.DefaultServerSecretKey),
		info.URL, fill(routes.PutGame.Path, "space-race"))
	fmt.Fprintf(w, "  curl --aws-sigv4 \"aws:amz:us-east-1:execute-api\" --user %s:%s %s%s\n",
		envOr(stack.AccessKeyEnv, stack.DefaultAccessKey), envOr(stack.SecretKeyEnv, stack.DefaultSecretKey), info.URL, routes.OpsHealth.Path)
	fmt.Fprintf(w, "\nCtrl-C stops everything. Request logs follow, one JSON line each.\n\n")
}

// fill replaces every {param} of a route path with value.
func fill(path, value string) string {
	parts := strings.Split(path, "/")
	for i, p := range parts {
		if strings.HasPrefix(p, "{") {
			parts[i] = value
		}
	}
	return strings.Join(parts, "/")
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
