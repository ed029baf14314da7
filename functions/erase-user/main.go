// Command erase-user is the Lambda behind DELETE /v1/users/{user_id} (a
// player erasing themselves) and DELETE /v1/ops/users/{user_id} (a service).
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/rallyhq/rally/shared/app"
	"github.com/rallyhq/rally/shared/privacy/bind"
	"github.com/rallyhq/rally/shared/routes"
)

func main() {
	deps := app.MustLoad(context.Background())
	lambda.Start(deps.HTTP(bind.Privacy, routes.EraseUser))
}
