// Command leaderboard-processor is the Lambda fed by the Scores stream: it
// keeps the Redis boards in line with DynamoDB, versioned.
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/rallyhq/rally/shared/app"
	"github.com/rallyhq/rally/shared/leaderboards/bind"
	"github.com/rallyhq/rally/shared/routes"
)

func main() {
	deps := app.MustLoad(context.Background())
	lambda.Start(deps.Stream(bind.Leaderboards, routes.LeaderboardProcessor))
}
