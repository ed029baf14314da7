-- Opens the cleared staging slot at level ARGV[3] under token ARGV[2],
-- unless another load started after sequence ARGV[1]. From now on every
-- write goes to both slots.
if redis.call('HGET', KEYS[1], 'lseq') ~= ARGV[1] then return 0 end
local stage = 'b'
if redis.call('HGET', KEYS[1], 'live') == 'b' then stage = 'a' end
redis.call('HSET', KEYS[1], 'build', ARGV[2], 'dirty', '1', 'l' .. stage, ARGV[3], 'n' .. stage, '0')
return 1
