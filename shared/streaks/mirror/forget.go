package mirror

import (
	"context"
	"fmt"
	"strings"

	"golang.org/x/sync/errgroup"

	"github.com/rallyhq/rally/shared/streaks"
)

// eraseParallel bounds the players one Put erases at once.
const eraseParallel = 8

// splitErasures takes the erasures (Removed states) out of states. A state
// of an erased player no newer than the erasure is an older record of what
// was erased, so it is dropped rather than written back after it.
func splitErasures(states []streaks.State) (live, erased []streaks.State) {
	erasedAt := map[string]int64{}
	for _, st := range states {
		if st.Removed {
			erased = append(erased, st)
			if v, ok := erasedAt[st.UserID]; !ok || v < st.Version {
				erasedAt[st.UserID] = st.Version
			}
		}
	}
	if len(erased) == 0 {
		return states, nil
	}
	for _, st := range states {
		if v, ok := erasedAt[st.UserID]; !st.Removed && (!ok || st.Version > v) {
			live = append(live, st)
		}
	}
	return live, erased
}

func (m *Mirror) eraseAll(ctx context.Context, erased []streaks.State) error {
	var g errgroup.Group
	g.SetLimit(eraseParallel)
	for _, st := range erased {
		g.Go(func() error { return m.erase(ctx, st) })
	}
	return g.Wait()
}

// erase takes every trace of an erased player out of Redis: their
// deadlines, their entries, lookups and tombstones on the global board and
// on every region board they were ever on (a move leaves a tombstone on
// the board left), and their cached streak. Nothing is left that holds
// their id, not even a tombstone, so a record older than the erasure that
// arrives after it (the handler's write-through of an activity racing the
// erasure, a stale redelivery) would write them back.
//
// The deadlines go first: a sweep reading one of them after the boards
// were cleared would leave a tombstone there. (A sweep that read it just
// before still can; erasure is rare enough to accept that.)
func (m *Mirror) erase(ctx context.Context, st streaks.State) error {
	user := st.UserID
	regions := map[string]bool{"": true}
	for _, r := range append([]string{st.Region, st.PrevRegion}, st.Regions...) {
		if r != "" && validRegion(r) {
			regions[r] = true
		}
	}
	found, err := m.dropDeadlines(ctx, user)
	if err != nil {
		return err
	}
	for _, r := range found {
		regions[r] = true
	}
	var g errgroup.Group
	g.Go(func() error {
		if err := m.Redis.Del(ctx, cacheKey(user)).Err(); err != nil {
			return fmt.Errorf("erase cached streak of %s: %w", user, err)
		}
		return nil
	})
	for r := range regions {
		g.Go(func() error {
			if err := m.Rank.Forget(ctx, Board(r), user); err != nil {
				return fmt.Errorf("erase %s from the streak boards: %w", user, err)
			}
			return nil
		})
	}
	return g.Wait()
}

// dropDeadlines removes every deadline member of user ("<version>|<region>|
// <user>"), a scan page at a time, and returns the regions they named.
func (m *Mirror) dropDeadlines(ctx context.Context, user string) ([]string, error) {
	var regions []string
	match := "*|" + globEscape(user)
	var cursor uint64
	for {
		page, next, err := m.Redis.ZScan(ctx, deadlinesKey, cursor, match, sweepPage).Result()
		if err != nil {
			return nil, fmt.Errorf("find streak deadlines of %s: %w", user, err)
		}
		var drop []any
		for i := 0; i < len(page); i += 2 { // member, score, member, score…
			if _, region, u, ok := parseDeadline(page[i]); ok && u == user {
				drop = append(drop, page[i])
				regions = append(regions, region)
			}
		}
		if len(drop) > 0 {
			if err := m.Redis.ZRem(ctx, deadlinesKey, drop...).Err(); err != nil {
				return nil, fmt.Errorf("drop %d streak deadlines of %s: %w", len(drop), user, err)
			}
		}
		if next == 0 {
			return regions, nil
		}
		cursor = next
	}
}

// globEscape quotes the characters a Redis MATCH pattern would read as
// wildcards.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\^`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
