// Package games owns game metadata: the title and thumbnail a studio sets
// for each game through PUT /v1/games/{game_id}, which favorites lists and
// trending games show beside each game id.
package games

import (
	"context"
	"time"
)

// Game is one game's metadata.
type Game struct {
	ID           string
	Title        string
	ThumbnailURL string
	UpdatedAt    time.Time
}

// Store keeps game metadata.
type Store interface {
	// Put replaces a game's metadata.
	Put(ctx context.Context, g Game) error
	// Get reads the metadata of the given games; unknown ones are absent.
	Get(ctx context.Context, ids []string) (map[string]Game, error)
}
