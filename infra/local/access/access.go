// Package access records, in the local stack, what each function's calls
// touch — DynamoDB tables and indexes by IAM action (a transaction or batch
// by each of its items), tables' streams, functions invoked, Redis — and
// compares it with what shared/routes grants the function, which is what
// the CDK stack's policies are built from. The local stack runs every
// handler in one process over one set of clients, so calls are told apart
// by the function name each bound handler puts in its context
// (app.FunctionOf).
package access

import (
	"context"
	"fmt"
	"net"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/smithy-go/middleware"
	"github.com/redis/go-redis/v9"

	"github.com/rallyhq/rally/shared/app"
	"github.com/rallyhq/rally/shared/schema"
	"github.com/rallyhq/rally/shared/streamread"
)

// ActionRedis stands for any Redis command in a Use.
const ActionRedis = "redis"

// Use is one thing a function's call touched.
type Use struct {
	Function string
	// Action is the IAM action the call needs (dynamodb:Query,
	// dynamodb:GetRecords, lambda:InvokeFunction), or ActionRedis.
	Action string
	// Table is the declared name of the table (or, with Stream, of the
	// table whose stream) the action touches; a physical name no table
	// declares is kept as it is.
	Table string
	// Index is the secondary index a Query or Scan reads.
	Index  string
	Stream bool
	// Target is the function a lambda:InvokeFunction invokes.
	Target string
}

func (u Use) String() string {
	switch {
	case u.Action == ActionRedis:
		return u.Function + ": redis"
	case u.Target != "":
		return fmt.Sprintf("%s: %s %s", u.Function, u.Action, u.Target)
	case u.Stream:
		return fmt.Sprintf("%s: %s on the %s stream", u.Function, u.Action, u.Table)
	case u.Index != "":
		return fmt.Sprintf("%s: %s on %s index %s", u.Function, u.Action, u.Table, u.Index)
	}
	return fmt.Sprintf("%s: %s on %s", u.Function, u.Action, u.Table)
}

// Recorder records the uses of calls made inside a function's invocation;
// calls outside any (a test's own setup) are not recorded. Add APIOption
// to the AWS clients' options and the Recorder itself as a Redis hook.
type Recorder struct {
	logical map[string]string

	mu    sync.Mutex
	uses  map[Use]int
	iters map[string]string // shard iterator → declared table
}

// NewRecorder records calls to the tables names gives physical names to.
func NewRecorder(names schema.Names) *Recorder {
	r := &Recorder{logical: map[string]string{}, uses: map[Use]int{}, iters: map[string]string{}}
	for _, t := range schema.Tables() {
		r.logical[names.Of(t)] = t.Name
	}
	return r
}

// Uses returns every distinct use recorded so far, sorted.
func (r *Recorder) Uses() []Use {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Use, 0, len(r.uses))
	for u := range r.uses {
		out = append(out, u)
	}
	slices.SortFunc(out, func(a, b Use) int { return strings.Compare(a.String(), b.String()) })
	return out
}

func (r *Recorder) add(uses ...Use) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, u := range uses {
		r.uses[u]++
	}
}

func (r *Recorder) table(physical string) string {
	if name, ok := r.logical[physical]; ok {
		return name
	}
	return physical
}

// APIOption adds the recording middleware to an AWS client's stack.
func (r *Recorder) APIOption(stack *middleware.Stack) error {
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("RallyAccessRecorder", r.handle), middleware.After)
}

