// Package queries holds the analysts' named queries as .sql files: the CDK
// stack turns each into an Athena named query, and a test runs each over
// the local export with DuckDB and checks the answers. They use only SQL
// both engines speak, over the table analytics.Table.
package queries

import (
	"embed"
	"io/fs"
	"sort"
	"strings"
)

//go:embed *.sql
var files embed.FS

// Query is one named query.
type Query struct {
	// Name is the file name without .sql, e.g. daily_active_players.
	Name string
	// Description is the file's first line, a "-- " comment.
	Description string
	SQL         string
}

// All returns every query, by name.
func All() []Query {
	names, err := fs.Glob(files, "*.sql")
	if err != nil {
		panic(err)
	}
	sort.Strings(names)
	out := make([]Query, 0, len(names))
	for _, n := range names {
		b, err := files.ReadFile(n)
		if err != nil {
			panic(err)
		}
		sql := string(b)
		first, _, _ := strings.Cut(sql, "\n")
		out = append(out, Query{Name: strings.TrimSuffix(n, ".sql"), Description: strings.TrimSpace(strings.TrimPrefix(first, "--")), SQL: sql})
	}
	return out
}
