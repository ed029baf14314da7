package privacy

import (
	"context"
	"time"

	"github.com/rallyhq/rally/shared/api"
	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/errs"
)

// API serves the erasure routes.
type API struct {
	Records *Records
	Clock   clock.Clock
}

type erasureBody struct {
	ErasureID   string     `json:"erasure_id"`
	Status      Status     `json:"status"`
	RequestedAt time.Time  `json:"requested_at"`
	CompletedAt *time.Time `json:"completed_at"`
}

func bodyOf(e Erasure) erasureBody {
	b := erasureBody{ErasureID: e.ID, Status: e.Status, RequestedAt: e.RequestedAt}
	if !e.CompletedAt.IsZero() {
		at := e.CompletedAt
		b.CompletedAt = &at
	}
	return b
}

// EraseUser serves DELETE /v1/users/{user_id} and DELETE
// /v1/ops/users/{user_id}: 202 with the erasure, pending. The answer is the
// same whether or not Rally holds anything about the user, so it tells
// nobody whether an id exists; an erasure already pending is returned
// again, and one after a completed erasure starts anew.
func (a *API) EraseUser(ctx context.Context, r *api.Request) (api.Response, error) {
	if err := r.NoBody(); err != nil {
		return api.Response{}, err
	}
	user, err := r.Subject("a player can only erase themselves")
	if err != nil {
		return api.Response{}, err
	}
	e, err := a.Records.Request(ctx, user, a.Clock.Now())
	if err != nil {
		return api.Response{}, err
	}
	return api.Accepted(bodyOf(e)), nil
}

// ErasureStatus serves GET /v1/users/{user_id}/erasure and its /v1/ops
// twin: the latest erasure of the user, or 404 when none was requested.
func (a *API) ErasureStatus(ctx context.Context, r *api.Request) (api.Response, error) {
	user, err := r.Subject("a player can only erase themselves")
	if err != nil {
		return api.Response{}, err
	}
	e, ok, err := a.Records.Find(ctx, user)
	if err != nil {
		return api.Response{}, err
	}
	if !ok {
		return api.Response{}, errs.New(errs.NotFound, "no erasure was requested for this user")
	}
	return api.OK(bodyOf(e)), nil
}
