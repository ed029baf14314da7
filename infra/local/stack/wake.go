package stack

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"

	"github.com/rallyhq/rally/infra/local/poller"
)

// The pollers back off while their streams are quiet; a write wakes the
// pollers of the table it wrote at once, so what a handler writes is
// applied as soon as it would be by a poller polling four times a second,
// and an idle stack is idle.

// wakeOnWrite is an APIOption for the DynamoDB clients of the stack and
// its handlers: once a write succeeds, the pollers of every table it
// wrote poll at once.
func (s *Stack) wakeOnWrite(st *middleware.Stack) error {
	return st.Initialize.Add(middleware.InitializeMiddlewareFunc("RallyWakePollers", func(
		ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler,
	) (middleware.InitializeOutput, middleware.Metadata, error) {
		out, md, err := next.HandleInitialize(ctx, in)
		if err == nil {
			s.wake(written(in.Parameters)...)
		}
		return out, md, err
	}), middleware.After)
}

// wake makes the pollers of tables (physical names) poll now.
func (s *Stack) wake(tables ...string) {
	by := s.byTable.Load()
	if by == nil {
		return
	}
	for _, t := range tables {
		for _, p := range (*by)[t] {
			p.Wake()
		}
	}
}

// indexPollers records which pollers read each table's stream.
func (s *Stack) indexPollers(pollers []*poller.Poller, tableOf func(*poller.Poller) string) {
	by := map[string][]*poller.Poller{}
	for _, p := range pollers {
		by[tableOf(p)] = append(by[tableOf(p)], p)
	}
	s.byTable.Store(&by)
}

// written lists the tables a DynamoDB call writes, by its input.
func written(params any) []string {
	switch in := params.(type) {
	case *dynamodb.PutItemInput:
		return []string{aws.ToString(in.TableName)}
	case *dynamodb.UpdateItemInput:
		return []string{aws.ToString(in.TableName)}
	case *dynamodb.DeleteItemInput:
		return []string{aws.ToString(in.TableName)}
	case *dynamodb.BatchWriteItemInput:
		out := make([]string, 0, len(in.RequestItems))
		for t := range in.RequestItems {
			out = append(out, t)
		}
		return out
	case *dynamodb.TransactWriteItemsInput:
		var out []string
		for _, item := range in.TransactItems {
			switch {
			case item.Put != nil:
				out = append(out, aws.ToString(item.Put.TableName))
			case item.Update != nil:
				out = append(out, aws.ToString(item.Update.TableName))
			case item.Delete != nil:
				out = append(out, aws.ToString(item.Delete.TableName))
			}
		}
		return out
	}
	return nil
}
