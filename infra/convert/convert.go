package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/rallyhq/rally/shared/leaderboards"
)

// Options shape the lines written.
type Options struct {
	// Board is the Rally leaderboard id; empty keeps Nakama's.
	Board string
	// ReachedAt is every PlayFab score's time; nil leaves it out.
	ReachedAt *time.Time
	// IgnoreSubscore converts Nakama records that have a subscore
	// (their subscore dropped) instead of skipping them.
	IgnoreSubscore bool
}

// Result is what a conversion did: the lines written and the records
// skipped, each named with why.
type Result struct {
	Written int
	Skipped []string
}

// errNothing means no record converted.
var errNothing = errors.New("no record converted")

// line writes one score line.
func (r *Result) line(w io.Writer, l leaderboards.ScoreLine) error {
	l.Type = leaderboards.LineScore
	raw, err := json.Marshal(l)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(w, "%s\n", raw); err != nil {
		return err
	}
	r.Written++
	return nil
}

func (r *Result) done() (Result, error) {
	if r.Written == 0 {
		return *r, errNothing
	}
	return *r, nil
}

// nakamaRecord is one Nakama leaderboard record (LeaderboardRecord in its
// API), as its REST API and console exports write it.
type nakamaRecord struct {
	LeaderboardID string          `json:"leaderboard_id"`
	OwnerID       string          `json:"owner_id"`
	Score         json.RawMessage `json:"score"`
	Subscore      json.RawMessage `json:"subscore"`
	UpdateTime    string          `json:"update_time"`
}

// Nakama converts a Nakama leaderboard records listing.
func Nakama(in io.Reader, out io.Writer, o Options) (Result, error) {
	raw, err := io.ReadAll(in)
	if err != nil {
		return Result{}, err
	}
	var records []nakamaRecord
	if trimmed := bytes.TrimSpace(raw); len(trimmed) > 0 && trimmed[0] == '[' {
		err = json.Unmarshal(trimmed, &records)
	} else {
		var listing struct {
			Records            []nakamaRecord `json:"records"`
			OwnerRecords       []nakamaRecord `json:"owner_records"`
			LeaderboardRecords []nakamaRecord `json:"leaderboard_records"`
		}
		err = json.Unmarshal(raw, &listing)
		records = append(append(listing.Records, listing.OwnerRecords...), listing.LeaderboardRecords...)
	}
	if err != nil {
		return Result{}, fmt.Errorf("read the nakama export: %w", err)
	}
	var res Result
	seen := map[string]bool{}
	for i, rec := range records {
		skip := func(why string) {
			res.Skipped = append(res.Skipped, fmt.Sprintf("record %d (%s): %s", i+1, rec.OwnerID, why))
		}
		board := o.Board
		if board == "" {
			board = rec.LeaderboardID
		}
		// owner_records repeat records of the listing.
		if key := board + "\x00" + rec.OwnerID; seen[key] {
			continue
		} else {
			seen[key] = true
		}
		score, err := integer(rec.Score)
		if err != nil {
			skip("score: " + err.Error())
			continue
		}
		if sub, err := integer(rec.Subscore); (err != nil || sub != 0) && len(rec.Subscore) > 0 && !o.IgnoreSubscore {
			skip("has a subscore (Rally ranks by score alone; -subscore ignore drops it)")
			continue
		}
		if board == "" || rec.OwnerID == "" {
			skip("no leaderboard_id or owner_id")
			continue
		}
		l := leaderboards.ScoreLine{LeaderboardID: &board, PlayerID: &rec.OwnerID, Score: &score}
		if rec.UpdateTime != "" {
			t, err := time.Parse(time.RFC3339Nano, rec.UpdateTime)
			if err != nil {
				skip("update_time: " + err.Error())
				continue
			}
			l.ReachedAt = &t
		}
		if err := res.line(out, l); err != nil {
			return res, err
		}
	}
	return res.done()
}

// integer reads a JSON integer written as a number or a string.
func integer(raw json.RawMessage) (int64, error) {
	s := strings.Trim(strings.TrimSpace(string(raw)), `"`)
	if s == "" || s == "null" {
		return 0, errors.New("missing")
	}
	return strconv.ParseInt(s, 10, 64)
}

// PlayFab converts a PlayFab leaderboard CSV.
func PlayFab(in io.Reader, out io.Writer, o Options) (Result, error) {
	if o.Board == "" {
		return Result{}, errors.New("a playfab export names no leaderboard: give -board")
	}
	r := csv.NewReader(in)
	r.FieldsPerRecord = -1
	header, err := r.Read()
	if err != nil {
		return Result{}, fmt.Errorf("read the playfab header: %w", err)
	}
	col := map[string]int{}
	for i, name := range header {
		col[strings.ToLower(strings.TrimSpace(strings.TrimPrefix(name, "\ufeff")))] = i
	}
	id, hasID := col["playfabid"]
	value, hasValue := col["statvalue"]
	if !hasID || !hasValue {
		return Result{}, fmt.Errorf("the playfab header %q names no PlayFabId and StatValue columns", header)
	}
	var res Result
	for row := 2; ; row++ {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return res, fmt.Errorf("playfab row %d: %w", row, err)
		}
		if len(rec) <= max(id, value) {
			res.Skipped = append(res.Skipped, fmt.Sprintf("row %d: too few columns", row))
			continue
		}
		player := strings.TrimSpace(rec[id])
		score, err := strconv.ParseInt(strings.TrimSpace(rec[value]), 10, 64)
		if err != nil || player == "" {
			res.Skipped = append(res.Skipped, fmt.Sprintf("row %d (%s): no PlayFabId or an integer StatValue", row, player))
			continue
		}
		if err := res.line(out, leaderboards.ScoreLine{LeaderboardID: &o.Board, PlayerID: &player, Score: &score, ReachedAt: o.ReachedAt}); err != nil {
			return res, err
		}
	}
	return res.done()
}
