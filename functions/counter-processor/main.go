// Command counter-processor is the Lambda fed by the Reactions stream: it
// keeps counts and trending windows, exactly once.
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/rallyhq/rally/shared/app"
	"github.com/rallyhq/rally/shared/reactions/bind"
	"github.com/rallyhq/rally/shared/routes"
)

func main() {
	deps := app.MustLoad(context.Background())
	lambda.Start(deps.Stream(bind.Reactions, routes.CounterProcessor))
}