func (r *Recorder) handle(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (
	middleware.InitializeOutput, middleware.Metadata, error,
) {
	fn := app.FunctionOf(ctx)
	if fn != "" {
		r.add(r.usesOf(fn, in.Parameters)...)
	}
	out, md, err := next.HandleInitialize(ctx, in)
	if fn != "" && err == nil {
		// GetRecords names only a shard iterator: remember whose stream
		// each iterator reads.
		switch res := out.Result.(type) {
		case *dynamodbstreams.GetShardIteratorOutput:
			r.iterator(res.ShardIterator, r.table(streamread.TableOf(aws.ToString(in.Parameters.(*dynamodbstreams.GetShardIteratorInput).StreamArn))))
		case *dynamodbstreams.GetRecordsOutput:
			r.mu.Lock()
			table := r.iters[aws.ToString(in.Parameters.(*dynamodbstreams.GetRecordsInput).ShardIterator)]
			r.mu.Unlock()
			r.iterator(res.NextShardIterator, table)
		}
	}
	return out, md, err
}

func (r *Recorder) iterator(iter *string, table string) {
	if iter == nil || table == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.iters[*iter] = table
}

// usesOf lists what one call touches, by the IAM action each part of it
// needs.
func (r *Recorder) usesOf(fn string, params any) []Use {
	on := func(action string, table *string) Use {
		return Use{Function: fn, Action: "dynamodb:" + action, Table: r.table(aws.ToString(table))}
	}
	switch in := params.(type) {
	case *dynamodb.GetItemInput:
		return []Use{on("GetItem", in.TableName)}
	case *dynamodb.PutItemInput:
		return []Use{on("PutItem", in.TableName)}
	case *dynamodb.UpdateItemInput:
		return []Use{on("UpdateItem", in.TableName)}
	case *dynamodb.DeleteItemInput:
		return []Use{on("DeleteItem", in.TableName)}
	case *dynamodb.QueryInput:
		u := on("Query", in.TableName)
		u.Index = aws.ToString(in.IndexName)
		return []Use{u}
	case *dynamodb.ScanInput:
		u := on("Scan", in.TableName)
		u.Index = aws.ToString(in.IndexName)
		return []Use{u}
	case *dynamodb.BatchGetItemInput:
		var out []Use
		for table := range in.RequestItems {
			out = append(out, on("BatchGetItem", aws.String(table)))
		}
		return out
	case *dynamodb.BatchWriteItemInput:
		var out []Use
		for table := range in.RequestItems {
			out = append(out, on("BatchWriteItem", aws.String(table)))
		}
		return out
	case *dynamodb.TransactGetItemsInput:
		var out []Use
		for _, item := range in.TransactItems {
			if item.Get != nil {
				out = append(out, on("GetItem", item.Get.TableName))
			}
		}
		return out
	case *dynamodb.TransactWriteItemsInput:
		var out []Use
		for _, item := range in.TransactItems {
			switch {
			case item.Put != nil:
				out = append(out, on("PutItem", item.Put.TableName))
			case item.Update != nil:
				out = append(out, on("UpdateItem", item.Update.TableName))
			case item.Delete != nil:
				out = append(out, on("DeleteItem", item.Delete.TableName))
			case item.ConditionCheck != nil:
				out = append(out, on("ConditionCheckItem", item.ConditionCheck.TableName))
			}
		}
		return out
	case *dynamodb.DescribeTableInput:
		return []Use{on("DescribeTable", in.TableName)}
	case *dynamodbstreams.DescribeStreamInput:
		return []Use{r.stream(fn, "DescribeStream", aws.ToString(in.StreamArn))}
	case *dynamodbstreams.GetShardIteratorInput:
		return []Use{r.stream(fn, "GetShardIterator", aws.ToString(in.StreamArn))}
	case *dynamodbstreams.GetRecordsInput:
		r.mu.Lock()
		table := r.iters[aws.ToString(in.ShardIterator)]
		r.mu.Unlock()
		return []Use{{Function: fn, Action: "dynamodb:GetRecords", Table: table, Stream: true}}
	case *dynamodbstreams.ListStreamsInput:
		return []Use{{Function: fn, Action: "dynamodb:ListStreams", Table: r.table(aws.ToString(in.TableName)), Stream: true}}
	case *lambda.InvokeInput:
		return []Use{{Function: fn, Action: "lambda:InvokeFunction", Target: aws.ToString(in.FunctionName)}}
	}
	// Any other call (ListTables, PartiQL, another service) is recorded
	// by its operation, so a comparison sees it is granted nothing.
	name := strings.TrimSuffix(reflect.TypeOf(params).Elem().Name(), "Input")
	pkg := reflect.TypeOf(params).Elem().PkgPath()
	return []Use{{Function: fn, Action: pkg[strings.LastIndex(pkg, "/")+1:] + ":" + name}}
}

func (r *Recorder) stream(fn, action, arn string) Use {
	return Use{Function: fn, Action: "dynamodb:" + action, Table: r.table(streamread.TableOf(arn)), Stream: true}
}

// DialHook passes dials through.
func (r *Recorder) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

// ProcessHook records a command made in a function's invocation.
func (r *Recorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.redis(ctx)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook records a pipeline made in a function's invocation.
func (r *Recorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.redis(ctx)
		return next(ctx, cmds)
	}
}

func (r *Recorder) redis(ctx context.Context) {
	if fn := app.FunctionOf(ctx); fn != "" {
		r.add(Use{Function: fn, Action: ActionRedis})
	}
}
