package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/rallyhq/rally/shared/obs"
	"github.com/rallyhq/rally/shared/routes"
)

// The hash printed is the one the functions log under the same key, and
// the query finds exactly it.
func TestPrintsTheHashLogsNameTheUserBy(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out, []byte(routes.LogKey.Local), []string{"alice", "bob"}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines for 2 users: %q", len(lines), out.String())
	}
	want := obs.UserHash([]byte(routes.LogKey.Local), "alice")
	if !strings.HasPrefix(lines[0], "alice\tuser:"+want+"\t") || !strings.Contains(lines[0], `like "user:`+want+`"`) {
		t.Fatalf("alice: %q, want hash %s", lines[0], want)
	}
	if strings.Contains(lines[1], want) {
		t.Fatal("bob got alice's hash")
	}
	if err := run(&out, []byte("k"), nil); err == nil {
		t.Fatal("no user ids was not an error")
	}
}
