// Package ops serves what an operating team calls with service credentials:
// a health report, the operations jobs (shared/jobs), and the batches
// stream processors parked (archived with their records by
// shared/deadletters) and their redrive.
package ops

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rallyhq/rally/shared/api"
	"github.com/rallyhq/rally/shared/cachegen"
	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/deadletters"
	"github.com/rallyhq/rally/shared/errs"
	"github.com/rallyhq/rally/shared/jobs"
	"github.com/rallyhq/rally/shared/routes"
)

// API serves the operations routes.
type API struct {
	Archive *deadletters.Archive
	// Invoker runs a processor with a batch (Lambda's Invoke).
	Invoker deadletters.Invoker
	Jobs    *jobs.Store
	Clock   clock.Clock
	// Redis and the cache generations of every scope, for health.
	Redis  redis.UniversalClient
	Caches []*cachegen.Tracker
	// DB and the tables' names: Erasures counts the pending erasures,
	// Boards checks a job's leaderboard exists.
	DB       ddb.DB
	Erasures string
	Boards   string
	// Watermarks, when set, say how far behind each processor is (the
	// processors that keep one: counter, leaderboard, streak).
	Watermarks Watermarks
}

type (
	parkedBody struct {
		ID         string    `json:"batch_id"`
		Processor  string    `json:"processor"`
		Source     string    `json:"source"`
		Records    int       `json:"records"`
		First      string    `json:"first_sequence_number"`
		Last       string    `json:"last_sequence_number"`
		Reason     string    `json:"reason"`
		Error      string    `json:"error,omitempty"`
		ParkedAt   time.Time `json:"parked_at"`
		ArchivedAt time.Time `json:"archived_at"`
		Attempts   int       `json:"redrive_attempts"`
	}
	redriveRequest struct {
		Processor *string `json:"processor"`
		Batch     *string `json:"batch_id"`
	}
	outcomeBody struct {
		Processor string `json:"processor"`
		Batch     string `json:"batch_id"`
		Records   int    `json:"records"`
		Applied   int    `json:"applied"`
		Error     string `json:"error,omitempty"`
	}
)

// processors lists each processor function once, in declaration order.
func processors() []string {
	var out []string
	for _, p := range routes.Processors() {
		if !slices.Contains(out, p.Function) {
			out = append(out, p.Function)
		}
	}
	return out
}

// processorArg validates an optional processor name: "" means all.
func processorArg(f *errs.Fields, field string, v *string) []string {
	if v == nil || *v == "" {
		return processors()
	}
	if !slices.Contains(processors(), *v) {
		f.Add(field, "must be a stream processor: one of "+strings.Join(processors(), ", "))
		return nil
	}
	return []string{*v}
}

// ListDeadLetters serves GET /v1/ops/dlq.
func (a *API) ListDeadLetters(ctx context.Context, r *api.Request) (api.Response, error) {
	if _, err := r.Service(); err != nil {
		return api.Response{}, err
	}
	var f errs.Fields
	only := r.Query("processor")
	fns := processorArg(&f, "processor", &only)
	if err := f.Err(); err != nil {
		return api.Response{}, err
	}
	body := struct {
		Batches []parkedBody `json:"batches"`
	}{Batches: []parkedBody{}}
	for _, fn := range fns {
		batches, err := a.Archive.List(ctx, fn)
		if err != nil {
			return api.Response{}, errs.Wrap(errs.Unavailable, err, "the dead-letter archive is unreachable")
		}
		for _, b := range batches {
			body.Batches = append(body.Batches, parkedBody{
				ID: b.ID, Processor: b.Function, Source: b.Source, Records: b.Size, First: b.First, Last: b.Last,
				Reason: b.Reason, Error: b.Error, ParkedAt: b.ParkedAt, ArchivedAt: b.ArchivedAt, Attempts: b.Attempts,
			})
		}
	}
	return api.OK(body), nil
}

// RedriveDeadLetters serves POST /v1/ops/dlq/redrive.
func (a *API) RedriveDeadLetters(ctx context.Context, r *api.Request) (api.Response, error) {
	if _, err := r.Service(); err != nil {
		return api.Response{}, err
	}
	var in redriveRequest
	if body, err := r.Body(); err != nil {
		return api.Response{}, err
	} else if len(body) > 0 {
		if err := r.Decode(&in); err != nil {
			return api.Response{}, err
		}
	}
	var f errs.Fields
	fns := processorArg(&f, "processor", in.Processor)
	batch := ""
	if in.Batch != nil {
		batch = *in.Batch
		if in.Processor == nil || *in.Processor == "" {
			f.Add("batch_id", "requires processor")
		}
	}
	if err := f.Err(); err != nil {
		return api.Response{}, err
	}
	body := struct {
		Results []outcomeBody `json:"results"`
	}{Results: []outcomeBody{}}
	for _, fn := range fns {
		outcomes, err := a.Archive.Redrive(ctx, a.Invoker, fn, batch)
		if errors.Is(err, deadletters.ErrNotFound) {
			if batch != "" {
				return api.Response{}, errs.New(errs.NotFound, "%s has no parked batch %s", fn, batch)
			}
			continue
		}
		if err != nil {
			return api.Response{}, errs.Wrap(errs.Unavailable, err, "the dead-letter archive is unreachable")
		}
		for _, o := range outcomes {
			body.Results = append(body.Results, outcomeBody{
				Processor: o.Function, Batch: o.Batch, Records: o.Records, Applied: o.Applied, Error: o.Error,
			})
		}
	}
	return api.OK(body), nil
}
