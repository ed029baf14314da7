// Command convert turns another service's leaderboard export into Rally's
// import format (JSON Lines, one score line per record; docs/IMPORT.md),
// read from stdin and written to stdout. Records it cannot convert are
// named on stderr and left out; it fails when none converts.
//
//	go run ./infra/convert -from nakama < leaderboard_records.json > scores.jsonl
//	go run ./infra/convert -from nakama -board arena < records.json > scores.jsonl
//	go run ./infra/convert -from playfab -board arena -reached-at 2026-11-20T00:00:00Z < leaderboard.csv > scores.jsonl
//
// Nakama: the JSON of a leaderboard records listing (an object with
// "records" and/or "owner_records", or "leaderboard_records", or an array
// of records), each with leaderboard_id, owner_id, score, subscore and
// update_time; scores may be numbers or strings (Nakama's REST API writes
// 64-bit integers as strings). The owner is the player, update_time when
// the score was reached, and the leaderboard keeps its id unless -board
// names one. A record with a subscore is refused unless -subscore ignore:
// Rally boards rank by score alone.
//
// PlayFab: a leaderboard CSV with a header naming PlayFabId and StatValue
// (Position, DisplayName and other columns are ignored). The PlayFab id is
// the player; PlayFab exports no time, so -reached-at (default: none, the
// import's start) is every score's.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"time"
)

func main() {
	from := flag.String("from", "", "the export's format: nakama or playfab")
	board := flag.String("board", "", "the Rally leaderboard id (required for playfab; default for nakama: the record's leaderboard_id)")
	reachedAt := flag.String("reached-at", "", "RFC 3339 time every playfab score was reached (default: the import's start)")
	subscore := flag.String("subscore", "reject", "nakama records with a subscore: reject or ignore")
	flag.Parse()
	opts := Options{Board: *board, IgnoreSubscore: *subscore == "ignore"}
	if *subscore != "reject" && *subscore != "ignore" {
		fail(fmt.Errorf("-subscore must be reject or ignore"))
	}
	if *reachedAt != "" {
		t, err := time.Parse(time.RFC3339, *reachedAt)
		if err != nil {
			fail(fmt.Errorf("-reached-at: %w", err))
		}
		opts.ReachedAt = &t
	}
	out := bufio.NewWriter(os.Stdout)
	var res Result
	var err error
	switch *from {
	case "nakama":
		res, err = Nakama(os.Stdin, out, opts)
	case "playfab":
		res, err = PlayFab(os.Stdin, out, opts)
	default:
		err = fmt.Errorf("-from must be nakama or playfab")
	}
	if ferr := out.Flush(); err == nil {
		err = ferr
	}
	for _, s := range res.Skipped {
		fmt.Fprintln(os.Stderr, "skipped:", s)
	}
	if err != nil {
		fail(err)
	}
	fmt.Fprintf(os.Stderr, "%d lines written, %d records skipped\n", res.Written, len(res.Skipped))
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "convert:", err)
	os.Exit(1)
}
