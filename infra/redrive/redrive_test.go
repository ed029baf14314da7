package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/rallyhq/rally/infra/local/stack"
	"github.com/rallyhq/rally/infra/local/stacktest"
	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/shared/client"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// The CLI is the ops routes, signed: it lists what the API lists, replays
// through the API, refuses what the API refuses, and a wrong secret or a
// game server's credentials get no answer.
func TestRedriveIsAClientOfTheOpsRoutes(t *testing.T) {
	s := stacktest.Start(t, stack.Options{Log: testenv.FailureLog(t)})
	ctx := context.Background()
	signed := func(secret string) *client.Client {
		c, err := client.New(ctx, client.Options{Endpoint: s.URL(), Region: stack.Region,
			Credentials: credentials.NewStaticCredentialsProvider(stack.DefaultAccessKey, secret, "")})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := signed(stack.DefaultSecretKey)

	var out bytes.Buffer
	if err := run(ctx, c, &out, "", "", false); err != nil {
		t.Fatal(err)
	}
	var list struct {
		Batches []any `json:"batches"`
	}
	if err := json.Unmarshal(out.Bytes(), &list); err != nil || list.Batches == nil {
		t.Fatalf("list: %v %s", err, out.String())
	}
	out.Reset()
	if err := run(ctx, c, &out, "counter-processor", "", true); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `"results"`) {
		t.Fatalf("replay answered %s", out.String())
	}
	if err := run(ctx, c, &out, "no-such-processor", "", false); err == nil || !strings.Contains(err.Error(), "400") {
		t.Fatalf("an unknown processor: %v", err)
	}
	if err := run(ctx, c, &out, "", "abc", true); err == nil {
		t.Fatal("-batch without -function ran")
	}
	if err := run(ctx, signed("wrong"), &out, "", "", false); err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("a wrong secret: %v", err)
	}
	// The parked batches are the operator's: the game server's own
	// credentials list and replay nothing.
	server, err := client.New(ctx, client.Options{Endpoint: s.URL(), Region: stack.Region,
		Credentials: credentials.NewStaticCredentialsProvider(stack.DefaultServerAccessKey, stack.DefaultServerSecretKey, "")})
	if err != nil {
		t.Fatal(err)
	}
	for _, replay := range []bool{false, true} {
		if err := run(ctx, server, &out, "", "", replay); err == nil || !strings.Contains(err.Error(), "403") {
			t.Fatalf("the game server (replay %v): %v, want a 403", replay, err)
		}
	}
}
