package client_test

import (
	"context"
	"errors"
	"log"
	"net/http"

	"github.com/rallyhq/rally/shared/client"
)

// A game server submits a player's match result and reads back their
// score and rank. (Compiled, not run: it needs a deployed stack and AWS
// credentials.)
func Example() {
	ctx := context.Background()
	apiURL, matchID := "https://abc123.execute-api.eu-west-1.amazonaws.com", "match-7f3a"

	// The README's example (Game servers), word for word, from here.
	rally, err := client.New(ctx, client.Options{Endpoint: apiURL}) // the stack's ApiUrl; region and credentials from the default chain
	if err != nil {
		log.Fatal(err)
	}
	res, err := rally.SubmitScore(ctx, "wins-weekly", client.ScoreSubmission{PlayerID: "p-42", MatchID: matchID, Score: 3})
	if err != nil {
		log.Fatal(err) // a refusal is a *client.Error: its Status, Type and Errors say why
	}
	if res.Rank != nil { // nil when the cache could not tell it
		log.Printf("p-42: %d, rank %d in %s (applied now: %v)", res.Score, *res.Rank, res.Period, res.Applied)
	}
}

// A submission the API refuses comes back as a *client.Error holding the
// problem document, which names each field that was wrong.
func ExampleError() {
	ctx := context.Background()
	rally, err := client.New(ctx, client.Options{Endpoint: "https://abc123.execute-api.eu-west-1.amazonaws.com"})
	if err != nil {
		log.Fatal(err)
	}
	_, err = rally.SubmitScore(ctx, "wins-weekly", client.ScoreSubmission{PlayerID: "p-42", MatchID: "match-7f3a", Score: 3})
	var problem *client.Error
	switch {
	case errors.As(err, &problem) && problem.Status == http.StatusBadRequest:
		log.Fatalf("fix the submission: %v", problem.Errors)
	case err != nil:
		log.Fatal(err)
	}
}

// A reported match is recorded once however often it is sent: the
// server's own key, derived from the match, makes a resend after a crash
// answer the first receipt.
func ExampleClient_ReportActivity() {
	ctx := context.Background()
	rally, err := client.New(ctx, client.Options{Endpoint: "https://abc123.execute-api.eu-west-1.amazonaws.com"})
	if err != nil {
		log.Fatal(err)
	}
	receipt, err := rally.ReportActivity(ctx,
		client.ActivityReport{UserID: "p-42", EventType: client.MatchWon, Source: client.SourceConsole},
		client.WithIdempotencyKey("match-7f3a:p-42"))
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("+%d points, streak %d (a resend: %v)", receipt.PointsAwarded, receipt.CurrentStreak, receipt.Replayed)
}
