// Command ban-player is the Lambda behind PUT /v1/ops/players/{player_id}/ban.
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/rallyhq/rally/shared/app"
	"github.com/rallyhq/rally/shared/leaderboards/bind"
	"github.com/rallyhq/rally/shared/routes"
)

func main() {
	deps := app.MustLoad(context.Background())
	lambda.Start(deps.HTTP(bind.Leaderboards, routes.BanPlayer))
}
