// Command unlike-post is the Lambda behind DELETE /v1/posts/{post_id}/like.
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
	lambda.Start(deps.HTTP(bind.Reactions, routes.UnlikePost))
}
