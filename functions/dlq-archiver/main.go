// Command dlq-archiver is the Lambda fed by every stream processor's
// dead-letter queue: it archives each parked batch with its records.
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/rallyhq/rally/shared/app"
	"github.com/rallyhq/rally/shared/deadletters/bind"
	"github.com/rallyhq/rally/shared/routes"
)

func main() {
	deps := app.MustLoad(context.Background())
	lambda.Start(deps.Queue(bind.DeadLetters, routes.DlqArchiver))
}
