package jobs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/errs"
	"github.com/rallyhq/rally/shared/schema"
)

// Retention is how long a finished job stays readable.
const Retention = 30 * 24 * time.Hour

// Store is the Jobs table.
type Store struct {
	DB    ddb.DB
	Table string
}

// item is a job as stored. While the job runs, running is set (listing it
// in by_running); while a runner holds it, lease_owner and lease_until
// say who and until when; next_run_at holds it back after a failure.
type item struct {
	JobID      string           `dynamodbav:"job_id"`
	Kind       string           `dynamodbav:"kind"`
	Target     string           `dynamodbav:"target"`
	BoardID    string           `dynamodbav:"board_id,omitempty"`
	Period     string           `dynamodbav:"period,omitempty"`
	Source     string           `dynamodbav:"source,omitempty"`
	State      string           `dynamodbav:"state"`
	Running    string           `dynamodbav:"running,omitempty"`
	StartedAt  string           `dynamodbav:"started_at"`
	FinishedAt string           `dynamodbav:"finished_at,omitempty"`
	Done       int64            `dynamodbav:"done"`
	Total      int64            `dynamodbav:"total"`
	Checked    int64            `dynamodbav:"checked"`
	Drifted    int64            `dynamodbav:"drifted"`
	Repaired   int64            `dynamodbav:"repaired"`
	Rejected   int64            `dynamodbav:"rejected,omitempty"`
	Examples   []string         `dynamodbav:"examples,omitempty"`
	Drift      map[string]int64 `dynamodbav:"drift,omitempty"`
	Error      string           `dynamodbav:"error,omitempty"`
	Runs       int              `dynamodbav:"runs"`
	Failures   int              `dynamodbav:"failures"`
	Step       int              `dynamodbav:"step"`
	Cursor     string           `dynamodbav:"cursor,omitempty"`
	NextRunAt  string           `dynamodbav:"next_run_at,omitempty"`
	LeaseOwner string           `dynamodbav:"lease_owner,omitempty"`
	LeaseUntil string           `dynamodbav:"lease_until,omitempty"`
	Expires    int64            `dynamodbav:"expires_at,omitempty"`
}

const runningMark = "1"

// Attribute names the store's expressions use.
const (
	attrState      = "state"
	attrNextRunAt  = "next_run_at"
	attrLeaseOwner = "lease_owner"
	attrLeaseUntil = "lease_until"
	attrRuns       = "runs"
)

func toItem(j Job) item {
	it := item{
		JobID: j.ID, Kind: string(j.Kind), Target: string(j.Target), BoardID: j.Spec.ID, Period: j.Period, Source: j.Source,
		State: string(j.State), StartedAt: ddb.FormatTime(j.StartedAt),
		Done: j.Progress.Done, Total: j.Progress.Total,
		Checked: j.Checked, Drifted: j.Drifted, Repaired: j.Repaired, Rejected: j.Rejected, Examples: j.Examples, Drift: j.Drift,
		Error: j.Error, Runs: j.Runs, Failures: j.failures, Step: j.Step, Cursor: j.Cursor,
	}
	if j.State == Running {
		it.Running = runningMark
	} else {
		it.FinishedAt = ddb.FormatTime(j.FinishedAt)
		it.Expires = j.FinishedAt.Add(Retention).Unix()
	}
	return it
}

func fromItem(it item) Job {
	j := Job{
		ID:    it.JobID,
		Spec:  Spec{Kind: Kind(it.Kind), Target: Target(it.Target), ID: it.BoardID, Period: it.Period, Source: it.Source},
		State: State(it.State), Progress: Progress{Done: it.Done, Total: it.Total},
		Findings: Findings{
			Checked: it.Checked, Drifted: it.Drifted, Repaired: it.Repaired, Rejected: it.Rejected, Examples: it.Examples, Drift: it.Drift,
		},
		Error: it.Error, StartedAt: ddb.ParseTime(it.StartedAt), Runs: it.Runs, failures: it.Failures,
		Step: it.Step, Cursor: it.Cursor,
	}
	if it.FinishedAt != "" {
		j.FinishedAt = ddb.ParseTime(it.FinishedAt)
	}
	if j.Examples == nil {
		j.Examples = []string{}
	}
	return j
}

func key(id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{schema.AttrJobID: ddb.S(id)}
}

// NewID returns a fresh job id.
func NewID() string {
	var b [10]byte
	_, _ = rand.Read(b[:])
	return "job_" + hex.EncodeToString(b[:])
}

// Create stores a new running job; created is false when a job with its
// ID exists already (a scheduled job asked for twice).
func (s *Store) Create(ctx context.Context, j Job) (created bool, err error) {
	raw, err := attributevalue.MarshalMap(toItem(j))
	if err != nil {
		return false, err
	}
	cond := expression.Name(schema.AttrJobID).AttributeNotExists()
	_, err = s.DB.PutItem(ctx, ddb.PutInput(s.Table, raw, ddb.MustBuild(expression.NewBuilder().WithCondition(cond))))
	if ddb.IsConditionFailed(err) {
		return false, nil
	}
	if err != nil {
		return false, errs.Wrap(errs.Unavailable, fmt.Errorf("create job %s: %w", j.ID, err), "the jobs store is unreachable")
	}
	return true, nil
}

