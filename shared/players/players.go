// Package players owns who a player is to the rest of Rally: the profile
// boards show (display name, avatar, region) and the friend list
// friends-rank reads. Game servers set both through the service routes;
// leaderboards and streaks read them; an erasure removes them last.
package players

import (
	"context"
	"time"
)

// Profile is what boards show of a player.
type Profile struct {
	PlayerID    string
	DisplayName string
	AvatarURL   string
	Region      string
	UpdatedAt   time.Time
}

// MaxFriends bounds one player's friend list.
const MaxFriends = 1000

// Store keeps profiles and friend lists. A profile write and a friends
// write of the same player never undo each other.
type Store interface {
	PutProfile(ctx context.Context, p Profile) error
	// Profiles returns the profiles of the given players; players without
	// one are absent.
	Profiles(ctx context.Context, ids []string) (map[string]Profile, error)
	// PutFriends replaces the player's friend list (nil clears it).
	PutFriends(ctx context.Context, player string, friends []string) error
	// Friends returns the player's friend list (nil when none was synced).
	Friends(ctx context.Context, player string) ([]string, error)
}
