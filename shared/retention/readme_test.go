package retention_test

import (
	"os"
	"strings"
	"testing"

	"github.com/rallyhq/rally/shared/retention"
)

// The README's Retention table is the declaration, rendered: a family
// added, or a lifetime changed, shows there too.
func TestTheREADMERetentionTableIsTheDeclaredOne(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n## Retention\n")
	if !ok {
		t.Fatal("the README has no Retention section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var got []string
	for _, line := range strings.Split(section, "\n") {
		if strings.HasPrefix(line, "|") {
			got = append(got, line)
		}
	}
	want := strings.Split(strings.TrimSuffix(retention.Markdown(), "\n"), "\n")
	for i := range max(len(got), len(want)) {
		var g, w string
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if g != w {
			t.Fatalf("the README's Retention table differs from retention.Markdown() at row %d:\nREADME: %s\nwant:   %s\n\nthe whole table:\n%s", i+1, g, w, retention.Markdown())
		}
	}
}
