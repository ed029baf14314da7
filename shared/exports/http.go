package exports

import (
	"context"
	"time"

	"github.com/rallyhq/rally/shared/api"
	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/errs"
	"github.com/rallyhq/rally/shared/privacy"
)

// Accounts tells when Rally first saw a user (accounts.Store): an erased
// user seen again since their erasure has data to export again.
type Accounts interface {
	FirstSeen(ctx context.Context, user string) (time.Time, bool, error)
}

// API serves the export routes.
type API struct {
	Records  *Records
	Erasures Erasures
	Accounts Accounts
	// Documents signs the links to ready documents.
	Documents Documents
	Clock     clock.Clock
}

type exportBody struct {
	ExportID    string     `json:"export_id"`
	Status      Status     `json:"status"`
	RequestedAt time.Time  `json:"requested_at"`
	ReadyAt     *time.Time `json:"ready_at"`
	URL         *string    `json:"url"`
	ExpiresAt   *time.Time `json:"expires_at"`
}

// ExportUser serves POST /v1/users/{user_id}/export and POST
// /v1/ops/users/{user_id}/export: 202 with the export, pending (the one
// already pending, if any). A user whose erasure is under way, or who was
// erased and not seen since, is refused (409): there is nothing of theirs
// Rally may hand out.
func (a *API) ExportUser(ctx context.Context, r *api.Request) (api.Response, error) {
	if err := r.NoBody(); err != nil {
		return api.Response{}, err
	}
	user, err := r.Subject("a player can only export their own data")
	if err != nil {
		return api.Response{}, err
	}
	if err := a.refusal(ctx, user); err != nil {
		return api.Response{}, err
	}
	e, err := a.Records.Request(ctx, user, a.Clock.Now())
	if err != nil {
		return api.Response{}, err
	}
	return api.Accepted(exportBody{ExportID: e.ID, Status: e.Status, RequestedAt: e.RequestedAt}), nil
}

// refusal says why user's data may not be exported now, if it may not.
func (a *API) refusal(ctx context.Context, user string) error {
	er, ok, err := a.Erasures.Find(ctx, user)
	if err != nil || !ok {
		return err
	}
	if er.Status == privacy.Pending {
		return errs.ErasurePending.New("this user's erasure is under way; nothing of theirs can be exported")
	}
	seen, ok, err := a.Accounts.FirstSeen(ctx, user)
	if err != nil {
		return errs.Wrap(errs.Unavailable, err, "the user's account could not be read")
	}
	if ok && seen.After(er.CompletedAt) {
		return nil
	}
	return errs.Erased.New("this user was erased on %s and has not been seen since; Rally holds nothing of theirs to export",
		er.CompletedAt.UTC().Format(time.RFC3339))
}

// ExportStatus serves GET /v1/users/{user_id}/exports/{export_id} and its
// /v1/ops twin: the export, and once it is READY a link to its document
// valid for LinkValidity (never past the document's expiry). 404 for an
// unknown export, another user's, or one expired.
func (a *API) ExportStatus(ctx context.Context, r *api.Request) (api.Response, error) {
	id := r.Path("export_id")
	var f errs.Fields
	api.CheckID(&f, "export_id", id)
	if err := f.Err(); err != nil {
		return api.Response{}, err
	}
	user, err := r.Subject("a player can only export their own data")
	if err != nil {
		return api.Response{}, err
	}
	now := a.Clock.Now()
	e, ok, err := a.Records.Get(ctx, user, id)
	if err != nil {
		return api.Response{}, err
	}
	if !ok || !now.Before(e.ExpiresAt) {
		return api.Response{}, errs.New(errs.NotFound, "no export %s of this user (exports are kept %s once ready)", id, Retention)
	}
	b := exportBody{ExportID: e.ID, Status: e.Status, RequestedAt: e.RequestedAt}
	if e.Status == Ready {
		until := now.Add(LinkValidity)
		if e.ExpiresAt.Before(until) {
			until = e.ExpiresAt
		}
		link, err := a.Documents.Link(ctx, e.Object, until)
		if err != nil {
			return api.Response{}, errs.Wrap(errs.Unavailable, err, "the link to the export could not be signed")
		}
		ready := e.ReadyAt
		b.ReadyAt, b.URL, b.ExpiresAt = &ready, &link, &until
	}
	return api.OK(b), nil
}
