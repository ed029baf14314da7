// Command export-status is the Lambda behind GET
// /v1/users/{user_id}/exports/{export_id} and its /v1/ops twin: an
// export's status and a signed link to its document.
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
	lambda.Start(deps.HTTP(bind.Exports, routes.ExportStatus))
}
