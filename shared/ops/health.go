package ops

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/shared/api"
	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/freshness"
	"github.com/rallyhq/rally/shared/jobs"
	"github.com/rallyhq/rally/shared/schema"
)

// Watermarks are the processors' watermarks (shared/freshness): the
// newest change each applied, and when.
type Watermarks interface {
	Get(ctx context.Context, processor string) (freshness.Watermark, bool, error)
}

type (
	healthBody struct {
		Redis struct {
			Reachable bool `json:"reachable"`
			Trusted   bool `json:"trusted"`
		} `json:"redis"`
		DynamoDB struct {
			Reachable bool `json:"reachable"`
		} `json:"dynamodb"`
		Processors      []processorHealth `json:"processors"`
		JobsRunning     int               `json:"jobs_running"`
		PendingErasures int               `json:"pending_erasures"`
		LastReconcile   *reconcileBody    `json:"last_reconcile"`
	}
	processorHealth struct {
		Name     string   `json:"name"`
		Lag      *float64 `json:"lag_seconds"`
		DLQDepth int      `json:"dlq_depth"`
	}
	reconcileBody struct {
		ID         string     `json:"job_id"`
		State      jobs.State `json:"state"`
		Checked    int64      `json:"checked"`
		Drifted    int64      `json:"drifted"`
		Repaired   int64      `json:"repaired"`
		StartedAt  time.Time  `json:"started_at"`
		FinishedAt *time.Time `json:"finished_at"`
	}
)

// Health serves GET /v1/ops/health: a report, answered whatever it finds
// (a part that cannot be read says so: unreachable, or a lag of null).
func (a *API) Health(ctx context.Context, r *api.Request) (api.Response, error) {
	if _, err := r.Service(); err != nil {
		return api.Response{}, err
	}
	var b healthBody
	b.Redis.Reachable = a.Redis != nil && a.Redis.Ping(ctx).Err() == nil
	b.Redis.Trusted = b.Redis.Reachable
	for _, g := range a.Caches {
		st, err := g.State(ctx)
		if err != nil || !st.Fresh() {
			b.Redis.Trusted = false
		}
	}
	running, err := a.Jobs.Running(ctx)
	b.DynamoDB.Reachable = err == nil
	b.JobsRunning = len(running)
	if n, err := a.pendingErasures(ctx); err == nil {
		b.PendingErasures = n
	}
	if last, found, err := a.Jobs.Latest(ctx, jobs.Reconcile); err == nil && found {
		jb := bodyOf(last)
		b.LastReconcile = &reconcileBody{
			ID: last.ID, State: last.State, Checked: last.Checked, Drifted: last.Drifted, Repaired: last.Repaired,
			StartedAt: last.StartedAt, FinishedAt: jb.FinishedAt,
		}
	}
	b.Processors = []processorHealth{}
	for _, fn := range processors() {
		p := processorHealth{Name: fn}
		if parked, err := a.Archive.List(ctx, fn); err == nil {
			p.DLQDepth = len(parked)
		}
		if a.Watermarks != nil {
			if w, known, err := a.Watermarks.Get(ctx, fn); err == nil && known {
				s := w.Lag().Seconds()
				p.Lag = &s
			}
		}
		b.Processors = append(b.Processors, p)
	}
	return api.OK(b), nil
}

// pendingErasures counts the erasures still to finish (the sparse
// by_pending index of Erasures).
func (a *API) pendingErasures(ctx context.Context) (int, error) {
	in := ddb.QueryInput(a.Erasures, ddb.MustBuild(expression.NewBuilder().WithKeyCondition(
		expression.Key(schema.AttrPending).Equal(expression.Value(schema.ErasurePending)))))
	in.IndexName, in.Select = aws.String(schema.IndexErasuresPending), types.SelectCount
	n := 0
	p := dynamodb.NewQueryPaginator(a.DB, in)
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			return 0, err
		}
		n += int(out.Count)
	}
	return n, nil
}
