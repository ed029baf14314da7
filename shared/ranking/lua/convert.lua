-- Steps a board's conversion from one sorted set to partitions (see
-- convert.go) on the set's meta hash (KEYS[1]). ARGV[1] is the step and
-- ARGV[2] the conversion's fence (the partitions' layout epoch):
--
--   begin   fence the set at ARGV[2] and record where the copy starts:
--           the load sequence (a load since abandons the conversion), the
--           live lookup slot and its level. 'OK', or 'BUSY' while a load
--           runs or a conversion began already, or 'RETIRED'.
--   finish  mark the set retired, unless a load began since the
--           conversion did: 'OK', 'ABANDON', or 'GONE' (not this
--           conversion's fence).
--   abandon drop this conversion's fence and note when (ARGV[3], ms), so
--           the next one waits until the writes that knew of it forgot.
local m = redis.call('HMGET', KEYS[1], 'fence', 'build', 'ret', 'live', 'la', 'lb', 'lseq', 'cvseq')
local op = ARGV[1]
if op == 'begin' then
  if m[3] then return 'RETIRED' end
  if m[1] or m[2] then return 'BUSY' end
  local live, lvl = 'a', m[5] or '0'
  if m[4] == 'b' then live, lvl = 'b', m[6] or '0' end
  redis.call('HSET', KEYS[1], 'fence', ARGV[2], 'cvseq', m[7] or '0', 'cvlive', live, 'cvlvl', lvl, 'cvat', '0')
  return 'OK'
end
if m[1] ~= ARGV[2] or m[3] then return 'GONE' end
if op == 'finish' then
  if (m[7] or '0') ~= m[8] or m[2] then return 'ABANDON' end
  redis.call('HSET', KEYS[1], 'ret', '1')
  redis.call('HDEL', KEYS[1], 'cvseq', 'cvlive', 'cvlvl', 'cvat', 'fg')
  return 'OK'
end
redis.call('HDEL', KEYS[1], 'fence', 'cvseq', 'cvlive', 'cvlvl', 'cvat', 'fg')
redis.call('HSET', KEYS[1], 'cvab', ARGV[3])
return 'OK'
