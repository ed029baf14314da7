-- Tells a location shard (meta KEYS[1]) of layout epoch ARGV[1], unless it
-- heard of a later one; ARGV[2], when not '', is the board's expiry.
local cur = tonumber(redis.call('HGET', KEYS[1], 'epoch') or '0')
if tonumber(ARGV[1]) > cur then redis.call('HSET', KEYS[1], 'epoch', ARGV[1]) end
if ARGV[2] ~= '' then
  redis.call('HSET', KEYS[1], 'exp', ARGV[2])
  redis.call('PEXPIREAT', KEYS[1], ARGV[2])
end
return 1
