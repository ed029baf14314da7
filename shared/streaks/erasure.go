package streaks

// DirtyUserKey is the cache-generation marker left for a player whose
// cached streak Redis may have missed; an erasure drops it with the rest
// of the player's data.
func DirtyUserKey(user string) string { return dirtyUser + user }
