// Command export-processor is the Lambda fed by the Exports stream and a
// schedule: it writes each user's export a bounded run at a time, and
// resumes any a crash or a failure left.
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
	lambda.Start(deps.Stream(all.Export, routes.ExportProcessor))
}
