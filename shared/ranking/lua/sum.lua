-- Stores into the destination board's live sorted set the per-member sum
-- of the sources' live sorted sets, expiring in ARGV[1] ms. KEYS come in
-- threes (meta, slot a, slot b): the destination first, then each source.
-- Returns the destination's total.
local function liveOf(i)
  if redis.call('HGET', KEYS[i], 'live') == 'b' then return KEYS[i + 2] end
  return KEYS[i + 1]
end
local dst = liveOf(1)
local srcs = {}
for i = 4, #KEYS, 3 do srcs[#srcs + 1] = liveOf(i) end
if #srcs == 0 then
  redis.call('DEL', dst)
else
  redis.call('ZUNIONSTORE', dst, #srcs, unpack(srcs))
end
local t = redis.call('TIME')
local exp = string.format('%d', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[1]))
redis.call('HSET', KEYS[1], 'exp', exp)
redis.call('PEXPIREAT', KEYS[1], exp)
redis.call('PEXPIREAT', dst, exp)
return redis.call('ZCARD', dst)
