// Command export-user is the Lambda behind POST /v1/users/{user_id}/export
// (a player asking for their own data) and POST
// /v1/ops/users/{user_id}/export (an operator).
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/rallyhq/rally/shared/app"
	"github.com/rallyhq/rally/shared/exports/bind"
	"github.com/rallyhq/rally/shared/routes"
)

func main() {
	deps := app.MustLoad(context.Background())
	lambda.Start(deps.HTTP(bind.Exports, routes.ExportUser))
}
