package all_test

import (
	"context"
	"encoding/json"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/rallyhq/rally/infra/local/testenv/ci"
	"github.com/rallyhq/rally/shared/app"
	"github.com/rallyhq/rally/shared/app/all"
	"github.com/rallyhq/rally/shared/config"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
)

// Each feature binds exactly the routes and processors declared with its
// name, so a function started with its feature serves its route; all of
// them together bind every declared function once.
func TestEachFeatureBindsWhatItIsDeclaredWith(t *testing.T) {
	d, err := app.New(context.Background(), config.Config{
		Stage: "test", Region: "us-east-1", DynamoDBEndpoint: "http://127.0.0.1:9", Tables: schema.NamesFromEnv(""),
		RedisURL: "redis://127.0.0.1:9", CursorKey: "k", LogKey: "k", AnalyticsDir: t.TempDir(),
	}, app.Options{LogOutput: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	declared := map[routes.Feature][]string{}
	for _, r := range routes.All() {
		if !slices.Contains(declared[r.Feature], r.Function) {
			declared[r.Feature] = append(declared[r.Feature], r.Function)
		}
	}
	for _, p := range routes.Processors() {
		if !slices.Contains(declared[p.Feature], p.Function) {
			declared[p.Feature] = append(declared[p.Feature], p.Function)
		}
	}
	for _, c := range routes.Consumers() {
		declared[c.Feature] = append(declared[c.Feature], c.Function)
	}
	bound := map[routes.Feature][]string{}
	for _, f := range all.Features() {
		h := f.Bind(d)
		for fn := range h.Endpoints {
			bound[f.Name] = append(bound[f.Name], fn)
		}
		for fn := range h.Processors {
			bound[f.Name] = append(bound[f.Name], fn)
		}
		for fn := range h.Consumers {
			bound[f.Name] = append(bound[f.Name], fn)
		}
	}
	for feature, fns := range declared {
		slices.Sort(fns)
		got := bound[feature]
		slices.Sort(got)
		if !slices.Equal(got, fns) {
			t.Errorf("feature %s binds %v, but declares %v", feature, got, fns)
		}
	}
	for feature := range bound {
		if _, ok := declared[feature]; !ok {
			t.Errorf("feature %s binds functions no route or processor declares", feature)
		}
	}
	if _, err := d.Bind(all.Features()...); err != nil {
		t.Fatalf("binding every feature at once: %v", err)
	}
}

// A function links the features it serves and no other: a favorites
// route carries no analytics, erasure or Parquet code. The features a
// feature reads from are allowed (lists show game metadata, boards and
// streaks read profiles, the shipper decodes what three features write).
func TestEachFunctionLinksOnlyTheFeaturesItServes(t *testing.T) {
	_, err := exec.LookPath("go") // go test puts its own first on PATH
	ci.Require(t, "the go command", err)
	reads := map[routes.Feature][]routes.Feature{
		routes.Reactions:    {routes.Games},
		routes.Leaderboards: {routes.Players},
		routes.Streaks:      {routes.Players},
		routes.Analytics:    {routes.Reactions, routes.Leaderboards, routes.Streaks, routes.Privacy},
		// The dead-letter archive reads who is erased: a parked batch
		// must not bring an erased user back.
		routes.Operations: {routes.Privacy},
	}
	features := []routes.Feature{routes.Reactions, routes.Games, routes.Players, routes.Leaderboards, routes.Streaks, routes.Analytics, routes.Privacy, routes.Operations}
	out, err := exec.Command("go", "list", "-json=ImportPath,Deps", "github.com/rallyhq/rally/functions/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := map[string][]string{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p struct {
			ImportPath string
			Deps       []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		deps[strings.TrimPrefix(p.ImportPath, "github.com/rallyhq/rally/functions/")] = p.Deps
	}
	check := func(function string, feature routes.Feature, route bool) {
		t.Helper()
		linked, ok := deps[function]
		if !ok {
			t.Errorf("no functions/%s", function)
			return
		}
		// What a feature reads, and what those read in turn.
		allowed := []routes.Feature{feature}
		for i := 0; i < len(allowed); i++ {
			for _, r := range reads[allowed[i]] {
				if !slices.Contains(allowed, r) {
					allowed = append(allowed, r)
				}
			}
		}
		for _, other := range features {
			pkg := "github.com/rallyhq/rally/shared/" + string(other)
			if slices.Contains(allowed, other) {
				continue
			}
			if i := slices.IndexFunc(linked, func(d string) bool { return d == pkg || strings.HasPrefix(d, pkg+"/") }); i >= 0 {
				t.Errorf("%s (feature %s) links %s", function, feature, linked[i])
			}
		}
		for _, heavy := range []string{"github.com/parquet-go/parquet-go", "github.com/aws/aws-sdk-go-v2/service/firehose"} {
			if route && slices.Contains(linked, heavy) {
				t.Errorf("route function %s links %s", function, heavy)
			}
		}
	}
	for _, r := range routes.All() {
		check(r.Function, r.Feature, true)
	}
	for _, p := range routes.Processors() {
		if p.Function == routes.ErasureProcessor.Function || p.Function == routes.JobRunner.Function || p.Function == routes.ExportProcessor.Function || p.Source.Name != routes.AnalyticsShipper.Source.Name && p.Function == routes.AnalyticsShipper.Function {
			continue // it erases (rebuilds, exports) every feature; one check per function
		}
		check(p.Function, p.Feature, false)
	}
	for _, c := range routes.Consumers() {
		check(c.Function, c.Feature, false)
	}
}
