package api

import (
	"bytes"
	"context"
	"encoding/json"

	"github.com/rallyhq/rally/shared/errs"
	"github.com/rallyhq/rally/shared/idempotency"
)

// IdempotencyKey returns the request's Idempotency-Key, validated; empty
// when absent and not required.
func (r *Request) IdempotencyKey(required bool) (string, error) {
	key := r.Header(idempotency.Header)
	if key == "" {
		if required {
			return "", errs.Field(idempotency.Header, "is required (a key of your choosing, the same on every retry)")
		}
		return "", nil
	}
	if !ValidID(key) {
		return "", errs.Field(idempotency.Header, IDMessage)
	}
	return key, nil
}

// IdempotencyHash fingerprints the request for idempotency checks.
func (r *Request) IdempotencyHash() string {
	body, _ := r.Body()
	return idempotency.Hash(r.Event.RequestContext.HTTP.Method, r.Event.RawPath, body)
}

// Stored turns a response into the form kept for replays.
func Stored(resp Response) (idempotency.Result, error) {
	body, err := json.Marshal(resp.Body)
	if err != nil {
		return idempotency.Result{}, err
	}
	status := resp.Status
	if status == 0 {
		status = 200
	}
	return idempotency.Result{Status: status, Body: body}, nil
}

// ReplayedHeader marks a response that answers a retry.
const ReplayedHeader = "Idempotent-Replayed"

// Replay turns a stored result back into a response.
func Replay(res idempotency.Result) Response {
	return Response{Status: res.Status, Body: json.RawMessage(res.Body), Headers: map[string]string{ReplayedHeader: "true"}}
}

// Idempotent runs fn once per Idempotency-Key (when the request carries
// one, or must): the first response is stored and replayed to retries; a
// reused key with a different request is refused.
func Idempotent(ctx context.Context, store *idempotency.Store, r *Request, route, caller string, required bool, fn func(context.Context) (Response, error)) (Response, error) {
	key, err := r.IdempotencyKey(required)
	if err != nil {
		return Response{}, err
	}
	if key == "" {
		return fn(ctx)
	}
	res, replayed, err := store.Run(ctx, idempotency.Key{Route: route, Caller: caller, Value: key}, r.IdempotencyHash(),
		func(ctx context.Context) (idempotency.Result, error) {
			resp, err := fn(ctx)
			if err != nil {
				return idempotency.Result{}, err
			}
			return Stored(resp)
		})
	if err != nil {
		return Response{}, err
	}
	resp := Replay(res)
	if !replayed {
		resp.Headers = nil
	}
	return resp, nil
}

// NoBody accepts an empty body or an empty JSON object, and refuses
// anything else, for routes that take no input in the body.
func (r *Request) NoBody() error {
	body, err := r.Body()
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	var empty struct{}
	return DecodeJSON(body, &empty)
}
