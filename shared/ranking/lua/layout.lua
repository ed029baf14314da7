-- Reads or changes a partitioned board's layout hash (KEYS[1]). With
-- ARGV[1] = '' it stores ARGV[2] as the first layout unless one exists.
-- With ARGV[1] = an epoch it replaces the layout with ARGV[2] only while the
-- epoch is still ARGV[1] (compare and set), and the epoch goes up by one.
-- Returns {epoch, layout} as stored afterwards.
if ARGV[1] == '' then
  if redis.call('HEXISTS', KEYS[1], 'layout') == 0 then
    redis.call('HSET', KEYS[1], 'epoch', '1', 'layout', ARGV[2])
  end
elseif redis.call('HGET', KEYS[1], 'epoch') == ARGV[1] then
  redis.call('HSET', KEYS[1], 'epoch', string.format('%d', tonumber(ARGV[1]) + 1), 'layout', ARGV[2])
end
return redis.call('HMGET', KEYS[1], 'epoch', 'layout')
