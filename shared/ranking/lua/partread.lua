-- Reads one partition of a partitioned board (see partread.go): returns
-- {retired, total, range, rangeBetter, head, tail, tailBetter, found,
-- index, start, better, window}. ARGV: range start (0-based, -1 for
-- none), range count, head count, tail count, shared ('1'), id ('' for
-- none), k. range is the entries from range start; head the first and
-- tail the last entries; window the entries up to k either side of the
-- id, which is at 0-based index (found is 1 when the id is here). The
-- *Better counts are the entries strictly better than the first of each
-- list, for Shared ties. KEYS[4..] are the id's buckets.
if retired then return {1} end
local z = Z[live]
local total = redis.call('ZCARD', z)
local shared = ARGV[5] == '1'
local function better(items)
  if shared and #items > 0 then return redis.call('ZCOUNT', z, '-inf', '(' .. items[2]) end
  return 0
end
local rs, rn = tonumber(ARGV[1]), tonumber(ARGV[2])
local range = {}
if rs >= 0 and rn > 0 then range = redis.call('ZRANGE', z, rs, rs + rn - 1, 'WITHSCORES') end
local hn, tn = tonumber(ARGV[3]), tonumber(ARGV[4])
local head, tail = {}, {}
if hn > 0 then head = redis.call('ZRANGE', z, 0, hn - 1, 'WITHSCORES') end
if tn > 0 then tail = redis.call('ZRANGE', z, -tn, -1, 'WITHSCORES') end
local out = {0, total, range, better(range), head, tail, better(tail), 0, 0, 0, 0, {}}
if ARGV[6] == '' then return out end
local m = memberOf(live, 4, ARGV[6])
if not m then return out end
local r = redis.call('ZRANK', z, m)
if not r then return out end
local k = tonumber(ARGV[7])
local start = r - k
if start < 0 then start = 0 end
local window = redis.call('ZRANGE', z, start, r + k, 'WITHSCORES')
out[8], out[9], out[10], out[11], out[12] = 1, r, start, better(window), window
return out
