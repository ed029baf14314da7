-- Unlinks KEYS[2..] (the next sorted set and the lookup buckets of the
-- non-live slot) unless a load started after sequence ARGV[1]: the keys
-- would then be that load's.
if redis.call('HGET', KEYS[1], 'lseq') ~= ARGV[1] then return 0 end
if #KEYS > 1 then redis.call('UNLINK', unpack(KEYS, 2)) end
return 1
