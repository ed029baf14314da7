-- Cancels load ARGV[1] if it is still the one under way.
if redis.call('HGET', KEYS[1], 'build') == ARGV[1] then
  redis.call('HDEL', KEYS[1], 'build')
end
return 1
