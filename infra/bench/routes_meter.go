package main

import (
	"context"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/rallyhq/rally/shared/app"
)

// routesMeter asks DynamoDB for the capacity every call of the handlers
// and processors consumes (ReturnConsumedCapacity=TOTAL on every input
// that has it) and sums what the outputs report, per function: an
// aws-sdk-go-v2 middleware added to the stack's clients.
type routesMeter struct {
	mu sync.Mutex
	by map[string]routesUsage
}

// routesUsage is what one function consumed: capacity units read and
// written, and its calls by operation. Failed calls (a condition that did
// not hold) report no capacity: they are counted apart.
type routesUsage struct {
	RCU, WCU float64
	Calls    map[string]int
	Failed   int
}

func newRoutesMeter() *routesMeter { return &routesMeter{by: map[string]routesUsage{}} }

// APIOption adds the meter to an AWS client's middleware stack.
func (m *routesMeter) APIOption(s *middleware.Stack) error {
	return s.Initialize.Add(middleware.InitializeMiddlewareFunc("RallyBenchCapacity", m.handle), middleware.After)
}

func (m *routesMeter) handle(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (
	middleware.InitializeOutput, middleware.Metadata, error,
) {
	fn := app.FunctionOf(ctx)
	if fn == "" {
		return next.HandleInitialize(ctx, in)
	}
	routesAskCapacity(in.Parameters)
	out, md, err := next.HandleInitialize(ctx, in)
	op := middleware.GetOperationName(ctx)
	m.mu.Lock()
	defer m.mu.Unlock()
	u := m.by[fn]
	if u.Calls == nil {
		u.Calls = map[string]int{}
	}
	u.Calls[op]++
	if err != nil {
		u.Failed++
	} else {
		r, w := routesCapacityOf(op, out.Result)
		u.RCU += r
		u.WCU += w
	}
	m.by[fn] = u
	return out, md, err
}

// Of is what function fn consumed so far (a copy).
func (m *routesMeter) Of(fn string) routesUsage {
	m.mu.Lock()
	defer m.mu.Unlock()
	u := m.by[fn]
	calls := map[string]int{}
	for k, v := range u.Calls {
		calls[k] = v
	}
	u.Calls = calls
	return u
}

// Minus is what u consumed since before.
func (u routesUsage) Minus(before routesUsage) routesUsage {
	d := routesUsage{RCU: u.RCU - before.RCU, WCU: u.WCU - before.WCU, Failed: u.Failed - before.Failed, Calls: map[string]int{}}
	for k, v := range u.Calls {
		if n := v - before.Calls[k]; n > 0 {
			d.Calls[k] = n
		}
	}
	return d
}

// String lists the calls: "GetItem×1, TransactWriteItems×1".
func (u routesUsage) String() string {
	var parts []string
	for op, n := range u.Calls {
		parts = append(parts, op+"×"+strconv.Itoa(n))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

var routesTotal = reflect.ValueOf(types.ReturnConsumedCapacityTotal)

// routesAskCapacity sets ReturnConsumedCapacity=TOTAL on a DynamoDB input
// that has the field and leaves it alone otherwise.
func routesAskCapacity(params any) {
	v := reflect.ValueOf(params)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return
	}
	f := v.Elem().FieldByName("ReturnConsumedCapacity")
	if f.IsValid() && f.CanSet() && f.Type() == routesTotal.Type() {
		f.Set(routesTotal)
	}
}

// routesReadOps are the operations whose capacity is read capacity.
var routesReadOps = map[string]bool{"GetItem": true, "BatchGetItem": true, "Query": true, "Scan": true, "TransactGetItems": true}

// routesCapacityOf is the read and write capacity a DynamoDB output
// reports (ConsumedCapacity, one or a list): its read and write units when
// given, else its total, counted as read or write by the operation.
func routesCapacityOf(op string, result any) (rcu, wcu float64) {
	v := reflect.ValueOf(result)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return 0, 0
	}
	f := v.Elem().FieldByName("ConsumedCapacity")
	if !f.IsValid() {
		return 0, 0
	}
	var all []types.ConsumedCapacity
	switch c := f.Interface().(type) {
	case *types.ConsumedCapacity:
		if c != nil {
			all = append(all, *c)
		}
	case []types.ConsumedCapacity:
		all = c
	}
	for _, c := range all {
		switch {
		case c.ReadCapacityUnits != nil || c.WriteCapacityUnits != nil:
			rcu += routesDeref(c.ReadCapacityUnits)
			wcu += routesDeref(c.WriteCapacityUnits)
		case routesReadOps[op]:
			rcu += routesDeref(c.CapacityUnits)
		default:
			wcu += routesDeref(c.CapacityUnits)
		}
	}
	return rcu, wcu
}

func routesDeref(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}
