package mirror

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/redis/go-redis/v9"

	"github.com/rallyhq/rally/shared/reactions"
)

// RebuildCursor keeps a rebuild's position in Redis itself: if Redis loses
// its data again mid-rebuild, the position goes with it and the rebuild
// rightly starts over.
type RebuildCursor struct {
	Redis redis.UniversalClient
}

var _ reactions.RebuildCursors = RebuildCursor{}

const rebuildKey = "rally:rebuild:" + Scope

// Load returns the saved position; started is false when no rebuild is
// under way.
func (c RebuildCursor) Load(ctx context.Context) (reactions.Position, bool, error) {
	raw, err := c.Redis.Get(ctx, rebuildKey).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	var p reactions.Position
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, false, nil
	}
	return p, true, nil
}

// Save records the position reached.
func (c RebuildCursor) Save(ctx context.Context, p reactions.Position) error {
	raw, err := json.Marshal(p)
	if err != nil {
		return err
	}
	return c.Redis.Set(ctx, rebuildKey, raw, 0).Err()
}

// Reset ends the rebuild.
func (c RebuildCursor) Reset(ctx context.Context) error {
	return c.Redis.Del(ctx, rebuildKey).Err()
}
