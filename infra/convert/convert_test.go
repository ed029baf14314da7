package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rallyhq/rally/shared/api"
	"github.com/rallyhq/rally/shared/leaderboards"
)

func TestConversions(t *testing.T) {
	at := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		name    string
		convert func(in *strings.Reader, out *bytes.Buffer) (Result, error)
		in      string
		want    []string
		skipped int
		err     error
	}{{
		name:    "nakama listing with strings for int64 and repeated owner records",
		convert: func(in *strings.Reader, out *bytes.Buffer) (Result, error) { return Nakama(in, out, Options{}) },
		in: `{"records":[
			{"leaderboard_id":"weekly","owner_id":"4c2ae592-b2a7-445e-98ec-697694478b1c","username":"a","score":"1200","subscore":"0","num_score":3,"update_time":"2026-11-20T18:03:00Z"},
			{"leaderboard_id":"weekly","owner_id":"9a51cf6c-3b9d-4e2a-a7b4-8c5e5f0f0d01","score":800,"update_time":"2026-11-21T08:00:00.5Z"}],
			"owner_records":[{"leaderboard_id":"weekly","owner_id":"4c2ae592-b2a7-445e-98ec-697694478b1c","score":"1200","update_time":"2026-11-20T18:03:00Z"}],
			"next_cursor":"abc"}`,
		want: []string{
			`{"type":"score","leaderboard_id":"weekly","player_id":"4c2ae592-b2a7-445e-98ec-697694478b1c","score":1200,"reached_at":"2026-11-20T18:03:00Z"}`,
			`{"type":"score","leaderboard_id":"weekly","player_id":"9a51cf6c-3b9d-4e2a-a7b4-8c5e5f0f0d01","score":800,"reached_at":"2026-11-21T08:00:00.5Z"}`,
		},
	}, {
		name: "nakama array onto a board of ours, a subscore and a bad score skipped",
		convert: func(in *strings.Reader, out *bytes.Buffer) (Result, error) {
			return Nakama(in, out, Options{Board: "arena"})
		},
		in: `[{"leaderboard_id":"x","owner_id":"u1","score":5},
			{"leaderboard_id":"x","owner_id":"u2","score":6,"subscore":2},
			{"leaderboard_id":"x","owner_id":"u3","score":"lots"}]`,
		want:    []string{`{"type":"score","leaderboard_id":"arena","player_id":"u1","score":5}`},
		skipped: 2,
	}, {
		name: "nakama subscores ignored when asked",
		convert: func(in *strings.Reader, out *bytes.Buffer) (Result, error) {
			return Nakama(in, out, Options{IgnoreSubscore: true})
		},
		in:   `{"leaderboard_records":[{"leaderboard_id":"x","owner_id":"u2","score":"6","subscore":"2"}]}`,
		want: []string{`{"type":"score","leaderboard_id":"x","player_id":"u2","score":6}`},
	}, {
		name: "playfab csv with a byte order mark, extra columns and a bad row",
		convert: func(in *strings.Reader, out *bytes.Buffer) (Result, error) {
			return PlayFab(in, out, Options{Board: "arena", ReachedAt: &at})
		},
		in: "\ufeffPosition,PlayFabId,DisplayName,StatValue\n0,A1B2C3D4E5F6,\"Ann, the first\",990\n1,F6E5D4C3B2A1,Bob,-12\n2,FFFF0000FFFF,Cy,n/a\n",
		want: []string{
			`{"type":"score","leaderboard_id":"arena","player_id":"A1B2C3D4E5F6","score":990,"reached_at":"2026-11-20T00:00:00Z"}`,
			`{"type":"score","leaderboard_id":"arena","player_id":"F6E5D4C3B2A1","score":-12,"reached_at":"2026-11-20T00:00:00Z"}`,
		},
		skipped: 1,
	}, {
		name: "playfab without its columns",
		convert: func(in *strings.Reader, out *bytes.Buffer) (Result, error) {
			return PlayFab(in, out, Options{Board: "arena"})
		},
		in:  "Rank,Name\n1,x\n",
		err: errAny,
	}, {
		name:    "nothing to convert",
		convert: func(in *strings.Reader, out *bytes.Buffer) (Result, error) { return Nakama(in, out, Options{}) },
		in:      `{"records":[]}`,
		err:     errNothing,
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			res, err := tc.convert(strings.NewReader(tc.in), &out)
			switch {
			case tc.err == errAny && err != nil:
				return
			case tc.err != nil:
				if !errors.Is(err, tc.err) {
					t.Fatalf("err %v, want %v", err, tc.err)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			got := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") || len(res.Skipped) != tc.skipped || res.Written != len(tc.want) {
				t.Fatalf("lines:\n%s\nwant:\n%s\nskipped %q", out.String(), strings.Join(tc.want, "\n"), res.Skipped)
			}
			// Each line is one the importer reads.
			for _, l := range got {
				var sl leaderboards.ScoreLine
				if err := api.DecodeJSON([]byte(l), &sl); err != nil {
					t.Fatalf("%s: %v", l, err)
				}
			}
		})
	}
}

var errAny = errors.New("any error")
