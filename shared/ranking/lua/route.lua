-- Routes one write of a partitioned board (see partition.go). KEYS[1] is
-- the meta of the ID's location shard (level, count, the layout epoch it
-- last heard of, expiry), KEYS[2..1+NL] the ID's location bucket in every
-- level. ARGV: id, sorted-set score ('' for a removal), version, mode ('w'
-- write, 'l' load, 'f' forget). The location of an ID is "version|score|
-- previous score" (a score is '' while the ID is removed).
--
-- Returns {status, epoch, old score, stored score}: status -1 when the
-- shard has heard of no layout (Redis lost it: nothing is changed), 0
-- when the version is older than the stored one (nothing to do), 1 when
-- it is newer (old score is where the ID stood before it), 2 when it is
-- the stored version again (a retry: old score is where it stood before
-- that version, so the caller can finish a write whose partition step was
-- lost). The stored score is the ID's after the call.
local NL = 8
local m = redis.call('HMGET', KEYS[1], 'l', 'n', 'epoch', 'exp')
local epoch = m[3]
if not epoch then return {-1, '0', '', ''} end
local lvl, cnt, exp = tonumber(m[1]) or 0, tonumber(m[2]) or 0, m[4]
local id, z, v, mode = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local at, cur = nil, nil
for l = lvl, 0, -1 do
  cur = redis.call('HGET', KEYS[2 + l], id)
  if cur then
    at = l
    break
  end
end
if mode == 'f' then
  if at then redis.call('HDEL', KEYS[2 + at], id) end
  return {1, epoch, '', ''}
end
local cv, cz, pz = -1, '', ''
if cur then
  local a, b, c = string.match(cur, '^([^|]*)|([^|]*)|(.*)$')
  cv, cz, pz = tonumber(a), b, c
end
if v < cv or (v == cv and mode == 'l') then return {0, epoch, '', cz} end
if v == cv then return {2, epoch, pz, cz} end
local key = KEYS[2 + (at or lvl)]
redis.call('HSET', key, id, ARGV[3] .. '|' .. z .. '|' .. cz)
if exp then redis.call('PEXPIREAT', key, exp) end
if not at then
  cnt = cnt + 1
  if cnt >= 64 * 8 ^ lvl and lvl < NL - 1 then
    lvl = lvl + 1
    cnt = 0
  end
  redis.call('HSET', KEYS[1], 'l', string.format('%d', lvl), 'n', string.format('%d', cnt))
end
return {1, epoch, cz, z}
