package cost_test

import (
	"math"
	"testing"

	"github.com/rallyhq/rally/infra/cost"
)

// near reports whether got is within a millionth (relative) of want.
func near(got, want float64) bool {
	if want == 0 {
		return math.Abs(got) < 1e-12
	}
	return math.Abs(got-want)/math.Abs(want) < 1e-6
}

// The oracles below were worked out by hand from the price table (and
// checked with a calculator), not with this package.
func TestPerMillionByService(t *testing.T) {
	p := cost.OnDemand
	cases := []struct {
		name string
		u    cost.Units
		want cost.Dollars
	}{{
		// 1e6 × ($0.20/1e6 + 0.010 s × 0.5 GB × $0.0000133334) = 0.20 + 0.066667
		name: "one 512 MB invocation billed 10 ms",
		u:    cost.Units{Lambda: []cost.Invocations{{MemoryMB: 512, Count: 1, BilledMillis: 10}}},
		want: cost.Dollars{Lambda: 0.266667},
	}, {
		// a processor's share: a quarter of a batch billed 48 ms at 1 GB:
		// 0.25 × $0.20 + 1e6 × 0.012 s × 1 GB × $0.0000133334 = 0.05 + 0.1600008
		name: "a quarter of a 1024 MB batch",
		u:    cost.Units{Lambda: []cost.Invocations{{MemoryMB: 1024, Count: 0.25, BilledMillis: 12}}},
		want: cost.Dollars{Lambda: 0.2100008},
	}, {
		name: "one HTTP API request",
		u:    cost.Units{APIRequests: 1},
		want: cost.Dollars{API: 1.00},
	}, {
		// 2 × $0.125 + 4 × $0.625
		name: "2 RRU and 4 WRU",
		u:    cost.Units{ReadUnits: 2, WriteUnits: 4},
		want: cost.Dollars{DynamoDB: 2.75},
	}, {
		// 3 × $0.0023
		name: "3 ECPU",
		u:    cost.Units{ECPU: 3},
		want: cost.Dollars{Redis: 0.0069},
	}, {
		// a 400-byte event, 500 a record: 200,000 B → 40 × 5 KiB = 204,800
		// B billed, 409.6 B an event. A million events:
		// ingestion 409.6e6 / 2^30 GB × $0.029 = 0.0110626
		// conversion + partitioning 400e6 / 2^30 GB × $0.038 = 0.0141561
		// objects 400e6 / 128 MiB = 2.98023 × ($0.005 + $0.005) / 1000 = 0.0000298
		// S3 a month 100e6 / 2^30 GB × $0.023 = 0.0021420
		name: "one 400-byte event stored in 100 bytes",
		u:    cost.Units{AnalyticsEvents: 1, EventBytes: 400, StoredBytes: 100},
		want: cost.Dollars{Analytics: 0.0273906},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := p.PerMillion(c.u)
			for _, f := range []struct {
				name      string
				got, want float64
			}{{"Lambda", got.Lambda, c.want.Lambda}, {"API", got.API, c.want.API}, {"DynamoDB", got.DynamoDB, c.want.DynamoDB}, {"Redis", got.Redis, c.want.Redis}, {"Analytics", got.Analytics, c.want.Analytics}} {
				if math.Abs(f.got-f.want) > 1e-6 {
					t.Errorf("%s: $%.7f per million, want $%.7f", f.name, f.got, f.want)
				}
			}
		})
	}
}

func TestFirehoseRoundsEachRecordUpTo5KB(t *testing.T) {
	p := cost.OnDemand
	for _, c := range []struct {
		bytes     float64
		perRecord int
		want      float64
	}{
		{1, 1, 5120},      // a 1-byte record is billed 5 KB
		{5120, 1, 5120},   // exactly 5 KB
		{5121, 1, 10240},  // a byte more: 10 KB
		{400, 500, 409.6}, // 200,000 B → 204,800 B over 500 events
		{1000, 512, 1000}, // 512,000 B = 100 × 5 KiB exactly
		{0, 500, 0},       // no event
	} {
		if got := p.BilledEventBytes(c.bytes, c.perRecord); !near(got, c.want) {
			t.Errorf("BilledEventBytes(%v, %d) = %v, want %v", c.bytes, c.perRecord, got, c.want)
		}
	}
}

func TestCacheStorageForAMonth(t *testing.T) {
	// 10M members × 200 B = 2e9 B = 1.862645 GB × 730 h × $0.084
	if got := cost.OnDemand.CacheMonth(10e6 * 200); math.Abs(got-114.2174) > 1e-3 {
		t.Errorf("CacheMonth = %v, want 114.2174", got)
	}
}

func TestSeedsPriceTheirMonths(t *testing.T) {
	rates := map[string]map[string]float64{}
	for _, s := range cost.Seeds() {
		rates[s.Name] = map[string]float64{}
		for _, l := range s.Loads {
			rates[s.Name][l.Route] += l.PerSecond
		}
	}
	for _, c := range []struct {
		seed, route string
		want        float64
	}{
		{"000 favorites", cost.Favorite, 10_000},        // 20% of 100k writes/s, half of them favorites
		{"000 favorites", cost.FavoriteStatus, 100_000}, // 20% of 1M reads/s, half status
		{"003 leaderboards", cost.SubmitScore, 2_000},   // 20% of 10k/s
		{"003 leaderboards", cost.Top10, 5787.037},      // 1e9 / 86,400 / 2
		{"004 streaks", cost.RecordActivity, 231.4815},  // 20e6 / 86,400
		{"002 likes", cost.LikeToggle, 200_000},         // 20% of 1M/s
	} {
		if got := rates[c.seed][c.route]; math.Abs(got-c.want) > 1e-3 {
			t.Errorf("%s: %s at %v a second, want %v", c.seed, c.route, got, c.want)
		}
	}

	// A seed of one route at 1 a second, one API request each: 2,628,000
	// requests a month, $2.628; its floor takes half the DynamoDB units.
	s := cost.Seed{Name: "test", Loads: []cost.Load{{"r", 1}}, Members: 1e6}
	units := map[string][2]cost.Units{"r": {{APIRequests: 1, WriteUnits: 2}, {APIRequests: 1, WriteUnits: 1}}}
	m, err := cost.OnDemand.Month(s, units, 200, 100)
	if err != nil {
		t.Fatal(err)
	}
	// API 2.628; DynamoDB 2 × 2,628,000 × $0.625/1e6 = 3.285; storage
	// 1e6 × 200 B / 2^30 × 730 × $0.084 = 11.42174.
	total := m.Total()
	if !near(total.API, 2.628) || !near(total.DynamoDB, 3.285) || math.Abs(total.Redis-11.42174) > 1e-4 {
		t.Errorf("month %+v, want API 2.628, DynamoDB 3.285, Redis 11.42174", total)
	}
	if floor := m.FloorTotal(); !near(floor.DynamoDB, 1.6425) || math.Abs(floor.Redis-5.71087) > 1e-4 {
		t.Errorf("floor %+v, want DynamoDB 1.6425, Redis 5.71087", floor)
	}
	if b := m.Biggest(2); len(b) != 2 || b[0].What != "Redis storage" || b[1].What != "DynamoDB of r" {
		t.Errorf("biggest %+v, want Redis storage then DynamoDB of r", b)
	}
	if _, err := cost.OnDemand.Month(s, nil, 0, 0); err == nil {
		t.Error("a seed's route without units priced")
	}
}
