package main

import (
	"context"
	"maps"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/rallyhq/rally/infra/local/stack"
	"github.com/rallyhq/rally/shared/app"
)

// routesMeter asks DynamoDB for the capacity every call of the handlers
// and processors consumes (ReturnConsumedCapacity=TOTAL on every input
// that has it) and sums what the outputs report, per function: an
// aws-sdk-go-v2 middleware added to the stack's clients.
type routesMeter struct {
	mu sync.Mutex
	by map[string]routesUsage
	// tx, when set, prices transactions by DynamoDB's rules rather than
	// as DynamoDB Local reports them (see txPricer).
	tx *txPricer
	// pricing is the time tx's reads took in each function since it was
	// last taken: not the function's own time.
	pricing map[string]time.Duration
}

// routesUsage is what one function consumed: capacity units read and
// written, and its calls by operation. Failed calls (a condition that did
// not hold) report no capacity: they are counted apart.
type routesUsage struct {
	// IndexRCU and IndexWCU are the part of RCU and WCU the tables'
	// secondary indexes took.
	RCU, WCU, IndexRCU, IndexWCU float64
	Calls                        map[string]int
	Failed                       int
	// Tables is the capacity by table (its physical name), as the
	// outputs name them.
	Tables map[string]routesCapacity
}

func newRoutesMeter() *routesMeter {
	return &routesMeter{by: map[string]routesUsage{}, pricing: map[string]time.Duration{}}
}

// APIOption adds the meter to an AWS client's middleware stack.
func (m *routesMeter) APIOption(s *middleware.Stack) error {
	return s.Initialize.Add(middleware.InitializeMiddlewareFunc("RallyBenchCapacity", m.handle), middleware.After)
}

