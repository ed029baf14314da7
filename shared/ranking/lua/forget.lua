-- Erases every trace of ARGV[1] (members, lookup entries and tombstones in
-- both slots). A load under way is cancelled: it may have been read from a
-- snapshot that still holds the ID. Returns {fence, retired}: a set being
-- converted to partitions (fenced) or converted (retired) has the ID
-- forgotten in the partitions too, and a conversion's copy, told by the
-- 'fg' count, forgets there what it copied meanwhile.
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
if fence > 0 then redis.call('HINCRBY', KEYS[1], 'fg', 1) end
local r = 0
if retired then r = 1 end
return {string.format('%d', fence), r}
