package dynamo

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	"github.com/rallyhq/rally/shared/leaderboards"
)

// RankShards is the number of write shards of the by_score index per board
// period: a busy board spreads its index writes over this many partitions,
// and a Redis-less read queries them all and merges.
const RankShards = 8

// MetaID is the player_id of a period's meta item (the member count).
// Player ids cannot start with '#', so it never collides with a player.
const MetaID = "#meta"

const (
	scoreDigits = 17 // 2^54 has 17 digits
	timeDigits  = 15 // Unix milliseconds until the year 33658
	maxMillis   = 999_999_999_999_999
)

// PeriodKey is the Scores partition key of a board period.
func PeriodKey(board, period string) string { return board + "#" + period }

// EventKey is the ScoreEvents partition key of a player on a board. It
// leaves the period out on purpose: a match retried after a period boundary
// is still recognised.
func EventKey(board, player string) string { return board + "#" + player }

// ShardOf is the by_score shard a player's scores live in.
func ShardOf(player string) int {
	h := fnv.New32a()
	h.Write([]byte(player))
	return int(h.Sum32() % RankShards)
}

// RankPartition is the by_score partition key of one shard of a board period.
func RankPartition(board, period string, shard int) string {
	return PeriodKey(board, period) + "#" + strconv.Itoa(shard)
}

// scorePart encodes a score so that byte order is rank order on a board
// with order o. As a key prefix it sorts before every key with that score,
// so rank_sk < scorePart(s) selects exactly the strictly better scores.
func scorePart(o leaderboards.Order, score int64) string {
	v := score + leaderboards.MaxScore
	if o != leaderboards.Asc {
		v = 2*leaderboards.MaxScore - v
	}
	return fmt.Sprintf("%0*d", scoreDigits, v)
}

// RankKey is the by_score sort key of a score: ascending byte order is the
// board's rank order (score, then the earlier time it was reached, then
// player id), the order leaderboards.Before defines.
func RankKey(o leaderboards.Order, score int64, reachedAt time.Time, player string) string {
	return fmt.Sprintf("%s#%0*d#%s", scorePart(o, score), timeDigits, reachedAt.UnixMilli(), player)
}

// checkRankable refuses a score the rank key cannot order: beyond ±2^53 or
// reached outside 1970..33658.
func checkRankable(score int64, reachedAt time.Time) error {
	if score > leaderboards.MaxScore || score < -leaderboards.MaxScore {
		return fmt.Errorf("score %d is beyond ±2^53", score)
	}
	if ms := reachedAt.UnixMilli(); ms < 0 || ms > maxMillis {
		return fmt.Errorf("time %s cannot be ranked (before 1970 or too far ahead)", reachedAt.UTC().Format(time.RFC3339))
	}
	return nil
}

// entryOfKey decodes an unranked entry from a rank key.
func entryOfKey(o leaderboards.Order, key string) (leaderboards.Entry, error) {
	parts := strings.SplitN(key, "#", 3)
	if len(parts) != 3 || len(parts[0]) != scoreDigits || len(parts[1]) != timeDigits || parts[2] == "" {
		return leaderboards.Entry{}, fmt.Errorf("malformed rank key %q", key)
	}
	v, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil {
		return leaderboards.Entry{}, fmt.Errorf("rank key %q: score: %w", key, err)
	}
	ms, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return leaderboards.Entry{}, fmt.Errorf("rank key %q: time: %w", key, err)
	}
	score := v - leaderboards.MaxScore
	if o != leaderboards.Asc {
		score = leaderboards.MaxScore - v
	}
	return leaderboards.Entry{PlayerID: parts[2], Score: score, ReachedAt: time.UnixMilli(ms).UTC()}, nil
}
