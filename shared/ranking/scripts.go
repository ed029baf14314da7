package ranking

import (
	"context"
	"embed"
	"errors"

	"github.com/redis/go-redis/v9"

	"github.com/rallyhq/rally/shared/cache"
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
	pageScript        = loadScript("page", false)
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
	routeScript       = loadScript("route", false)
	layoutScript      = loadScript("layout", false)
	partReadScript    = loadScript("partread", true)
	versionsScript    = loadScript("versions", true)
	epochScript       = loadScript("epoch", false)
	convertScript     = loadScript("convert", false)
)

// runAll sends calls in one pipeline: one round trip once Redis has the
// scripts cached, one more after it lost its script cache.
func (e *Engine) runAll(ctx context.Context, calls []cache.ScriptCall) ([]any, error) {
	return cache.RunScripts(ctx, e.rdb, calls)
}

// run evaluates one script in one round trip once Redis has it cached.
func (e *Engine) run(ctx context.Context, s *redis.Script, keys []string, args ...any) (any, error) {
	v, err := s.Run(ctx, e.rdb, keys, args...).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	return v, err
}
