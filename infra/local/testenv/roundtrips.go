package testenv

import (
	"context"
	"net"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// RoundTrips is a go-redis hook that counts what a request costs in Redis
// round trips: each command, and each pipeline or transaction, is one. A
// new connection's handshake (HELLO, CLIENT SETINFO, AUTH, SELECT) is not a
// request's cost and is not counted.
type RoundTrips struct{ n atomic.Int64 }

// Count is the number of round trips so far.
func (r *RoundTrips) Count() int64 { return r.n.Load() }

func handshake(cmd redis.Cmder) bool {
	switch strings.ToLower(cmd.Name()) {
	case "hello", "client", "auth", "select":
		return true
	}
	return false
}

// DialHook passes dials through.
func (r *RoundTrips) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

// ProcessHook counts a command.
func (r *RoundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !handshake(cmd) {
			r.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook counts a pipeline.
func (r *RoundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && !handshake(cmds[0]) {
			r.n.Add(1)
		}
		return next(ctx, cmds)
	}
}
