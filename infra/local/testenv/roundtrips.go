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
// request's cost and is not counted. Budget checks (shared/ratelimit's
// GCRA scripts), which every route makes before its own work, are counted
// apart.
type RoundTrips struct{ n, budget atomic.Int64 }

// Count is the number of round trips so far, budget checks aside.
func (r *RoundTrips) Count() int64 { return r.n.Load() }

// Budget is the number of budget checks so far.
func (r *RoundTrips) Budget() int64 { return r.budget.Load() }

// budgetCheck reports whether cmd is a budget check: a script run on a
// redis_rate key.
func budgetCheck(cmd redis.Cmder) bool {
	switch strings.ToLower(cmd.Name()) {
	case "eval", "evalsha", "evalsha_ro", "eval_ro", "script":
		for _, a := range cmd.Args() {
			if s, ok := a.(string); ok && strings.HasPrefix(s, "rate:") {
				return true
			}
		}
	}
	return false
}

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
		switch {
		case budgetCheck(cmd):
			r.budget.Add(1)
		case !handshake(cmd):
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
