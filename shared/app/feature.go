package app

import (
	"context"
	"fmt"

	"github.com/aws/aws-lambda-go/events"

	"github.com/rallyhq/rally/shared/api"
	"github.com/rallyhq/rally/shared/obs"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/streams"
)

// Feature binds the routes and processors of one feature (those declared
// with its Name in shared/routes) to their handlers.
type Feature struct {
	Name routes.Feature
	Bind func(d *Deps) Handlers
}

// Handlers are bound endpoints, stream processors and queue consumers, by
// function name.
type Handlers struct {
	Endpoints  map[string]api.Endpoint
	Processors map[string]streams.BatchFunc
	Consumers  map[string]QueueHandler
}

// QueueHandler is the Lambda signature of a queue consumer.
type QueueHandler func(context.Context, events.SQSEvent) (events.SQSEventResponse, error)

// Bound is what a set of features serves over one Deps.
type Bound struct {
	deps     *Deps
	handlers Handlers
}

// Bind binds features over d. A function bound twice is an error: each
// function belongs to one feature.
func (d *Deps) Bind(features ...Feature) (*Bound, error) {
	b := &Bound{deps: d, handlers: Handlers{
		Endpoints: map[string]api.Endpoint{}, Processors: map[string]streams.BatchFunc{}, Consumers: map[string]QueueHandler{},
	}}
	for _, f := range features {
		h := f.Bind(d)
		for fn, e := range h.Endpoints {
			if _, dup := b.handlers.Endpoints[fn]; dup {
				return nil, fmt.Errorf("app: %s is bound twice (again by %s)", fn, f.Name)
			}
			b.handlers.Endpoints[fn] = e
		}
		for fn, p := range h.Processors {
			if _, dup := b.handlers.Processors[fn]; dup {
				return nil, fmt.Errorf("app: %s is bound twice (again by %s)", fn, f.Name)
			}
			b.handlers.Processors[fn] = p
		}
		for fn, c := range h.Consumers {
			if _, dup := b.handlers.Consumers[fn]; dup {
				return nil, fmt.Errorf("app: %s is bound twice (again by %s)", fn, f.Name)
			}
			b.handlers.Consumers[fn] = c
		}
	}
	return b, nil
}

// Serves reports whether a bound feature serves the function named fn.
func (b *Bound) Serves(fn string) bool {
	_, endpoint := b.handlers.Endpoints[fn]
	_, processor := b.handlers.Processors[fn]
	_, consumer := b.handlers.Consumers[fn]
	return endpoint || processor || consumer
}

type functionKey struct{}

// WithFunction marks ctx as an invocation of the declared function fn.
// Every handler Bound returns does so, so what a call costs can be told
// apart by function where many run in one process (the local stack).
func WithFunction(ctx context.Context, fn string) context.Context {
	return context.WithValue(ctx, functionKey{}, fn)
}

// FunctionOf names the declared function ctx is an invocation of, "" when
// it is none.
func FunctionOf(ctx context.Context) string {
	fn, _ := ctx.Value(functionKey{}).(string)
	return fn
}

// HTTP returns the Lambda handler of route r; ok is false when no bound
// feature serves it.
func (b *Bound) HTTP(r routes.Route) (h api.Handler, ok bool) {
	e, ok := b.handlers.Endpoints[r.Function]
	if !ok {
		return nil, false
	}
	allowed := b.deps.Config.ServiceRolesOf(r)
	serve := b.deps.gate(r, allowed, api.Serve(b.deps.Log, b.deps.Metrics, allowed, e))
	return func(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		ctx = WithFunction(ctx, r.Function)
		if ev.RequestContext.RequestID != "" {
			ctx = obs.WithRequestID(ctx, ev.RequestContext.RequestID)
		}
		return serve(ctx, ev)
	}, true
}

// Stream returns the Lambda handler of processor p; ok is false when no
// bound feature serves it.
func (b *Bound) Stream(p routes.Processor) (h streams.Handler, ok bool) {
	fn, ok := b.handlers.Processors[p.Function]
	if !ok {
		return nil, false
	}
	serve := streams.Serve(b.deps.Log, b.deps.Metrics, fn)
	return func(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		return serve(WithFunction(ctx, p.Function), ev)
	}, true
}

// Queue returns the Lambda handler of consumer c; ok is false when no
// bound feature serves it.
func (b *Bound) Queue(c routes.Consumer) (h QueueHandler, ok bool) {
	consume, ok := b.handlers.Consumers[c.Function]
	if !ok {
		return nil, false
	}
	return func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		return consume(WithFunction(ctx, c.Function), ev)
	}, true
}

// Queue binds f and returns the Lambda handler of consumer c, which f must
// serve: what a queue consumer's main starts.
func (d *Deps) Queue(f Feature, c routes.Consumer) QueueHandler {
	h, ok := mustBind(d, f, c.Feature, c.Function).Queue(c)
	if !ok {
		panic(fmt.Sprintf("app: feature %s binds no consumer %s", f.Name, c.Function))
	}
	return h
}

// HTTP binds f and returns the Lambda handler of route r, which f must
// serve: what a route function's main starts.
func (d *Deps) HTTP(f Feature, r routes.Route) api.Handler {
	h, ok := mustBind(d, f, r.Feature, r.Function).HTTP(r)
	if !ok {
		panic(fmt.Sprintf("app: feature %s binds no handler for %s", f.Name, r.Key()))
	}
	return h
}

// Stream binds f and returns the Lambda handler of processor p, which f
// must serve: what a processor function's main starts.
func (d *Deps) Stream(f Feature, p routes.Processor) streams.Handler {
	h, ok := mustBind(d, f, p.Feature, p.Function).Stream(p)
	if !ok {
		panic(fmt.Sprintf("app: feature %s binds no processor %s", f.Name, p.Function))
	}
	return h
}

func mustBind(d *Deps, f Feature, declared routes.Feature, function string) *Bound {
	if f.Name != declared {
		panic(fmt.Sprintf("app: %s belongs to feature %s, not %s", function, declared, f.Name))
	}
	b, err := d.Bind(f)
	if err != nil {
		panic(err.Error())
	}
	return b
}
