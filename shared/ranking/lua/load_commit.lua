-- Makes the staging slot of load ARGV[1] live in one step. Returns {} when
-- the load was cancelled, else {old slot, its level, sequence} so the
-- caller can clear the old slot.
local m = redis.call('HMGET', KEYS[1], 'build', 'live', 'la', 'lb', 'lseq')
if m[1] ~= ARGV[1] then return {} end
local old, level, new = 'a', m[3] or '0', 'b'
if m[2] == 'b' then old, level, new = 'b', m[4] or '0', 'a' end
redis.call('HSET', KEYS[1], 'live', new)
redis.call('HDEL', KEYS[1], 'build')
return {old, level, m[5]}
