package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/rallyhq/rally/infra/local/awsapi"
	"github.com/rallyhq/rally/infra/local/binaries"
	"github.com/rallyhq/rally/infra/local/runtimeapi"
	"github.com/rallyhq/rally/infra/local/template"
	"github.com/rallyhq/rally/infra/local/template/synth"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
)

// The coldstart section: every function's binary size and init time (exec
// until its first Runtime API /next) beside a bare aws-lambda-go function
// (init) and one that links only the brief's packages (size).
const (
	coldstartRuns    = 5
	coldstartBare    = "bare"
	coldstartPackage = "packages"
	// coldstartTags and coldstartLDFlags are GOFLAGS_LAMBDA in the Makefile.
	coldstartTags    = binaries.BuildTags
	coldstartLDFlags = "-s -w"
)

// coldstartBareMain is a bare aws-lambda-go function.
const coldstartBareMain = `package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"
)

func main() {
	lambda.Start(func(context.Context) error { return nil })
}
`

// coldstartPackagesMain links only the brief's packages, each used as a
// function uses it: aws-lambda-go, the SDK's config and DynamoDB client
// instrumented by the X-Ray SDK, and go-redis.
const coldstartPackagesMain = `package main

import (
	"context"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-xray-sdk-go/instrumentation/awsv2"
	"github.com/aws/aws-xray-sdk-go/xray"
	"github.com/redis/go-redis/v9"
)

func main() {
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		panic(err)
	}
	awsv2.AWSV2Instrumentor(&cfg.APIOptions)
	db := dynamodb.NewFromConfig(cfg)
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	lambda.Start(func(ctx context.Context, id string) (string, error) {
		var v string
		err := xray.Capture(ctx, "read", func(ctx context.Context) error {
			out, err := db.GetItem(ctx, &dynamodb.GetItemInput{
				TableName: aws.String(os.Getenv("TABLE")),
				Key:       map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: id}},
			})
			if err != nil {
				return err
			}
			if len(out.Item) == 0 {
				v, err = rdb.Get(ctx, id).Result()
			}
			return err
		})
		return v, err
	})
}
`

