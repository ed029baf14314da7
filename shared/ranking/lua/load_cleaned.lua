-- Records that non-live slot ARGV[2] was cleared under sequence ARGV[1],
-- unless a load has started since.
local m = redis.call('HMGET', KEYS[1], 'lseq', 'build', 'live')
local live = m[3] or 'a'
if m[1] ~= ARGV[1] or m[2] or live == ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], 'dirty', '0', 'l' .. ARGV[2], '0', 'n' .. ARGV[2], '0')
return 1
