// Command analytics-shipper is the Lambda fed by the Reactions, ScoreEvents
// and Activity streams: it maps each change to a versioned analytics event
// and ships it to Firehose, once.
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/rallyhq/rally/shared/analytics/bind"
	"github.com/rallyhq/rally/shared/app"
	"github.com/rallyhq/rally/shared/routes"
)

func main() {
	deps := app.MustLoad(context.Background())
	lambda.Start(deps.Stream(bind.Analytics, routes.AnalyticsShipper))
}
