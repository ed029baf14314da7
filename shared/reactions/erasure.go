package reactions

// DirtyUserKey is the cache-generation marker the counter processor leaves
// for a user whose cached reactions Redis may have missed; an erasure drops
// it with the rest of the user's data.
func DirtyUserKey(user string) string { return dirtyUser + user }
