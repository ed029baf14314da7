package mirror

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/rallyhq/rally/shared/ranking"
	"github.com/rallyhq/rally/shared/streaks"
)

// deadlinesKey is a sorted set of when live streaks break: member
// "<version>|<region>|<user>", score the break time in Unix milliseconds.
// Every written version has its own member; sweeping an old one removes at
// that version's 2v+1, which a newer activity's entry outranks, so a
// player who was active again stays on the boards.
const deadlinesKey = "rally:streaks:deadlines"

// sweepPage bounds the deadlines one sweep step reads and removes.
const sweepPage = 1000

// deadline is the deadline member of st, if st can be live.
func deadline(st streaks.State) (redis.Z, bool) {
	if st.Removed || st.Current <= 0 {
		return redis.Z{}, false
	}
	at := st.BreaksAt()
	if at.IsZero() {
		return redis.Z{}, false
	}
	member := strconv.FormatInt(st.Version, 10) + "|" + st.Region + "|" + st.UserID
	return redis.Z{Score: float64(at.UnixMilli()), Member: member}, true
}

// parseDeadline reads a deadline member back; ok is false for a member no
// board could act on. Regions and user ids cannot hold '|' (they are API
// ids), and the user comes last anyway.
func parseDeadline(member string) (version int64, region, user string, ok bool) {
	parts := strings.SplitN(member, "|", 3)
	if len(parts) != 3 || !validRegion(parts[1]) || parts[2] == "" || len(parts[2]) > ranking.MaxIDLen {
		return 0, "", "", false
	}
	v, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil || v < 0 || removalVersion(v) > ranking.MaxVersion {
		return 0, "", "", false
	}
	return v, parts[1], parts[2], true
}

// Sweep takes off the boards the streaks that broke by now, a page of
// deadlines at a time: each swept version is removed at 2v+1 from the
// global board and its region's, then its deadline is dropped. It returns
// how many deadlines it swept. Concurrent sweeps are harmless: removals
// are versioned and dropping a member twice does nothing.
func (m *Mirror) Sweep(ctx context.Context, now time.Time) (int, error) {
	maxScore := strconv.FormatInt(now.UnixMilli(), 10)
	swept := 0
	for {
		members, err := m.Redis.ZRangeByScore(ctx, deadlinesKey, &redis.ZRangeBy{
			Min: "-inf", Max: maxScore, Count: sweepPage,
		}).Result()
		if err != nil {
			return swept, fmt.Errorf("read streak deadlines: %w", err)
		}
		if len(members) == 0 {
			return swept, nil
		}
		boards := map[string][]ranking.Item{}
		drop := make([]any, len(members))
		for i, mem := range members {
			drop[i] = mem
			v, region, user, ok := parseDeadline(mem)
			if !ok {
				continue // not ours to act on; dropping it is all we can do
			}
			gone := ranking.Item{ID: user, Version: removalVersion(v), Removed: true}
			boards[""] = append(boards[""], gone)
			if region != "" {
				boards[region] = append(boards[region], gone)
			}
		}
		var g errgroup.Group
		m.upsertBoards(ctx, &g, boards)
		if err := g.Wait(); err != nil {
			return swept, fmt.Errorf("sweep broken streaks: %w", err)
		}
		// Dropped only after the removals landed: a failed sweep is retried.
		n, err := m.Redis.ZRem(ctx, deadlinesKey, drop...).Result()
		if err != nil {
			return swept, fmt.Errorf("drop %d swept streak deadlines: %w", len(drop), err)
		}
		swept += int(n)
		if len(members) < sweepPage {
			return swept, nil
		}
	}
}