// Get reads a job.
func (s *Store) Get(ctx context.Context, id string) (Job, error) {
	out, err := s.DB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.Table), Key: key(id), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return Job{}, errs.Wrap(errs.Unavailable, fmt.Errorf("read job %s: %w", id, err), "the jobs store is unreachable")
	}
	if len(out.Item) == 0 {
		return Job{}, errs.New(errs.NotFound, "no job %s", id)
	}
	var it item
	if err := attributevalue.UnmarshalMap(out.Item, &it); err != nil {
		return Job{}, fmt.Errorf("decode job %s: %w", id, err)
	}
	return fromItem(it), nil
}

// Acquire takes the lease of a running job until the given time, unless
// another runner holds it or the job is held back (next_run_at); ok is
// false then, and for a finished job.
func (s *Store) Acquire(ctx context.Context, id, owner string, until, now time.Time) (Job, bool, error) {
	at := expression.Value(ddb.FormatTime(now))
	free := expression.Name(attrLeaseUntil).AttributeNotExists().Or(expression.Name(attrLeaseUntil).LessThan(at))
	due := expression.Name(attrNextRunAt).AttributeNotExists().Or(expression.Name(attrNextRunAt).LessThanEqual(at))
	cond := expression.Name(attrState).Equal(expression.Value(string(Running))).And(free, due)
	upd := expression.Set(expression.Name(attrLeaseOwner), expression.Value(owner)).
		Set(expression.Name(attrLeaseUntil), expression.Value(ddb.FormatTime(until))).
		Add(expression.Name(attrRuns), expression.Value(1)).
		Remove(expression.Name(attrNextRunAt))
	in := ddb.UpdateInput(s.Table, key(id), ddb.MustBuild(expression.NewBuilder().WithCondition(cond).WithUpdate(upd)))
	in.ReturnValues = types.ReturnValueAllNew
	out, err := s.DB.UpdateItem(ctx, in)
	if ddb.IsConditionFailed(err) {
		return Job{}, false, nil
	}
	if err != nil {
		return Job{}, false, fmt.Errorf("lease job %s: %w", id, err)
	}
	var it item
	if err := attributevalue.UnmarshalMap(out.Attributes, &it); err != nil {
		return Job{}, false, fmt.Errorf("decode job %s: %w", id, err)
	}
	return fromItem(it), true, nil
}

// Save writes the job as owner holds it: with the lease until the given
// time (checkpoint), released (until zero) or finished; nextRun, when
// set, holds the job back until then. It fails with ErrLeaseLost when
// owner no longer holds the lease.
func (s *Store) Save(ctx context.Context, j Job, owner string, until, nextRun time.Time) error {
	it := toItem(j)
	if !until.IsZero() && j.State == Running {
		it.LeaseOwner, it.LeaseUntil = owner, ddb.FormatTime(until)
	}
	if !nextRun.IsZero() && j.State == Running {
		it.NextRunAt = ddb.FormatTime(nextRun)
	}
	raw, err := attributevalue.MarshalMap(it)
	if err != nil {
		return err
	}
	cond := expression.Name(attrLeaseOwner).Equal(expression.Value(owner))
	_, err = s.DB.PutItem(ctx, ddb.PutInput(s.Table, raw, ddb.MustBuild(expression.NewBuilder().WithCondition(cond))))
	if ddb.IsConditionFailed(err) {
		return ErrLeaseLost
	}
	if err != nil {
		return fmt.Errorf("save job %s: %w", j.ID, err)
	}
	return nil
}

// Running lists the running jobs, oldest first.
func (s *Store) Running(ctx context.Context) ([]Job, error) {
	e := ddb.MustBuild(expression.NewBuilder().WithKeyCondition(expression.Key(schema.AttrRunning).Equal(expression.Value(runningMark))))
	in := ddb.QueryInput(s.Table, e)
	in.IndexName = aws.String(schema.IndexJobsRunning)
	var out []Job
	p := dynamodb.NewQueryPaginator(s.DB, in)
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, errs.Wrap(errs.Unavailable, fmt.Errorf("list running jobs: %w", err), "the jobs store is unreachable")
		}
		for _, raw := range page.Items {
			var it item
			if err := attributevalue.UnmarshalMap(raw, &it); err != nil {
				return nil, fmt.Errorf("decode running job: %w", err)
			}
			out = append(out, Job{ID: it.JobID, State: Running, StartedAt: ddb.ParseTime(it.StartedAt)})
		}
	}
	return out, nil
}

// Latest returns the newest job of a kind; found is false when there is
// none.
func (s *Store) Latest(ctx context.Context, k Kind) (Job, bool, error) {
	e := ddb.MustBuild(expression.NewBuilder().WithKeyCondition(expression.Key(schema.AttrKind).Equal(expression.Value(string(k)))))
	in := ddb.QueryInput(s.Table, e)
	in.IndexName = aws.String(schema.IndexJobsByKind)
	in.ScanIndexForward = aws.Bool(false)
	in.Limit = aws.Int32(1)
	out, err := s.DB.Query(ctx, in)
	if err != nil {
		return Job{}, false, errs.Wrap(errs.Unavailable, fmt.Errorf("find the latest %s: %w", k, err), "the jobs store is unreachable")
	}
	if len(out.Items) == 0 {
		return Job{}, false, nil
	}
	var it item
	if err := attributevalue.UnmarshalMap(out.Items[0], &it); err != nil {
		return Job{}, false, err
	}
	j, err := s.Get(ctx, it.JobID)
	if errs.Is(err, errs.NotFound) {
		return Job{}, false, nil
	}
	return j, err == nil, err
}