func (m *routesMeter) handle(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (
	middleware.InitializeOutput, middleware.Metadata, error,
) {
	fn := app.FunctionOf(ctx)
	if fn == "" || stack.IsTick(ctx) {
		// Periodic work (a processor's tick) is no request's.
		return next.HandleInitialize(ctx, in)
	}
	routesAskCapacity(in.Parameters)
	op := middleware.GetOperationName(ctx)
	var items []txItem
	tx, priced := in.Parameters.(*dynamodb.TransactWriteItemsInput)
	if priced = priced && m.tx != nil; priced {
		start := time.Now()
		var err error
		items, err = m.tx.Before(context.WithoutCancel(unmetered(ctx)), tx)
		m.addPricing(fn, time.Since(start))
		if err != nil {
			return middleware.InitializeOutput{}, middleware.Metadata{}, err
		}
	}
	out, md, err := next.HandleInitialize(ctx, in)
	if priced && err == nil {
		start := time.Now()
		perr := m.tx.After(context.WithoutCancel(unmetered(ctx)), items)
		m.addPricing(fn, time.Since(start))
		if perr != nil {
			return out, md, perr
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	u := m.by[fn]
	if u.Calls == nil {
		u.Calls, u.Tables = map[string]int{}, map[string]routesCapacity{}
	}
	u.Calls[op]++
	if err != nil {
		u.Failed++
	} else {
		byTable := routesCapacityByTable(op, out.Result)
		if priced {
			byTable = txPrice(items)
		}
		for table, c := range byTable {
			u.RCU += c.RCU
			u.WCU += c.WCU
			u.IndexRCU += c.IndexRCU
			u.IndexWCU += c.IndexWCU
			u.Tables[table] = u.Tables[table].plus(c)
		}
	}
	m.by[fn] = u
	return out, md, err
}

// addPricing counts d as time fn spent pricing a transaction.
func (m *routesMeter) addPricing(fn string, d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pricing[fn] += d
}

// TakePricing is the time pricing transactions took in fn since the last
// call: what the cost section takes off fn's invocations.
func (m *routesMeter) TakePricing(fn string) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	d := m.pricing[fn]
	delete(m.pricing, fn)
	return d
}

// unmetered is ctx without the function it runs for: the meter lets
// calls made with it through uncounted.
func unmetered(ctx context.Context) context.Context { return app.WithFunction(ctx, "") }

// Of is what function fn consumed so far (a copy).
func (m *routesMeter) Of(fn string) routesUsage {
	m.mu.Lock()
	defer m.mu.Unlock()
	u := m.by[fn]
	u.Calls, u.Tables = maps.Clone(u.Calls), maps.Clone(u.Tables)
	if u.Calls == nil {
		u.Calls, u.Tables = map[string]int{}, map[string]routesCapacity{}
	}
	return u
}

// Minus is what u consumed since before.
func (u routesUsage) Minus(before routesUsage) routesUsage {
	d := routesUsage{RCU: u.RCU - before.RCU, WCU: u.WCU - before.WCU, IndexRCU: u.IndexRCU - before.IndexRCU, IndexWCU: u.IndexWCU - before.IndexWCU, Failed: u.Failed - before.Failed,
		Calls: map[string]int{}, Tables: map[string]routesCapacity{}}
	for k, v := range u.Calls {
		if n := v - before.Calls[k]; n > 0 {
			d.Calls[k] = n
		}
	}
	for t, c := range u.Tables {
		if c = c.minus(before.Tables[t]); c != (routesCapacity{}) {
			d.Tables[t] = c
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

var routesIndexes = reflect.ValueOf(types.ReturnConsumedCapacityIndexes)

// routesAskCapacity sets ReturnConsumedCapacity=INDEXES (the total, and
// what the table and each index took of it) on a DynamoDB input that has
// the field and leaves it alone otherwise.
func routesAskCapacity(params any) {
	v := reflect.ValueOf(params)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return
	}
	f := v.Elem().FieldByName("ReturnConsumedCapacity")
	if f.IsValid() && f.CanSet() && f.Type() == routesIndexes.Type() {
		f.Set(routesIndexes)
	}
}

// routesReadOps are the operations whose capacity is read capacity.
var routesReadOps = map[string]bool{"GetItem": true, "BatchGetItem": true, "Query": true, "Scan": true, "TransactGetItems": true}

// routesCapacity is what one call consumed: read and write units, and
// the part of them its secondary indexes took.
type routesCapacity struct{ RCU, WCU, IndexRCU, IndexWCU float64 }

func (c routesCapacity) plus(o routesCapacity) routesCapacity {
	return routesCapacity{c.RCU + o.RCU, c.WCU + o.WCU, c.IndexRCU + o.IndexRCU, c.IndexWCU + o.IndexWCU}
}

func (c routesCapacity) minus(o routesCapacity) routesCapacity {
	return routesCapacity{c.RCU - o.RCU, c.WCU - o.WCU, c.IndexRCU - o.IndexRCU, c.IndexWCU - o.IndexWCU}
}

// routesCapacityOf is the capacity a DynamoDB output reports
// (ConsumedCapacity, one or a list): its read and write units when given,
// else its total, counted as read or write by the operation. A
// transaction's figure is taken as reported; the capacity sections price
// transactions by DynamoDB's rules instead (txPricer), as DynamoDB Local
// reports one item per table.
func routesCapacityOf(op string, result any) (c routesCapacity) {
	for _, tc := range routesCapacityByTable(op, result) {
		c = c.plus(tc)
	}
	return c
}

// routesCapacityByTable is routesCapacityOf by table, as each
// ConsumedCapacity names it ("" when it names none).
func routesCapacityByTable(op string, result any) map[string]routesCapacity {
	by := map[string]routesCapacity{}
	v := reflect.ValueOf(result)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return by
	}
	f := v.Elem().FieldByName("ConsumedCapacity")
	if !f.IsValid() {
		return by
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
	for _, cc := range all {
		var c routesCapacity
		switch {
		case cc.ReadCapacityUnits != nil || cc.WriteCapacityUnits != nil:
			c.RCU += routesDeref(cc.ReadCapacityUnits)
			c.WCU += routesDeref(cc.WriteCapacityUnits)
		case routesReadOps[op]:
			c.RCU += routesDeref(cc.CapacityUnits)
		default:
			c.WCU += routesDeref(cc.CapacityUnits)
		}
		var index float64
		for _, ic := range cc.GlobalSecondaryIndexes {
			index += routesDeref(ic.CapacityUnits)
		}
		for _, ic := range cc.LocalSecondaryIndexes {
			index += routesDeref(ic.CapacityUnits)
		}
		if routesReadOps[op] {
			c.IndexRCU += index
		} else {
			c.IndexWCU += index
		}
		table := aws.ToString(cc.TableName)
		by[table] = by[table].plus(c)
	}
	return by
}

func routesDeref(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}