func benchColdstart(ctx context.Context, env *Env) (Section, error) {
	root, err := coldstartRoot()
	if err != nil {
		return Section{}, err
	}
	// The two floors are built from packages inside the module, so they
	// link go.mod's versions.
	src, err := os.MkdirTemp(root, "_bench-coldstart-")
	if err != nil {
		return Section{}, err
	}
	defer os.RemoveAll(src)
	for name, main := range map[string]string{coldstartBare: coldstartBareMain, coldstartPackage: coldstartPackagesMain} {
		if err := os.MkdirAll(filepath.Join(src, name), 0o755); err != nil {
			return Section{}, err
		}
		if err := os.WriteFile(filepath.Join(src, name, "main.go"), []byte(main), 0o644); err != nil {
			return Section{}, err
		}
	}
	out, err := os.MkdirTemp("", "rally-bench-coldstart-")
	if err != nil {
		return Section{}, err
	}
	defer os.RemoveAll(out)

	// The functions' environment comes from the synthesized template,
	// built beside the binaries: both take a while.
	type loaded struct {
		tpl *template.Template
		err error
	}
	tplDone := make(chan loaded, 1)
	go func() {
		tpl, err := synth.Load(root, "dev", filepath.Join(root, ".local"), os.Stderr)
		tplDone <- loaded{tpl, err}
	}()
	fns := routes.Functions()
	pkgs := []string{"./" + filepath.Base(src) + "/" + coldstartBare, "./" + filepath.Base(src) + "/" + coldstartPackage}
	for _, fn := range fns {
		pkgs = append(pkgs, "./functions/"+fn)
	}
	fmt.Fprintf(os.Stderr, "bench: coldstart: building %d functions and the 2 floors as make build does, for %s\n", len(fns), "the host")
	t := time.Now()
	if err := coldstartBuild(ctx, root, out, pkgs); err != nil {
		return Section{}, err
	}
	fmt.Fprintf(os.Stderr, "bench: coldstart: built in %s\n", time.Since(t).Round(time.Second))
	tl := <-tplDone
	if tl.err != nil {
		return Section{}, tl.err
	}

	local := template.Local{
		Tables: schema.NamesFromEnv("bench-coldstart-"), RedisURL: env.Redis.URL(),
		Region: "us-east-1", AccountID: "000000000000", SecretValue: binaries.SecretValue,
	}
	tfns, err := tl.tpl.Functions(local)
	if err != nil {
		return Section{}, err
	}
	secrets := map[string]string{}
	served := map[string]awsapi.Secret{}
	for _, s := range tl.tpl.Secrets(local) {
		secrets[s.ARN] = s.Value
		served[s.ARN] = awsapi.Secret{Current: s.Value}
	}
	// As deployed, each function reads its keys from Secrets Manager at
	// init: here from the local AWS endpoint, its role checked on the
	// call. Given the keys in the environment instead (Direct), the
	// difference is what reading them costs.
	sm, err := awsapi.New(awsapi.Options{DynamoDB: env.DynamoDB.Endpoint(), Secrets: served})
	if err != nil {
		return Section{}, err
	}
	defer sm.Close()
	deployed := binaries.Checked{AWS: sm, ExportsDir: out}
	direct := binaries.Direct{DynamoDB: env.DynamoDB.Endpoint(), Secrets: secrets, AnalyticsDir: out, ExportsDir: out}

	size := func(name string) (float64, error) {
		st, err := os.Stat(filepath.Join(out, name))
		if err != nil {
			return 0, err
		}
		return float64(st.Size()) / 1e6, nil
	}
	bareInit, err := coldstartInit(ctx, runtimeapi.Function{Name: coldstartBare, Binary: filepath.Join(out, coldstartBare)})
	if err != nil {
		return Section{}, err
	}
	pkgSize, err := size(coldstartPackage)
	if err != nil {
		return Section{}, err
	}
	fmt.Fprintf(os.Stderr, "bench: coldstart: bare function init %s; brief-packages function %.1f MB\n", bareInit.Round(time.Microsecond), pkgSize)

	type fig struct {
		name string
		mb   float64
		init time.Duration
		// keyed is init with the keys given in the environment.
		keyed time.Duration
	}
	var figs []fig
	initWith := func(fn template.Function, endpoints binaries.Endpoints) (time.Duration, error) {
		e, err := endpoints.Environ(fn)
		if err != nil {
			return 0, err
		}
		return coldstartInit(ctx, runtimeapi.Function{Name: fn.Name, Binary: filepath.Join(out, fn.Name), Env: e, MemoryMB: fn.MemoryMB, Timeout: fn.Timeout})
	}
	for _, fn := range tfns {
		init, err := initWith(fn, deployed)
		if err != nil {
			return Section{}, err
		}
		keyed, err := initWith(fn, direct)
		if err != nil {
			return Section{}, err
		}
		mb, err := size(fn.Name)
		if err != nil {
			return Section{}, err
		}
		figs = append(figs, fig{fn.Name, mb, init, keyed})
	}
	slices.SortFunc(figs, func(a, b fig) int { return strings.Compare(a.name, b.name) })
	fmt.Fprintf(os.Stderr, "bench: coldstart: %d functions started %d times each\n", len(figs), coldstartRuns)

	var rows []Row
	var biggest, slowest fig
	var added, inits, keyeds []time.Duration
	for _, f := range figs {
		added = append(added, f.init-f.keyed)
		inits, keyeds = append(inits, f.init), append(keyeds, f.keyed)
		if f.mb > biggest.mb {
			biggest = f
		}
		if f.init > slowest.init {
			slowest = f
		}
	}
	sizeNote := "what makes them bigger than the brief's packages alone: shared/app's clients (Redis, DynamoDB, Secrets Manager, Firehose), the feature, the OpenAPI validation and the rest of the module"
	initNote := "their init builds the SDK config, the X-Ray instrumentation and the clients before the first /next"
	for _, f := range figs {
		s := Row{Name: f.name + ": binary size", Value: f.mb, Floor: pkgSize, Unit: "MB", FloorName: "the brief's packages alone",
			Goal: "≤ 1.1×", Met: Within(f.mb/pkgSize, 1.1)}
		if !*s.Met {
			s.Note = sizeNote
		}
		i := Row{Name: f.name + ": init, median of " + fmt.Sprint(coldstartRuns), Value: Millis(f.init), Floor: Millis(bareInit), Unit: "ms",
			FloorName: "bare aws-lambda-go", Goal: "≤ 3×", Met: Within(float64(f.init)/float64(bareInit), 3)}
		if !*i.Met {
			i.Note = initNote
		}
		rows = append(rows, s, i)
	}
	rows = append(rows, Row{
		Name:  fmt.Sprintf("every function: init, median over the %d, reading its keys from Secrets Manager", len(figs)),
		Value: Millis(Percentile(inits, 50)), Floor: Millis(Percentile(keyeds, 50)), Unit: "ms",
		FloorName: "the same, given its keys in the environment",
		Note: fmt.Sprintf("each function reads the secrets it uses (the log key; the cursor and erasure keys where declared) at once: "+
			"%s ms added at the median, %s ms at most, over the local endpoint; in AWS about one Secrets Manager round trip "+
			"(with its TLS handshake) through the VPC endpoint", number(Millis(Percentile(added, 50))), number(Millis(slices.Max(added)))),
	})
	return Section{
		Title: "Cold start",
		Intro: fmt.Sprintf("Every function under functions/ built as `make build` builds it (CGO_ENABLED=0, -tags %s -trimpath -ldflags %q) "+
			"but for this machine (%s) so it runs here, beside (a) a bare aws-lambda-go function (lambda.Start of a handler returning nil), the floor for init, "+
			"and (b) a function linking only aws-lambda-go, the SDK's config and DynamoDB client with the X-Ray SDK's instrumentation, and go-redis (%.1f MB), "+
			"the floor for size; all built in one go build from go.mod's versions. Init is the time from exec to the binary's first Runtime API "+
			"GET /2018-06-01/runtime/invocation/next (infra/local/runtimeapi), with the environment the synthesized template gives the function "+
			"(infra/local/binaries), reading its keys from Secrets Manager (the local AWS endpoint, infra/local/awsapi) as deployed, median of %d starts; the bare function's is %s ms. Largest: %s (%.1f MB); slowest init: %s (%s ms).",
			coldstartTags, coldstartLDFlags, coldstartHost(), pkgSize, coldstartRuns, number(Millis(bareInit)),
			biggest.name, biggest.mb, slowest.name, number(Millis(slowest.init))),
		Rows: rows,
	}, nil
}

