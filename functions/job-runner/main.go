// Command job-runner is the Lambda fed by the Jobs stream and a schedule:
// it runs rebuild, reconcile and recompute jobs, a checkpoint at a time,
// and starts the scheduled reconcile.
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/rallyhq/rally/shared/app"
	"github.com/rallyhq/rally/shared/app/all"
	"github.com/rallyhq/rally/shared/routes"
)

func main() {
	deps := app.MustLoad(context.Background())
	lambda.Start(deps.Stream(all.Jobs, routes.JobRunner))
}
