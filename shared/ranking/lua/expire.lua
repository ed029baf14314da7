-- Sets the board's expiry to ARGV[1] ms from now on its meta and sorted
-- sets (KEYS[1..3]), and records it so later writes extend it to every key they touch.
-- Returns {} for a board that does not exist, else {deadline, live slot,
-- level of a, level of b, 1 if the other slot may hold keys} so the caller
-- can expire the lookup buckets.
if redis.call('EXISTS', KEYS[1]) == 0 then return {} end
local t = redis.call('TIME')
local exp = string.format('%d', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[1]))
redis.call('HSET', KEYS[1], 'exp', exp)
for i = 1, 3 do redis.call('PEXPIREAT', KEYS[i], exp) end
local m = redis.call('HMGET', KEYS[1], 'live', 'la', 'lb', 'dirty')
local dirty = 0
if m[4] == '1' then dirty = 1 end
return {exp, m[1] or 'a', m[2] or '0', m[3] or '0', dirty}
