package retention_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rallyhq/rally/shared/analytics"
	"github.com/rallyhq/rally/shared/cachegen"
	"github.com/rallyhq/rally/shared/deadletters"
	"github.com/rallyhq/rally/shared/exports"
	freshmirror "github.com/rallyhq/rally/shared/freshness/mirror"
	"github.com/rallyhq/rally/shared/jobs"
	"github.com/rallyhq/rally/shared/leaderboards"
	lbdynamo "github.com/rallyhq/rally/shared/leaderboards/dynamo"
	"github.com/rallyhq/rally/shared/reactions"
	"github.com/rallyhq/rally/shared/retention"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
	"github.com/rallyhq/rally/shared/streaks"
	stdynamo "github.com/rallyhq/rally/shared/streaks/dynamo"
)

// Every table has at least one declared family, and every DynamoDB family
// names a declared table: a table added without its families fails here.
func TestEveryTableHasFamiliesAndEveryFamilyATable(t *testing.T) {
	declared := map[string]int{}
	for _, f := range retention.Families() {
		switch f.Store {
		case retention.DynamoDB:
			if _, ok := schema.ByName(f.Table); !ok {
				t.Errorf("%q is in table %q, which schema does not declare", f.Name, f.Table)
			}
			declared[f.Table]++
		case retention.Redis:
			if f.Table != "" {
				t.Errorf("Redis family %q names table %q", f.Name, f.Table)
			}
		default:
			t.Errorf("%q is in store %q", f.Name, f.Store)
		}
	}
	for _, tb := range schema.Tables() {
		if declared[tb.Name] == 0 {
			t.Errorf("table %s has no declared family: say how long its items live and what removes them", tb.Name)
		}
	}
}

// Each declaration says everything the README and the tour read: a sort
// pattern exactly where the table has a sort key, a TTL only where the
// table expires items, what a TTL counts from, a lifetime in words where
// nothing expires the items, and no two families with the same keys.
func TestEveryFamilyIsDeclaredWhole(t *testing.T) {
	seen := map[string]string{}
	for _, f := range retention.Families() {
		if f.Name == "" || f.Key == "" {
			t.Errorf("a family without a name or a key: %+v", f)
		}
		if f.TTL > 0 && f.From == "" {
			t.Errorf("%q expires but does not say from when", f.Name)
		}
		if f.TTL == 0 && (f.Lifetime == "" || f.From != "") {
			t.Errorf("%q has no TTL: it needs a lifetime in words and no From", f.Name)
		}
		if f.Dated && f.TTL == 0 {
			t.Errorf("%q is dated but has no TTL", f.Name)
		}
		if f.TTL > 0 && f.Lifetime != "" {
			t.Errorf("%q has a TTL and a lifetime in words: the README shows the TTL", f.Name)
		}
		if f.Linger > 0 && (f.TTL > 0 || !strings.Contains(f.Lifetime, retention.Duration(f.Linger))) {
			t.Errorf("%q lingers %s: it needs no TTL and a lifetime that says so", f.Name, retention.Duration(f.Linger))
		}
		if f.TTL > 0 && !f.Bounded {
			t.Errorf("%q expires, yet is declared unbounded", f.Name)
		}
		if f.Store == retention.DynamoDB {
			tb, _ := schema.ByName(f.Table)
			if (tb.SortKey != nil) != (f.Sort != "") {
				t.Errorf("%q: table %s has a sort key: %v, the family a sort pattern: %q", f.Name, tb.Name, tb.SortKey != nil, f.Sort)
			}
			if f.TTL > 0 && tb.TTLAttribute == "" {
				t.Errorf("%q expires, but table %s has no TTL attribute", f.Name, tb.Name)
			}
		} else if f.Sort != "" || f.Where != nil {
			t.Errorf("Redis family %q has a sort pattern or a condition", f.Name)
		}
		id := fmt.Sprintf("%s %s %q %q %v", f.Store, f.Table, f.Key, f.Sort, f.Where)
		if other, dup := seen[id]; dup {
			t.Errorf("%q and %q are declared with the same keys", f.Name, other)
		}
		seen[id] = f.Name
	}
}

// family finds a declared family by store and name.
func family(t *testing.T, store retention.Store, name string) retention.Family {
	t.Helper()
	for _, f := range retention.Families() {
		if f.Store == store && f.Name == name {
			return f
		}
	}
	t.Fatalf("no %s family %q", store, name)
	return retention.Family{}
}

