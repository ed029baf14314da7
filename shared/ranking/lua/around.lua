-- Returns {total, index, start, better, {member, score, ...}} for the
-- window of ARGV[2] entries on each side of ARGV[1], or {} when it has no
-- score. better counts the entries strictly better than the window's first
-- (only when ARGV[3] is '1', Shared ties). KEYS[4..] are the ID's buckets.
-- A set retired by its conversion to partitions answers 'RETIRED'.
if retired then return 'RETIRED' end
local z = Z[live]
local m = memberOf(live, 4, ARGV[1])
if not m then return {} end
local r = redis.call('ZRANK', z, m)
if not r then return {} end
local k = tonumber(ARGV[2])
local start = r - k
if start < 0 then start = 0 end
local items = redis.call('ZRANGE', z, start, r + k, 'WITHSCORES')
local better = 0
if ARGV[3] == '1' then better = redis.call('ZCOUNT', z, '-inf', '(' .. items[2]) end
return {redis.call('ZCARD', z), r, start, better, items}
