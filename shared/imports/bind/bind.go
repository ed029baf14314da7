// Package bind wires the import job to where files are read from: S3,
// and on the local stack the local disk.
package bind

import (
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/rallyhq/rally/shared/app"
	"github.com/rallyhq/rally/shared/imports"
)

// Task is the import job's task, loading lines with the given importers
// (one per feature, see shared/app/all).
func Task(d *app.Deps, importers ...imports.Importer) *imports.Task {
	return &imports.Task{
		Sources:   imports.Opener{S3: s3.NewFromConfig(d.AWS), Files: d.Config.Local()},
		Importers: importers,
		Clock:     d.Clock,
	}
}
