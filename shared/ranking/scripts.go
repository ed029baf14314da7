package ranking

import (
	"context"
	"embed"
	"errors"

	"github.com/redis/go-redis/v9"
)

//go:embed lua/*.lua
var luaFS embed.FS

func loadScript(name string, withPrelude bool) *redis.Script {
	body, err := luaFS.ReadFile("lua/" + name + ".lua")
	if err != nil {
		panic("ranking: missing script " + name)
	}
	if withPrelude {
		prelude, err := luaFS.ReadFile("lua/prelude.lua")
		if err != nil {
			panic("ranking: missing script prelude")
		}
		body = append(append(prelude, '\n'), body...)
	}
	return redis.NewScript(string(body))
}

var (
	upsertScript      = loadScript("upsert", true)
	aroundScript      = loadScript("around", true)
	amongScript       = loadScript("among", true)
	forgetScript      = loadScript("forget", true)
	sumScript         = loadScript("sum", false)
	expireScript      = loadScript("expire", false)
	loadPrepareScript = loadScript("load_prepare", false)
	loadClearScript   = loadScript("load_clear", false)
	loadBeginScript   = loadScript("load_begin", false)
	loadChunkScript   = loadScript("load_chunk", true)
	loadCommitScript  = loadScript("load_commit", false)
	loadAbortScript   = loadScript("load_abort", false)
	loadCleanedScript = loadScript("load_cleaned", false)
)

// call is one script invocation of a pipeline.
type call struct {
	script *redis.Script
	keys   []string
	args   []any
}

// runAll sends calls in one pipeline (one round trip once Redis has the
// scripts cached; a Redis that lost its script cache costs one more) and
// returns their replies in order, or the first error.
func (e *Engine) runAll(ctx context.Context, calls []call) ([]any, error) {
	pipe := e.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(calls))
	for i, c := range calls {
		cmds[i] = c.script.EvalSha(ctx, pipe, c.keys, c.args...)
	}
	_, _ = pipe.Exec(ctx) // errors are read per command below
	var missing []int
	for i, c := range cmds {
		if redis.HasErrorPrefix(c.Err(), "NOSCRIPT") {
			missing = append(missing, i)
		}
	}
	if len(missing) > 0 {
		pipe = e.rdb.Pipeline()
		for _, i := range missing {
			cmds[i] = calls[i].script.Eval(ctx, pipe, calls[i].keys, calls[i].args...)
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

// run evaluates one script in one round trip once Redis has it cached.
func (e *Engine) run(ctx context.Context, s *redis.Script, keys []string, args ...any) (any, error) {
	v, err := s.Run(ctx, e.rdb, keys, args...).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	return v, err
}
