-- Erases every trace of ARGV[1] (members, lookup entries and tombstones in
-- both slots). A load under way is cancelled: it may have been read from a
-- snapshot that still holds the ID.
local id = ARGV[1]
for s = 1, 2 do
  local keyOf = idBuckets(4, s)
  for l = 0, NL - 1 do
    local v = redis.call('HGET', keyOf(l), id)
    if v then
      local _, p = decode(v)
      if p then redis.call('ZREM', Z[s], p .. id) end
      redis.call('HDEL', keyOf(l), id)
    end
  end
  redis.call('ZREM', Z[s], ZERO .. id)
end
if build then redis.call('HDEL', KEYS[1], 'build') end
return 1
