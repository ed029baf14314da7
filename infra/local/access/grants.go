package access

import (
	"fmt"
	"slices"
	"sort"

	"github.com/rallyhq/rally/shared/routes"
)

// Grant is what one function's declarations (routes.Uses) grant it.
type Grant struct {
	// Calls are the DynamoDB actions granted on each resource: a table's
	// declared name, or <table>/index/<name> (routes.Call.Resource).
	Calls   map[string]routes.Action
	Streams map[string]bool
	Redis   bool
	Invokes bool
}

// Grants merges the declarations of every route, processor and consumer
// by function: a function declared several times (a route offered to
// players and services, a processor per stream) is granted the union.
func Grants() map[string]Grant {
	out := map[string]Grant{}
	add := func(fn string, u routes.Uses) {
		g, ok := out[fn]
		if !ok {
			g = Grant{Calls: map[string]routes.Action{}, Streams: map[string]bool{}}
		}
		for _, c := range u.Calls {
			g.Calls[c.Resource()] |= c.Actions
		}
		for _, t := range u.Streams {
			g.Streams[t.Name] = true
		}
		g.Redis = g.Redis || u.Redis
		g.Invokes = g.Invokes || u.Invokes
		out[fn] = g
	}
	for _, r := range routes.All() {
		add(r.Function, r.Uses)
	}
	for _, p := range routes.Processors() {
		add(p.Function, p.Uses)
	}
	for _, c := range routes.Consumers() {
		add(c.Function, c.Uses)
	}
	return out
}

func isProcessor(fn string) bool {
	return slices.ContainsFunc(routes.Processors(), func(p routes.Processor) bool { return p.Function == fn })
}

// resource is what u's table action is on, as routes.Call.Resource names
// it.
func (u Use) resource() string {
	if u.Index == "" {
		return u.Table
	}
	return u.Table + "/index/" + u.Index
}

// Denied lists the uses the declarations do not grant, one line each: a
// call that would fail with AccessDeniedException in AWS.
func Denied(grants map[string]Grant, uses []Use) []string {
	var out []string
	for _, u := range uses {
		g, ok := grants[u.Function]
		var why string
		switch {
		case !ok:
			why = "no route, processor or consumer declares this function"
		case u.Action == ActionRedis:
			if !g.Redis {
				why = "its Uses do not say Redis (it would have no cache in AWS)"
			}
		case u.Action == "lambda:InvokeFunction":
			if !g.Invokes || !isProcessor(u.Target) {
				why = "it may invoke only the stream processors, with Uses.Invokes"
			}
		case u.Stream:
			if !g.Streams[u.Table] || !slices.Contains(routes.StreamReadActions, u.Action) {
				why = fmt.Sprintf("it is granted %v on the streams of %v", routes.StreamReadActions, keys(g.Streams))
			}
		case routes.ActionOf(u.Action) == 0:
			why = "no table grant includes this action"
		case g.Calls[u.resource()]&routes.ActionOf(u.Action) == 0:
			why = fmt.Sprintf("its Uses declare %s on %s", granted(g.Calls[u.resource()]), u.resource())
		}
		if why != "" {
			out = append(out, u.String()+": "+why)
		}
	}
	return out
}

func granted(a routes.Action) string {
	if a == 0 {
		return "nothing"
	}
	return "only " + a.String()
}

// Unused lists what the declarations grant each function in functions but
// its recorded uses never needed, one key each:
//
//	<function> <action> on <table>             e.g. list-favorites BatchGetItem on Games
//	<function> <action> on <table>/index/<name>
//	<function> reads the <table> stream
//	<function> uses Redis
//	<function> invokes processors
func Unused(grants map[string]Grant, uses []Use, functions []string) []string {
	type seen struct {
		calls   map[string]routes.Action
		streams map[string]bool
		redis   bool
		invokes bool
	}
	by := map[string]*seen{}
	for _, u := range uses {
		s := by[u.Function]
		if s == nil {
			s = &seen{calls: map[string]routes.Action{}, streams: map[string]bool{}}
			by[u.Function] = s
		}
		switch {
		case u.Action == ActionRedis:
			s.redis = true
		case u.Action == "lambda:InvokeFunction":
			s.invokes = true
		case u.Stream:
			s.streams[u.Table] = true
		default:
			s.calls[u.resource()] |= routes.ActionOf(u.Action)
		}
	}
	var out []string
	for _, fn := range functions {
		g := grants[fn]
		s := by[fn]
		if s == nil {
			s = &seen{}
		}
		for _, res := range keys(g.Calls) {
			for _, iam := range (g.Calls[res] &^ s.calls[res]).IAM() {
				out = append(out, fn+" "+routes.ActionOf(iam).String()+" on "+res)
			}
		}
		for _, table := range keys(g.Streams) {
			if !s.streams[table] {
				out = append(out, fn+" reads the "+table+" stream")
			}
		}
		if g.Redis && !s.redis {
			out = append(out, fn+" uses Redis")
		}
		if g.Invokes && !s.invokes {
			out = append(out, fn+" invokes processors")
		}
	}
	return out
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
