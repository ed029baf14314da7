// Package nodemodules finds the repository's npm packages (DynamoDB Local,
// Swagger UI) from any directory inside the module, as tests run from
// their package directory.
package nodemodules

import (
	"os"
	"path/filepath"
)

// Find looks in from's node_modules (from is the working directory when
// empty), then in each parent's up to the module root (the directory
// holding go.mod), and returns the first path match finds there.
func Find(from string, match func(nodeModules string) (string, bool)) (string, bool, error) {
	if from == "" {
		var err error
		if from, err = os.Getwd(); err != nil {
			return "", false, err
		}
	}
	dir, err := filepath.Abs(from)
	if err != nil {
		return "", false, err
	}
	for {
		if p, ok := match(filepath.Join(dir, "node_modules")); ok {
			return p, true, nil
		}
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return "", false, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false, nil
		}
		dir = parent
	}
}
