package ops

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/shared/api"
	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/errs"
	"github.com/rallyhq/rally/shared/jobs"
	"github.com/rallyhq/rally/shared/schema"
)

type jobRequest struct {
	Kind   *string `json:"kind"`
	Target *string `json:"target"`
	ID     *string `json:"id"`
	Period *string `json:"period"`
	Source *string `json:"source"`
}

// StartJob serves POST /v1/ops/jobs: it records the job, which the Jobs
// stream hands to the job runner at once.
func (a *API) StartJob(ctx context.Context, r *api.Request) (api.Response, error) {
	if _, err := r.Service(); err != nil {
		return api.Response{}, err
	}
	var in jobRequest
	if err := r.Decode(&in); err != nil {
		return api.Response{}, err
	}
	var f errs.Fields
	if in.Kind == nil {
		f.Add("kind", "is required")
	}
	if in.Target == nil && (in.Kind == nil || jobs.Kind(*in.Kind) != jobs.Import) {
		f.Add("target", "is required")
	}
	if in.ID != nil {
		api.CheckID(&f, "id", *in.ID)
	}
	if in.Period != nil {
		api.CheckID(&f, "period", *in.Period)
	}
	if err := f.Err(); err != nil {
		return api.Response{}, err
	}
	spec := jobs.Spec{
		Kind: jobs.Kind(*in.Kind), Target: jobs.Target(deref(in.Target)), ID: deref(in.ID), Period: deref(in.Period), Source: deref(in.Source),
	}
	if err := spec.Validate(); err != nil {
		return api.Response{}, err
	}
	if spec.ID != "" {
		if err := a.boardExists(ctx, spec.ID); err != nil {
			return api.Response{}, err
		}
	}
	j, err := jobs.Start(ctx, a.Jobs, spec, a.Clock.Now())
	if err != nil {
		return api.Response{}, err
	}
	resp := api.Accepted(struct {
		ID    string     `json:"job_id"`
		State jobs.State `json:"state"`
	}{j.ID, j.State})
	resp.Headers = map[string]string{"Location": "/v1/ops/jobs/" + j.ID}
	return resp, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// jobBody is a job as GET /v1/ops/jobs/{job_id} shows it.
type jobBody struct {
	ID         string        `json:"job_id"`
	Kind       jobs.Kind     `json:"kind"`
	Target     jobs.Target   `json:"target,omitempty"`
	Board      string        `json:"id,omitempty"`
	Period     string        `json:"period,omitempty"`
	Source     string        `json:"source,omitempty"`
	State      jobs.State    `json:"state"`
	Progress   jobs.Progress `json:"progress"`
	Checked    int64         `json:"checked"`
	Drifted    int64         `json:"drifted"`
	Repaired   int64         `json:"repaired"`
	Rejected   int64         `json:"rejected"`
	Examples   []string      `json:"examples"`
	Error      string        `json:"error,omitempty"`
	Runs       int           `json:"runs"`
	StartedAt  time.Time     `json:"started_at"`
	FinishedAt *time.Time    `json:"finished_at"`
}

func bodyOf(j jobs.Job) jobBody {
	b := jobBody{
		ID: j.ID, Kind: j.Kind, Target: j.Target, Board: j.Spec.ID, Period: j.Period, Source: j.Source,
		State: j.State, Progress: j.Progress, Checked: j.Checked, Drifted: j.Drifted, Repaired: j.Repaired, Rejected: j.Rejected, Examples: j.Examples, Error: j.Error,
		Runs: j.Runs, StartedAt: j.StartedAt,
	}
	if b.Examples == nil {
		b.Examples = []string{}
	}
	if !j.FinishedAt.IsZero() {
		b.FinishedAt = &j.FinishedAt
	}
	return b
}

// GetJob serves GET /v1/ops/jobs/{job_id}.
func (a *API) GetJob(ctx context.Context, r *api.Request) (api.Response, error) {
	if _, err := r.Service(); err != nil {
		return api.Response{}, err
	}
	id := r.Path("job_id")
	var f errs.Fields
	if api.CheckID(&f, "job_id", id); f.Err() != nil {
		return api.Response{}, f.Err()
	}
	j, err := a.Jobs.Get(ctx, id)
	if err != nil {
		return api.Response{}, err
	}
	return api.OK(bodyOf(j)), nil
}

// boardExists answers NotFound unless a leaderboard has the id (read from
// the Leaderboards table's key alone: the route does not link the
// leaderboards feature).
func (a *API) boardExists(ctx context.Context, id string) error {
	out, err := a.DB.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(a.Boards), Key: map[string]types.AttributeValue{schema.AttrBoardID: ddb.S(id)},
		ProjectionExpression: aws.String(schema.AttrBoardID),
	})
	if err != nil {
		return errs.Wrap(errs.Unavailable, err, "the leaderboards store is unreachable")
	}
	if len(out.Item) == 0 {
		return errs.New(errs.NotFound, "no leaderboard %s", id)
	}
	return nil
}
