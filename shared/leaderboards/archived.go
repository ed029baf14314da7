package leaderboards

import (
	"context"
	"slices"
)

// Reads of a closed period whose close finished are served from its
// archive, exactly as it closed, at a page or two of reads whatever the
// board's size; Redis no longer holds the period once the next one is a
// period old.

// archived reads the archive head of a period that has ended; found is
// false for the current period, a board that never resets, a period not
// archived yet, and when no archive is kept.
func (s *Service) archived(ctx context.Context, d Definition, period string) (ArchiveHead, bool, error) {
	if s.Archive == nil || d.Reset == Never || s.Clock.Now().Before(d.PeriodEnd(period)) {
		return ArchiveHead{}, false, nil
	}
	key := d.ID + "\x00" + period
	if h, ok := s.heads.Load(key); ok {
		return h.(ArchiveHead), true, nil
	}
	h, found, err := s.Archive.Head(ctx, d.ID, period)
	if err != nil || !found {
		return h, found, err
	}
	if s.headsKept.Add(1) > maxHeads {
		s.heads.Clear()
		s.headsKept.Store(1)
	}
	s.heads.Store(key, h)
	return h, true, nil
}

// maxHeads bounds the archive heads a process keeps.
const maxHeads = 10_000

// archivedTop reads n entries from rank from on out of an archive: the
// pages that hold those positions.
func (s *Service) archivedTop(ctx context.Context, d Definition, period string, h ArchiveHead, from, n int) (Top, error) {
	t := Top{Period: period, Total: h.Total, Entries: []Entry{}, AsOf: d.PeriodEnd(period)}
	first, last := (from-1)/ArchivePage, (from-1+n-1)/ArchivePage
	var entries []Entry
	for p := first; p <= last && p < h.Pages; p++ {
		page, err := s.Archive.Page(ctx, d.ID, period, p)
		if err != nil {
			return Top{}, err
		}
		entries = append(entries, page...)
	}
	skip := from - 1 - first*ArchivePage
	if skip < len(entries) {
		t.Entries = entries[skip:min(len(entries), skip+n)]
	}
	t.Names = s.names(ctx, t.Entries)
	return t, nil
}

// archivedRank finds a player in an archive: their score (kept in Scores)
// names the page that holds them; the neighbours come from it and, at its
// edges, from the page on either side.
func (s *Service) archivedRank(ctx context.Context, d Definition, period string, h ArchiveHead, player string, k int) (Standing, error) {
	scores, err := s.Scores.Get(ctx, d.ID, period, []string{player})
	if err != nil {
		return Standing{}, err
	}
	if len(scores) == 0 {
		return Standing{}, notRanked(player, d.ID, period)
	}
	p, found, err := s.Archive.PageOf(ctx, d, period, scores[0])
	if err != nil {
		return Standing{}, err
	}
	if !found {
		return Standing{}, notRanked(player, d.ID, period)
	}
	window, err := s.Archive.Page(ctx, d.ID, period, p)
	if err != nil {
		return Standing{}, err
	}
	at := slices.IndexFunc(window, func(e Entry) bool { return e.PlayerID == player })
	if at < 0 {
		return Standing{}, notRanked(player, d.ID, period)
	}
	if at < k && p > 0 {
		before, err := s.Archive.Page(ctx, d.ID, period, p-1)
		if err != nil {
			return Standing{}, err
		}
		window, at = append(before, window...), at+len(before)
	}
	if at+k >= len(window) && p+1 < h.Pages {
		after, err := s.Archive.Page(ctx, d.ID, period, p+1)
		if err != nil {
			return Standing{}, err
		}
		window = append(window, after...)
	}
	st := Standing{Period: period, Self: window[at], Total: h.Total, AsOf: d.PeriodEnd(period)}
	st.Neighbors = window[max(0, at-k):min(len(window), at+k+1)]
	st.Percentile = Percentile(st.Self.Rank, st.Total)
	return st, nil
}
