package ranking

import (
	"cmp"
	"testing"
	"time"
)

// Members must sort in Redis (byte order) exactly as (ReachedAt, ID) do.
func FuzzMemberOrder(f *testing.F) {
	f.Add(uint64(0), "a", uint64(0), "ab")
	f.Add(uint64(1), "b", uint64(256), "a")
	f.Add(uint64(255), "z", uint64(256), "a")
	f.Add(uint64(maxReachedMillis), "\xff", uint64(1), "\x00")
	f.Fuzz(func(t *testing.T, ms1 uint64, id1 string, ms2 uint64, id2 string) {
		ms1 &= maxReachedMillis
		ms2 &= maxReachedMillis
		if id1 == "" || id2 == "" {
			return
		}
		m1, m2 := prefix(ms1)+id1, prefix(ms2)+id2
		want := cmp.Or(cmp.Compare(ms1, ms2), cmp.Compare(id1, id2))
		if got := cmp.Compare(m1, m2); got != want {
			t.Fatalf("members of (%d,%q) and (%d,%q) compare %d, want %d", ms1, id1, ms2, id2, got, want)
		}
		gotMs, gotID, err := splitMember(m1)
		if err != nil || gotMs != ms1 || gotID != id1 {
			t.Fatalf("splitMember = %d, %q, %v", gotMs, gotID, err)
		}
		if m1[0] != 0 {
			t.Fatalf("member prefix starts with %#x; scripts tell prefixes from versions by a zero first byte", m1[0])
		}
	})
}

func FuzzScoreRoundTrip(f *testing.F) {
	f.Add(int64(0))
	f.Add(int64(MaxScore))
	f.Add(int64(-MaxScore))
	f.Fuzz(func(t *testing.T, s int64) {
		if s > MaxScore || s < -MaxScore {
			return
		}
		for _, o := range []Order{Desc, Asc} {
			got, err := parseZScore(o, zscore(o, s))
			if err != nil || got != s {
				t.Fatalf("order %d: %d round-trips to %d, %v", o, s, got, err)
			}
		}
	})
}

func TestReachedAtMillis(t *testing.T) {
	cases := []struct {
		in   time.Time
		want time.Time
	}{
		{time.Time{}, time.Time{}},
		{time.Unix(0, 0), time.Time{}}, // the epoch is stored like the zero time
		{t0.Add(999 * time.Microsecond), t0},
		{t0.Add(time.Millisecond), t0.Add(time.Millisecond)},
	}
	for _, c := range cases {
		ms, err := reachedMillis(c.in)
		if err != nil {
			t.Fatalf("%s: %v", c.in, err)
		}
		if got := reachedTime(ms); !got.Equal(c.want) {
			t.Errorf("%s reads back as %s, want %s", c.in, got, c.want)
		}
	}
	if _, err := reachedMillis(time.Unix(-1, 0)); err == nil {
		t.Error("a time before 1970 was accepted")
	}
}
