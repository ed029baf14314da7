// Command erasure-processor is the Lambda fed by the Erasures stream and a
// schedule: it carries out each requested erasure, and resumes any a crash
// interrupted.
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
	lambda.Start(deps.Stream(all.Erasure, routes.ErasureProcessor))
}
