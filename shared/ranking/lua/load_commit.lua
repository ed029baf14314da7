-- Makes load ARGV[1] live in one step: the next sorted set (KEYS[3])
-- replaces the live one (KEYS[2]; unlinked, so Redis frees it in the
-- background) and the staging lookup slot becomes live. Returns {} when
-- the load was cancelled, else {old lookup slot, its level, sequence} so
-- the caller can clear the old slot.
local m = redis.call('HMGET', KEYS[1], 'build', 'live', 'la', 'lb', 'lseq')
if m[1] ~= ARGV[1] then return {} end
local old, level, new = 'a', m[3] or '0', 'b'
if m[2] == 'b' then old, level, new = 'b', m[4] or '0', 'a' end
redis.call('UNLINK', KEYS[2])
if redis.call('EXISTS', KEYS[3]) == 1 then redis.call('RENAME', KEYS[3], KEYS[2]) end
redis.call('HSET', KEYS[1], 'live', new)
redis.call('HDEL', KEYS[1], 'build')
return {old, level, m[5]}