// coldstartBuild builds pkgs into dir in one go build, as `make build`
// builds the functions (GOFLAGS_LAMBDA, CGO_ENABLED=0), for the host.
func coldstartBuild(ctx context.Context, root, dir string, pkgs []string) error {
	args := append([]string{"build", "-tags", coldstartTags, "-trimpath", "-ldflags", coldstartLDFlags, "-o", dir + string(filepath.Separator)}, pkgs...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %w\n%s", err, out)
	}
	return nil
}

// coldstartInit starts fn coldstartRuns times, each a fresh process, and
// returns the median time from exec to its first /next.
func coldstartInit(ctx context.Context, fn runtimeapi.Function) (time.Duration, error) {
	fn.Log = io.Discard
	var took []time.Duration
	for range coldstartRuns {
		p, err := runtimeapi.NewPool(fn)
		if err != nil {
			return 0, err
		}
		d, err := p.Start(ctx)
		_ = p.Close()
		if err != nil {
			return 0, fmt.Errorf("start %s: %w", fn.Name, err)
		}
		took = append(took, d)
	}
	return Percentile(took, 50), nil
}

// coldstartRoot is the module's root: the nearest directory up with go.mod.
func coldstartRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("coldstart: no go.mod above the working directory")
		}
		dir = parent
	}
}

func coldstartHost() string {
	out, err := exec.Command("go", "env", "GOOS", "GOARCH").Output()
	if err != nil {
		return "the host"
	}
	return strings.Join(strings.Fields(string(out)), "/")
}
