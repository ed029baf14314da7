package obs

import (
	"context"
	"errors"
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
		var err error
		_ = xray.Capture(ctx, "redis "+cmd.Name(), func(ctx context.Context) error {
			err = next(ctx, cmd)
			return ignoreNil(err)
		})
		return err
	}
}

// ProcessPipelineHook traces one pipeline round trip.
func (RedisTracing) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var err error
		_ = xray.Capture(ctx, "redis pipeline", func(ctx context.Context) error {
			err = next(ctx, cmds)
			return ignoreNil(err)
		})
		return err
	}
}

// ignoreNil keeps a cache miss from being recorded as a fault in the
// subsegment. The hooks still return the original error: go-redis sets
// what a hook returns on the command, so a miss must stay redis.Nil for
// the caller to see a miss.
func ignoreNil(err error) error {
	if errors.Is(err, redis.Nil) {
		return nil
	}
	return err
}
