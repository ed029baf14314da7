package client_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// readmeMark begins the part of Example the README shows.
const readmeMark = "// The README's example (Game servers), word for word, from here."

// The README's game-server example is Example's code from its mark on,
// word for word: Example compiles it, so the README cannot drift into
// code that does not build.
func TestTheREADMEExampleIsTheCompiledExample(t *testing.T) {
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "example_test.go", src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var body string
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Name.Name == "Example" {
			body = string(src[fset.Position(fn.Body.Lbrace).Offset+1 : fset.Position(fn.Body.Rbrace).Offset])
		}
	}
	_, shown, ok := strings.Cut(body, readmeMark+"\n")
	if !ok {
		t.Fatalf("Example has no line %q marking what the README shows", readmeMark)
	}
	var want []string
	for _, line := range strings.Split(strings.TrimRight(shown, "\n"), "\n") {
		want = append(want, strings.TrimPrefix(line, "\t"))
	}

	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n## Game servers\n")
	if !ok {
		t.Fatal("the README has no Game servers section")
	}
	_, block, ok := strings.Cut(section, "\n```go\n")
	block, _, closed := strings.Cut(block, "\n```\n")
	if !ok || !closed {
		t.Fatal("the README's Game servers section has no go block")
	}
	if got := strings.Join(want, "\n"); block != got {
		t.Errorf("the README's example differs from Example's:\nREADME:\n%s\n\nExample:\n%s", block, got)
	}
}