// Where a feature exports how long it keeps something, the declaration
// says the same.
func TestDeclaredTTLsAreTheFeaturesOwn(t *testing.T) {
	for name, want := range map[string]time.Duration{
		"score submission":                leaderboards.EventRetention,
		"points event":                    stdynamo.EventRetention,
		"daily points total":              stdynamo.DayRetention,
		"activity Idempotency-Key record": stdynamo.KeyRetention,
		"analytics shipped marker":        analytics.MarkerRetention,
		"parked batch":                    deadletters.Retention,
		"parked batch's records":          deadletters.Retention,
		"parked batch's user index":       deadletters.Retention,
		"finished job":                    jobs.Retention,
		"data export":                     exports.Retention,
	} {
		if got := family(t, retention.DynamoDB, name).TTL; got != want {
			t.Errorf("%q is declared to expire after %s; its feature keeps it %s", name, got, want)
		}
	}
}

// Keys built the way the features build them belong to exactly the family
// that declares them; keys no feature writes belong to none.
func TestKeysBelongToTheirFamily(t *testing.T) {
	at := time.Date(2026, 11, 22, 10, 30, 0, 0, time.UTC)
	type item struct {
		table string
		attrs map[string]string
		want  string // "" for no family
	}
	pk := func(table, p, s string) map[string]string {
		tb, _ := schema.ByName(table)
		attrs := map[string]string{tb.PartitionKey.Name: p}
		if tb.SortKey != nil {
			attrs[tb.SortKey.Name] = s
		}
		return attrs
	}
	with := func(attrs map[string]string, k, v string) map[string]string { attrs[k] = v; return attrs }
	var items []item
	add := func(table, p, s, want string) { items = append(items, item{table, pk(table, p, s), want}) }

	for _, k := range reactions.Kinds() {
		target := string(k) + "#g-1"
		add(schema.Reactions.Name, "u-1", target, "reaction edge")
		add(schema.Counters.Name, target, schema.CountersTotalSK, "reaction count")
		hour, day := reactions.BucketOf(reactions.Hourly, at), reactions.BucketOf(reactions.Daily, at)
		add(schema.Counters.Name, target, string(hour.Span)+"#"+hour.Name(), "hourly trending bucket")
		add(schema.Counters.Name, target, string(day.Span)+"#"+day.Name(), "daily trending bucket")
		items = append(items,
			item{schema.Counters.Name, with(pk(schema.Counters.Name, schema.CountersAppliedPrefix+"u-1", target), schema.AttrState, string(reactions.Active)), "counter marker of an edge counted active"},
			item{schema.Counters.Name, with(pk(schema.Counters.Name, schema.CountersAppliedPrefix+"u-1", target), schema.AttrState, string(reactions.Removed)), "counter marker of an edge counted inactive"})
		add(schema.Counters.Name, schema.CountersErasurePrefix+"h4sh", target, "counter version an erasure awaits")
		for _, w := range reactions.Windows() {
			add(schema.Counters.Name, schema.CountersSnapshotPrefix+string(k), string(w), "trending snapshot")
		}
		if named(retention.KeyFamilies("rally:count:"+string(k)+":g-1")) != "cached reaction count" {
			t.Errorf("the cached count of a %s is not a cached reaction count", k)
		}
	}
	for _, scope := range cachegen.Scopes() {
		add(schema.Counters.Name, schema.CountersCachePrefix+scope, schema.CountersGenSK, "cache generation")
		add(schema.Counters.Name, schema.CountersCachePrefix+scope+schema.CountersDirtySuffix, "rally:count:favorite:g-1", "dirty cache key")
		if got := named(retention.KeyFamilies((&cachegen.Tracker{Scope: scope}).RedisKey())); got != "cache generation" {
			t.Errorf("Redis's generation of %s is in %q", scope, got)
		}
	}
	for _, p := range routes.Processors() {
		add(schema.Counters.Name, schema.CountersWatermarkPrefix+p.Function, schema.CountersWatermarkSK, "processor watermark")
		if got := named(retention.KeyFamilies(freshmirror.Key(p.Function))); got != "processor watermark" {
			t.Errorf("the Redis watermark of %s is in %q", p.Function, got)
		}
	}
	for _, b := range routes.AllBudgets() {
		if got := named(retention.KeyFamilies("rate:rally:" + b.Name + ":u-1")); got != "rate-limit budget" {
			t.Errorf("budget %s is in %q", b.Name, got)
		}
	}
	add(schema.Counters.Name, schema.CountersIntentPrefix+"abc", schema.CountersIntentSK, "counter intent")
	add(schema.Counters.Name, schema.CountersShipPrefix+"Reactions#1234", schema.CountersShipSK, "analytics shipped marker")

	for _, reset := range []leaderboards.Reset{leaderboards.Never, leaderboards.Daily, leaderboards.Weekly, leaderboards.Monthly} {
		d := leaderboards.Definition{ID: "cup", Reset: reset, Timezone: "UTC"}
		period := d.PeriodAt(at)
		for _, board := range []string{"cup", leaderboards.ViewID("cup", "eu")} {
			add(schema.Scores.Name, lbdynamo.PeriodKey(board, period), "p-1", "score")
			add(schema.Scores.Name, lbdynamo.PeriodKey(board, period), lbdynamo.MetaID, "period member count")
			add(schema.Counters.Name, schema.CountersHistogramPrefix+lbdynamo.PeriodKey(board, period), "007", "score histogram slice")
			add(schema.Counters.Name, schema.CountersHistogramMarkPrefix+"p-1", lbdynamo.PeriodKey(board, period), "score histogram marker")
		}
	}
	add(schema.Scores.Name, lbdynamo.BanPrefix+"p-1", "p-1", "ban")
	add(schema.ScoreEvents.Name, lbdynamo.EventKey("cup", "p-1"), "m-1", "score submission")

	ev := streaks.Event{ID: "e-1", OccurredAt: at}
	add(schema.Activity.Name, "u-1", stdynamo.EventSK(ev), "points event")
	add(schema.Activity.Name, "u-1", stdynamo.DaySK("2026-11-22"), "daily points total")
	add(schema.Activity.Name, "u-1", stdynamo.KeySK("open-1"), "activity Idempotency-Key record")

	batch := deadletters.BatchID(routes.CounterProcessor.Function, "shard-1", "100", "200")
	add(schema.DeadLetters.Name, "dlq#"+routes.CounterProcessor.Function, "2026-11-22T10:30:00.000Z#"+batch, "parked batch")
	add(schema.DeadLetters.Name, "batch#"+batch, "000000", "parked batch's records")
	add(schema.DeadLetters.Name, "user#h4sh", routes.CounterProcessor.Function+"#"+batch, "parked batch's user index")
	items = append(items,
		item{schema.Jobs.Name, with(pk(schema.Jobs.Name, "job-1", ""), schema.AttrRunning, "1"), "running job"},
		item{schema.Jobs.Name, pk(schema.Jobs.Name, "job-1", ""), "finished job"})
	add(schema.Idempotency.Name, routes.FavoriteGame.Function+"#u-1#key with # in it", "", "Idempotency-Key record")

	// Keys no feature writes.
	add(schema.Counters.Name, "poll#favorite", schema.CountersTotalSK, "")
	add(schema.Counters.Name, "favorite#g-1", "w#2026", "")
	add(schema.Scores.Name, "#ban#p-1#x", "p-1", "")
	add(schema.Activity.Name, "u-1", "evt#1234#e-1", "")

	for _, it := range items {
		if got := named(retention.ItemFamilies(it.table, it.attrs)); got != it.want {
			t.Errorf("%s item %v: in %q, want %q", it.table, it.attrs, got, it.want)
		}
	}
	for key, want := range map[string]string{
		"rally:rx:u-1":                         "cached edge states",
		"rally:flips:u-1":                      "reaction flips this hour",
		"rally:streak:u-1":                     "cached streak",
		"rally:streaks:deadlines":              "streak deadlines",
		"rally:streaks:regions":                "streak board regions",
		"rally:seen:u-1":                       "cached first seen",
		"rally:rebuild:streaks":                "rebuild position",
		"rally:rebuild:nothing":                "",
		"rally:unknown":                        "",
		"rank:{trend:favorite}:all|z":          "all-time trending board",
		"rank:{trend:like}:h:2026112210|a0:0":  "hourly trending board",
		"rank:{trend:like}:d:20261122|m":       "daily trending board",
		"rank:{trend:like}:w24h:2026112210|z":  "summed trending window",
		"rank:{lb:cup#2026-W47}:scores|z":      "leaderboard period board",
		"rank:{lb:cup@eu#all}:scores|m":        "leaderboard period board",
		"rank:{lb:cup#2026-11~l3}:scores|l0:0": "leaderboard period board partition",
		"rank:{streaks:global}:live|z":         "global live-streak board",
		"rank:{streaks:r:eu}:live|b1:3":        "regional live-streak board",
		"rank:{lb:cup#yesterday}:scores|z":     "",
	} {
		if got := named(retention.KeyFamilies(key)); got != want {
			t.Errorf("Redis key %s: in %q, want %q", key, got, want)
		}
	}
}

// named names the one family of fs, "" for none, and all of
// them when there are several.
func named(fs []retention.Family) string {
	names := make([]string, len(fs))
	for i, f := range fs {
		names[i] = f.Name
	}
	return strings.Join(names, " and ")
}
