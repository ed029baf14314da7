// Package bind wires the privacy feature's routes (requesting an erasure
// and reading its status) to the Erasures table. The erasure processor,
// which erases from every feature, is bound by shared/app/all.
package bind

import (
	"github.com/rallyhq/rally/shared/api"
	"github.com/rallyhq/rally/shared/app"
	"github.com/rallyhq/rally/shared/privacy"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
)

// Privacy binds the erasure routes.
var Privacy = app.Feature{Name: routes.Privacy, Bind: func(d *app.Deps) app.Handlers {
	h := &privacy.API{Records: Records(d), Clock: d.Clock}
	return app.Handlers{Endpoints: map[string]api.Endpoint{
		routes.EraseUser.Function:     h.EraseUser,
		routes.ErasureStatus.Function: h.ErasureStatus,
	}}
}}

// Records is the Erasures table's store, its records kept under hashes
// keyed by the erasure key (a function using it declares
// routes.ErasureKey).
func Records(d *app.Deps) *privacy.Records {
	return &privacy.Records{DB: d.DB, Table: d.Table(schema.Erasures), Hasher: Hasher(d)}
}

// Hasher makes the erasure hashes of user ids under the erasure key: its
// Hash is the func(user string) string other features key what must name
// an erased user without naming them by.
func Hasher(d *app.Deps) *privacy.Hasher { return privacy.NewHasher(d.Key(routes.ErasureKey)) }
