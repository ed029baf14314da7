-- Stores into the destination's live sorted set (KEYS[2]) the per-member
-- sum of the sources' live sorted sets (KEYS[3..]), expiring in ARGV[1] ms
-- with the destination's meta (KEYS[1]). Returns the destination's total.
local dst = KEYS[2]
if #KEYS == 2 then
  redis.call('DEL', dst)
else
  redis.call('ZUNIONSTORE', dst, #KEYS - 2, unpack(KEYS, 3))
end
local t = redis.call('TIME')
local exp = string.format('%d', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[1]))
redis.call('HSET', KEYS[1], 'exp', exp)
redis.call('PEXPIREAT', KEYS[1], exp)
redis.call('PEXPIREAT', dst, exp)
return redis.call('ZCARD', dst)
