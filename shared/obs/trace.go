package obs

import (
	"context"
	"net"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-xray-sdk-go/instrumentation/awsv2"
	"github.com/aws/aws-xray-sdk-go/xray"
	"github.com/redis/go-redis/v9"
)

// TraceAWS adds X-Ray subsegments to every AWS SDK v2 call made with cfg.
func TraceAWS(cfg *aws.Config) {
	awsv2.AWSV2Instrumentor(&cfg.APIOptions)
}

// RedisTracing is a go-redis hook that records each command or pipeline as
// an X-Ray subsegment of the current segment. Without a segment in the
// context (local runs, tests) it does nothing.
type RedisTracing struct{}

var _ redis.Hook = RedisTracing{}

// DialHook passes dials through.
func (RedisTracing) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return next(ctx, network, addr)
	}
}

// ProcessHook traces one command.
func (RedisTracing) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if xray.GetSegment(ctx) == nil {
			return next(ctx, cmd)
		}
		return xray.Capture(ctx, "redis "+cmd.Name(), func(ctx context.Context) error {
			return ignoreNil(next(ctx, cmd))
		})
	}
}

// ProcessPipelineHook traces one pipeline round trip.
func (RedisTracing) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if xray.GetSegment(ctx) == nil {
			return next(ctx, cmds)
		}
		return xray.Capture(ctx, "redis pipeline", func(ctx context.Context) error {
			return ignoreNil(next(ctx, cmds))
		})
	}
}

// ignoreNil keeps a cache miss from being recorded as a fault. The original
// error still reaches the caller through the command.
func ignoreNil(err error) error {
	if err == redis.Nil {
		return nil
	}
	return err
}
