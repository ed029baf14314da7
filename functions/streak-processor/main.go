// Command streak-processor is the Lambda fed by the Streaks stream: it keeps
// the streak cache and the live-streak boards in Redis, versioned, and takes
// broken streaks off the boards on its scheduled tick.
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/rallyhq/rally/shared/app"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/streaks/bind"
)

func main() {
	deps := app.MustLoad(context.Background())
	lambda.Start(deps.Stream(bind.Streaks, routes.StreakProcessor))
}
