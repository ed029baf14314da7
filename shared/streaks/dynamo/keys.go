package dynamo

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/streaks"
)

// LiveShards is the number of write shards of each activity date in the
// streak indexes: a day's activity spreads its index writes over this many
// partitions, and a Redis-less read queries them all and merges.
const LiveShards = 8

// Retention of the Activity items (DynamoDB deletes them by expires_at).
const (
	// EventRetention keeps the points event log for 90 days.
	EventRetention = 90 * 24 * time.Hour
	// DayRetention keeps daily totals a little longer than the longest
	// history a player can ask for.
	DayRetention = 95 * 24 * time.Hour
	// KeyRetention is how long an Idempotency-Key is remembered.
	KeyRetention = 24 * time.Hour
)

// Sort-key prefixes of the Activity table's item kinds.
const (
	eventPrefix = "evt#"
	dayPrefix   = "day#"
	keyPrefix   = "idem#"
)

const (
	streakDigits = 9 // the longest streak a live key orders
	maxStreak    = 999_999_999
	timeDigits   = 15 // Unix milliseconds until the year 33658
	maxMillis    = 999_999_999_999_999
	// maxSortKey is DynamoDB's limit on a sort key, in bytes; it bounds the
	// user id (inside live_sk) and the keys inside sk.
	maxSortKey = 1024
	// maxUserID leaves room in live_sk for the streak and time parts.
	maxUserID = maxSortKey - streakDigits - timeDigits - 2
)

// EventSK is the Activity sort key of an event: events sort by time.
func EventSK(e streaks.Event) string {
	return fmt.Sprintf("%s%013d#%s", eventPrefix, e.OccurredAt.UnixMilli(), e.ID)
}

// DaySK is the Activity sort key of a player's totals on a local date.
func DaySK(date string) string { return dayPrefix + date }

// KeySK is the Activity sort key of an idempotency record.
func KeySK(key string) string { return keyPrefix + key }

// ShardOf is the index shard a player's streak lives in.
func ShardOf(user string) int {
	h := fnv.New32a()
	h.Write([]byte(user))
	return int(h.Sum32() % LiveShards)
}

// LivePartition is the by_streak partition key of one shard of an
// activity date.
func LivePartition(date string, shard int) string { return date + "#" + strconv.Itoa(shard) }

// RegionPartition is the by_region_streak partition key of one shard of an
// activity date in a region.
func RegionPartition(region, date string, shard int) string {
	return region + "#" + LivePartition(date, shard)
}

// LiveSortKey is the live_sk of a streak: ascending byte order is the
// streak boards' order (longer, then reached earlier, then user id), the
// order streaks.Before defines.
func LiveSortKey(streak int64, reachedAt time.Time, user string) string {
	return fmt.Sprintf("%0*d#%0*d#%s", streakDigits, maxStreak-streak, timeDigits, reachedAt.UnixMilli(), user)
}

// checkRankable refuses a streak that live_sk cannot order.
func checkRankable(st streaks.State) error {
	if st.Current < 0 || st.Current > maxStreak {
		return fmt.Errorf("streak %d is outside 0..%d", st.Current, maxStreak)
	}
	if ms := st.ReachedAt.UnixMilli(); st.Current > 0 && (ms < 0 || ms > maxMillis) {
		return fmt.Errorf("time %s cannot be ranked (before 1970 or too far ahead)", ddb.FormatTime(st.ReachedAt))
	}
	return nil
}

// entryOfKey decodes an unranked entry from a live_sk.
func entryOfKey(key string) (streaks.Entry, error) {
	parts := strings.SplitN(key, "#", 3)
	if len(parts) != 3 || len(parts[0]) != streakDigits || len(parts[1]) != timeDigits || parts[2] == "" {
		return streaks.Entry{}, fmt.Errorf("malformed live key %q", key)
	}
	v, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil {
		return streaks.Entry{}, fmt.Errorf("live key %q: streak: %w", key, err)
	}
	ms, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return streaks.Entry{}, fmt.Errorf("live key %q: time: %w", key, err)
	}
	return streaks.Entry{UserID: parts[2], Streak: maxStreak - v, ReachedAt: time.UnixMilli(ms).UTC()}, nil
}

// candidateDates are the last-activity dates a streak live at now can have.
// A streak is live until the start of the second local day after its last
// date; over every zone (UTC−12..UTC+14) that is at most noon UTC of
// lastDate+2, so lastDate ≥ utcDate(now)−2; and an activity is dated at
// most one day ahead of UTC, so lastDate ≤ utcDate(now)+1.
func candidateDates(now time.Time) []string {
	today := now.UTC().Format(streaks.DateLayout)
	dates := make([]string, 0, 4)
	for d := -2; d <= 1; d++ {
		dates = append(dates, streaks.AddDays(today, d))
	}
	return dates
}
