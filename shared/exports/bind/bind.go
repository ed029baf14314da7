// Package bind wires the export routes (asking for an export, reading its
// status) to the Exports table and the documents' store, and gives the
// export processor and the erasure job (bound by shared/app/all, since
// they reach every feature) their exports side.
package bind

import (
	"context"
	"errors"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/rallyhq/rally/shared/api"
	"github.com/rallyhq/rally/shared/app"
	"github.com/rallyhq/rally/shared/exports"
	"github.com/rallyhq/rally/shared/exports/objects"
	privacybind "github.com/rallyhq/rally/shared/privacy/bind"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
)

// Exports binds the export routes.
var Exports = app.Feature{Name: routes.Privacy, Bind: func(d *app.Deps) app.Handlers {
	h := &exports.API{
		Records: Records(d), Erasures: privacybind.Records(d), Accounts: d.Accounts(), Documents: Documents(d), Clock: d.Clock,
	}
	return app.Handlers{Endpoints: map[string]api.Endpoint{
		routes.ExportUser.Function:   h.ExportUser,
		routes.ExportStatus.Function: h.ExportStatus,
	}}
}}

// Records is the Exports table's store.
func Records(d *app.Deps) *exports.Records {
	return &exports.Records{DB: d.DB, Table: d.Table(schema.Exports), Hash: privacybind.Hasher(d).Hash}
}

// Documents is where export documents are kept: the exports bucket in AWS
// (RALLY_EXPORT_BUCKET), files under the local state directory locally
// (RALLY_EXPORTS_DIR). Without either (a test's deployment), writing and
// linking fail with a clear error, and erasing has nothing to erase.
func Documents(d *app.Deps) exports.Documents {
	switch {
	case d.Config.ExportBucket != "":
		client := s3.NewFromConfig(d.AWS)
		return &objects.Bucket{Client: client, Presign: s3.NewPresignClient(client), Name: d.Config.ExportBucket, Clock: d.Clock}
	case d.Config.ExportsDir != "":
		return &objects.Dir{Root: d.Config.ExportsDir, Base: d.Config.ExportLinks, Key: []byte(objects.LocalLinkKey), Clock: d.Clock}
	}
	return unconfigured{}
}

// Eraser erases a user's exports (a part of the erasure job).
func Eraser(d *app.Deps) *exports.Eraser {
	return &exports.Eraser{Records: Records(d), Documents: Documents(d), Hashes: privacybind.Hasher(d).Hashes}
}

var errUnconfigured = errors.New("exports: no place for export documents (RALLY_EXPORT_BUCKET or RALLY_EXPORTS_DIR) is configured")

type unconfigured struct{}

func (unconfigured) Put(context.Context, string, []byte) error    { return errUnconfigured }
func (unconfigured) Get(context.Context, string) ([]byte, error)  { return nil, errUnconfigured }
func (unconfigured) Join(context.Context, string, []string) error { return errUnconfigured }
func (unconfigured) Delete(context.Context, ...string) error      { return nil }
func (unconfigured) DeletePrefix(context.Context, string) error   { return nil }
func (unconfigured) Link(context.Context, string, time.Time) (string, error) {
	return "", errUnconfigured
}
