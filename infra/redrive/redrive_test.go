package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/rallyhq/rally/infra/local/stack"
	"github.com/rallyhq/rally/infra/local/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// The CLI is the ops routes, signed: it lists what the API lists, replays
// through the API, refuses what the API refuses, and a wrong secret gets
// no answer.
func TestRedriveIsAClientOfTheOpsRoutes(t *testing.T) {
	s := testenv.Stack(t, stack.Options{Log: testenv.FailureLog(t)})
	ctx := context.Background()
	c := client{base: s.URL(), region: stack.Region, http: http.DefaultClient,
		creds: credentials.NewStaticCredentialsProvider(stack.DefaultAccessKey, stack.DefaultSecretKey, "")}

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
	c.creds = credentials.NewStaticCredentialsProvider(stack.DefaultAccessKey, "wrong", "")
	if err := run(ctx, c, &out, "", "", false); err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("a wrong secret: %v", err)
	}
}
