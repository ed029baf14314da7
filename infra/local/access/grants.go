package access

import (
	"fmt"
	"slices"
	"sort"

	"github.com/rallyhq/rally/shared/routes"
)

// Class is how a function may touch a table.
type Class int

// Classes: a write grant includes reading.
const (
	None Class = iota
	Read
	Write
)

func (c Class) String() string {
	switch c {
	case Read:
		return "read"
	case Write:
		return "write"
	}
	return "none"
}

// classOf is the class of a table action, None for actions no table grant
// includes.
func classOf(action string) Class {
	switch {
	case slices.Contains(routes.TableReadActions, action):
		return Read
	case slices.Contains(routes.TableWriteActions, action):
		return Write
	}
	return None
}

// Grant is what one function's declarations (routes.Uses) grant it.
type Grant struct {
	Tables map[string]Class
	// Narrow are tables granted only some actions (routes.Grant), with
	// those actions (dynamodb:GetItem, …).
	Narrow  map[string][]string
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
			g = Grant{Tables: map[string]Class{}, Narrow: map[string][]string{}, Streams: map[string]bool{}}
		}
		for _, n := range u.Grants {
			for _, a := range n.Actions {
				g.Narrow[n.Table.Name] = append(g.Narrow[n.Table.Name], "dynamodb:"+a)
			}
		}
		for _, t := range u.Reads {
			g.Tables[t.Name] = max(g.Tables[t.Name], Read)
		}
		for _, t := range u.Writes {
			g.Tables[t.Name] = Write
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
		case g.Tables[u.Table] == None && len(g.Narrow[u.Table]) > 0:
			if !slices.Contains(g.Narrow[u.Table], u.Action) {
				why = fmt.Sprintf("it is granted only %v on %s", g.Narrow[u.Table], u.Table)
			}
		default:
			need := classOf(u.Action)
			switch have := g.Tables[u.Table]; {
			case need == None:
				why = "no table grant includes this action"
			case have < need:
				why = fmt.Sprintf("it is granted %s on %s, this needs %s", have, u.Table, need)
			}
		}
		if why != "" {
			out = append(out, u.String()+": "+why)
		}
	}
	return out
}

// Unused lists what the declarations grant each function in functions but
// its recorded uses never needed, one key each:
//
//	<function> uses <table>        granted the table, never touched it
//	<function> writes <table>      granted writing, only read it
//	<function> reads the <table> stream
//	<function> uses Redis
//	<function> invokes processors
func Unused(grants map[string]Grant, uses []Use, functions []string) []string {
	type seen struct {
		tables  map[string]Class
		streams map[string]bool
		redis   bool
		invokes bool
	}
	by := map[string]*seen{}
	for _, u := range uses {
		s := by[u.Function]
		if s == nil {
			s = &seen{tables: map[string]Class{}, streams: map[string]bool{}}
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
			s.tables[u.Table] = max(s.tables[u.Table], classOf(u.Action))
		}
	}
	var out []string
	for _, fn := range functions {
		g := grants[fn]
		s := by[fn]
		if s == nil {
			s = &seen{}
		}
		for _, table := range keys(g.Tables) {
			switch used := s.tables[table]; {
			case used == None:
				out = append(out, fn+" uses "+table)
			case g.Tables[table] == Write && used < Write:
				out = append(out, fn+" writes "+table)
			}
		}
		for _, table := range keys(g.Narrow) {
			if s.tables[table] == None {
				out = append(out, fn+" uses "+table)
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
