package obs

import (
	"context"
	"net"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-xray-sdk-go/instrumentation/awsv2"
	"github.com/aws/aws-xray-sdk-go/strategy/ctxmissing"
	"github.com/aws/aws-xray-sdk-go/xray"
	"github.com/redis/go-redis/v9"
)

// TraceAWS adds X-Ray subsegments to every AWS SDK v2 call made with cfg.
// Work outside a traced invocation (none in Lambda with active tracing)
// is logged by the SDK rather than failing.
func TraceAWS(cfg *aws.Config) {
	_ = xray.Configure(xray.Config{ContextMissingStrategy: ctxmissing.NewDefaultIgnoreErrorStrategy()})
	awsv2.AWSV2Instrumentor(&cfg.APIOptions)
}

// RedisTracing is a go-redis hook that records each command or pipeline as
// an X-Ray subsegment. In Lambda the SDK creates the invocation's facade
// segment on the first subsegment, so the hook does not look for a segment
// first; it is only installed when tracing is on.
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
		return xray.Capture(ctx, "redis "+cmd.Name(), func(ctx context.Context) error {
			return ignoreNil(next(ctx, cmd))
		})
	}
}

// ProcessPipelineHook traces one pipeline round trip.
func (RedisTracing) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
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
