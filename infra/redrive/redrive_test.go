package main

import (
	"testing"

	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/shared/routes"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// The analytics shipper is declared once per stream it reads; redrive
// visits its one name once.
func TestEachProcessorFunctionIsVisitedOnce(t *testing.T) {
	got := processorFunctions(routes.Processors())
	seen := map[string]bool{}
	for _, fn := range got {
		if seen[fn] {
			t.Errorf("%s listed twice in %v", fn, got)
		}
		seen[fn] = true
	}
	for _, p := range routes.Processors() {
		if !seen[p.Function] {
			t.Errorf("%s missing from %v", p.Function, got)
		}
	}
	if !seen[routes.AnalyticsShipper.Function] {
		t.Errorf("the analytics shipper is not a processor: %v", got)
	}
}
