package cache

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// ScriptCall is one Lua script invocation.
type ScriptCall struct {
	Script *redis.Script
	Keys   []string
	Args   []any
}

// RunScripts sends every call in one pipeline by SHA — one round trip once
// Redis has the scripts cached — and resends by source only the calls a
// Redis without them (restarted, failed over, new) refused with NOSCRIPT.
// Replies come back in order; the first real error is returned.
func RunScripts(ctx context.Context, rdb redis.UniversalClient, calls []ScriptCall) ([]any, error) {
	if len(calls) == 0 {
		return nil, nil
	}
	pipe := rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(calls))
	for i, c := range calls {
		cmds[i] = c.Script.EvalSha(ctx, pipe, c.Keys, c.Args...)
	}
	_, _ = pipe.Exec(ctx) // errors are read per command below
	var missing []int
	for i, c := range cmds {
		if redis.HasErrorPrefix(c.Err(), "NOSCRIPT") {
			missing = append(missing, i)
		}
	}
	if len(missing) > 0 {
		pipe = rdb.Pipeline()
		for _, i := range missing {
			cmds[i] = calls[i].Script.Eval(ctx, pipe, calls[i].Keys, calls[i].Args...)
		}
		_, _ = pipe.Exec(ctx)
	}
	out := make([]any, len(cmds))
	for i, c := range cmds {
		v, err := c.Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}
