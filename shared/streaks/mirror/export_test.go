package mirror

// Key formats, for tests that look at Redis directly.
var (
	DeadlinesKey = deadlinesKey
	CacheKey     = cacheKey
)
