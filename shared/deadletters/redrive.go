package deadletters

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-lambda-go/events"
)

// Invoker runs a processor with a batch, as its event source mapping does:
// Lambda's Invoke in AWS, the handler itself in the local stack.
type Invoker interface {
	Invoke(ctx context.Context, function string, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error)
}

// Outcome is what a redrive did with one parked batch.
type Outcome struct {
	Function string `json:"function"`
	Batch    string `json:"batch_id"`
	Records  int    `json:"records"`
	// Applied counts the records the processor applied; the rest stay
	// parked (as a batch of their own when some were applied).
	Applied int    `json:"applied"`
	Error   string `json:"error,omitempty"`
}

// Done reports whether the whole batch was applied (and is no longer
// parked).
func (o Outcome) Done() bool { return o.Error == "" && o.Applied == o.Records }

// Redrive replays the parked batches of function (only the batch id when
// id is not empty), oldest first, through inv. A batch the processor
// applies whole is removed; one it applies in part keeps only the records
// from the first it did not. Processors apply records idempotently, so a
// batch replayed after a crash of the redrive itself changes nothing twice.
func (a *Archive) Redrive(ctx context.Context, inv Invoker, function, id string) ([]Outcome, error) {
	batches, err := a.List(ctx, function)
	if err != nil {
		return nil, err
	}
	var out []Outcome
	found := id == ""
	for _, b := range batches {
		if id != "" && b.ID != id {
			continue
		}
		found = true
		o, err := a.redrive(ctx, inv, b)
		if err != nil {
			return out, err
		}
		out = append(out, o)
	}
	if !found {
		return nil, ErrNotFound
	}
	return out, nil
}

// redrive replays one batch holding its lease: a batch another redrive or
// an erasure holds is reported as such and left alone. Records no redrive
// may apply (an erased user's) are dropped from it first (see keep).
func (a *Archive) redrive(ctx context.Context, inv Invoker, b Batch) (Outcome, error) {
	o := Outcome{Function: b.Function, Batch: b.ID, Records: b.Size}
	owner, err := a.lease(ctx, b)
	if errors.Is(err, ErrLeased) || errors.Is(err, ErrNotFound) {
		o.Error = err.Error()
		return o, nil
	}
	if err != nil {
		return o, err
	}
	records, err := a.Records(ctx, b)
	if err == nil {
		records, err = a.keep(ctx, records, true)
	}
	if err != nil {
		return o, errors.Join(err, a.release(ctx, b, owner))
	}
	o.Records = len(records)
	from := 0
	var resp events.DynamoDBEventResponse
	invokeErr := error(nil)
	if len(records) > 0 {
		resp, invokeErr = inv.Invoke(ctx, b.Function, events.DynamoDBEvent{Records: records})
	}
	switch {
	case invokeErr != nil:
		o.Error = invokeErr.Error()
	case len(resp.BatchItemFailures) == 0:
		o.Applied = len(records)
		return o, a.Remove(ctx, b)
	default:
		first := resp.BatchItemFailures[0].ItemIdentifier
		o.Error = "the processor still fails from sequence number " + first
		for i, r := range records {
			if r.Change.SequenceNumber == first {
				from = i
				break
			}
		}
	}
	o.Applied = from
	if _, err := a.Retry(ctx, b, records, from, fmt.Errorf("%s", o.Error)); err != nil {
		return o, errors.Join(err, a.release(ctx, b, owner))
	}
	return o, nil
}
