// Command report-activity is the Lambda behind POST /v1/ops/activity: a
// game server reports a player's match played or won.
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
	lambda.Start(deps.HTTP(bind.Streaks, routes.ReportActivity))
}
