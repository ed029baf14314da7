-- Unlinks KEYS[2..] (keys of the non-live slot) unless a newer load has
-- started since sequence ARGV[1], whose staging slot they may now be.
if redis.call('HGET', KEYS[1], 'lseq') ~= ARGV[1] then return 0 end
if #KEYS > 1 then redis.call('UNLINK', unpack(KEYS, 2)) end
return 1
