-- Returns {total, {member, score, ...}} for the best ARGV[1] entries.
-- KEYS: meta, slot a sorted set, slot b sorted set.
local z = KEYS[2]
if redis.call('HGET', KEYS[1], 'live') == 'b' then z = KEYS[3] end
local n = tonumber(ARGV[1])
local items = {}
if n > 0 then items = redis.call('ZRANGE', z, 0, n - 1, 'WITHSCORES') end
return {redis.call('ZCARD', z), items}
