package retention

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/rallyhq/rally/shared/schema"
)

// placeholders says what each <placeholder> of a key pattern may hold, as
// a regular expression. Ids (API ids, hashes, function names) hold no '#',
// the separator of DynamoDB keys; a leaderboard's <board> may be a
// regional view, "<board>@<region>". The kinds, scopes, budgets and
// windows are the features' own lists: TestKeysBelongToTheirFamily fails
// when one of them grows.
var placeholders = map[string]string{
	"user": id, "player": id, "target": id, "game": id, "board": id, "region": id, "match": id,
	"id": id, "hash": id, "job": id, "export": id, "function": id, "processor": id, "caller": id,
	"kind":      `favorite|like`,
	"scope":     `reactions|leaderboards|streaks`,
	"budget":    `favorite|like|activity|erasure|export|read|ip|service`,
	"window":    `24h|7d|all`,
	"hour":      `\d{10}`,            // a trending bucket's hour, 2026112210
	"day":       `\d{8}`,             // a trending bucket's day, 20261122
	"bucket":    `\d{8}|\d{10}`,      // either
	"date":      `\d{4}-\d{2}-\d{2}`, // a local date
	"period":    `all|\d{4}-(\d{2}-\d{2}|W\d{2}|\d{2})`,
	"millis":    `\d{13}`,                  // Unix milliseconds
	"time":      `\d{4}-\d{2}-\d{2}T[^#]+`, // a time as ddb.FormatTime writes it
	"group":     `\d{3}`,                   // a histogram slice
	"chunk":     `\d{6}`,                   // a parked batch's chunk of records
	"page":      `\d{9}`,                   // an archive page's number
	"rank key":  `\d{17}#\d{15}#[^#]+`,     // a by_score rank key (score, time, player)
	"batch":     `[0-9a-f]+`,               // a parked batch's id
	"event":     `.+`,                      // an event id
	"key":       `.+`,                      // a client's Idempotency-Key
	"subject":   `.+`,                      // a player, a calling role or a source IP
	"redis key": `.+`,
	// The ranking engine's keys of one board (shared/ranking's key
	// layout): its sorted sets, meta hash and lookup buckets.
	"board key": `.+`,
	"partition": `[^}]+`,
}

const id = `[^#]+`

// matcher is a family's patterns, compiled.
type matcher struct {
	key, sort *regexp.Regexp
}

// matchers are every family's, in the order of Families. A pattern naming
// an unknown placeholder panics, as regexp.MustCompile does: the
// declaration is wrong, and every test says so.
var matchers = func() []matcher {
	fs := Families()
	out := make([]matcher, len(fs))
	for i, f := range fs {
		var err error
		if out[i].key, err = compile(f.Key); err == nil && f.Sort != "" {
			out[i].sort, err = compile(f.Sort)
		}
		if err != nil {
			panic(fmt.Sprintf("retention: family %q: %v", f.Name, err))
		}
	}
	return out
}()

// compile turns a pattern into an anchored regular expression.
func compile(pattern string) (*regexp.Regexp, error) {
	var b strings.Builder
	b.WriteString("^")
	for rest := pattern; rest != ""; {
		open := strings.IndexByte(rest, '<')
		if open < 0 {
			b.WriteString(regexp.QuoteMeta(rest))
			break
		}
		closing := strings.IndexByte(rest[open:], '>')
		if closing < 0 {
			return nil, fmt.Errorf("pattern %q: a '<' is never closed", pattern)
		}
		name := rest[open+1 : open+closing]
		re, ok := placeholders[name]
		if !ok {
			return nil, fmt.Errorf("pattern %q: no placeholder <%s>", pattern, name)
		}
		b.WriteString(regexp.QuoteMeta(rest[:open]) + "(?:" + re + ")")
		rest = rest[open+closing+1:]
	}
	b.WriteString("$")
	return regexp.Compile(b.String())
}

// ItemFamilies returns the families an item of a table (by logical name)
// belongs to, given its string and number attributes as strings: its key
// attributes, and those a family's Where names. An item Rally wrote
// belongs to exactly one.
func ItemFamilies(table string, attrs map[string]string) []Family {
	t, ok := schema.ByName(table)
	if !ok {
		return nil
	}
	var out []Family
	for i, f := range Families() {
		if f.Store != DynamoDB || f.Table != table {
			continue
		}
		m := matchers[i]
		if !m.key.MatchString(attrs[t.PartitionKey.Name]) {
			continue
		}
		if t.SortKey != nil && (m.sort == nil || !m.sort.MatchString(attrs[t.SortKey.Name])) {
			continue
		}
		if w := f.Where; w != nil {
			v, has := attrs[w.Attr]
			if (w.Value == "" && has) || (w.Value != "" && v != w.Value) {
				continue
			}
		}
		out = append(out, f)
	}
	return out
}

// KeyFamilies returns the families a Redis key belongs to. A key Rally
// wrote belongs to exactly one.
func KeyFamilies(key string) []Family {
	var out []Family
	for i, f := range Families() {
		if f.Store == Redis && matchers[i].key.MatchString(key) {
			out = append(out, f)
		}
	}
	return out
}
