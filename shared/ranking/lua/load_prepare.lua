-- Starts a load: cancels any load under way (its next step fails) and
-- returns {staging slot, its level, 1 if it may hold keys, sequence}. The
-- caller clears the staging slot, then calls load_begin with the sequence;
-- no write goes to the staging slot in between.
local m = redis.call('HMGET', KEYS[1], 'live', 'la', 'lb', 'dirty')
local stage, level = 'b', m[3] or '0'
if m[1] == 'b' then stage, level = 'a', m[2] or '0' end
local seq = redis.call('HINCRBY', KEYS[1], 'lseq', 1)
redis.call('HDEL', KEYS[1], 'build')
local dirty = 0
if m[4] == '1' then dirty = 1 end
return {stage, level, dirty, seq}
