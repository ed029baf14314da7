-- Returns {total, better, {member, score, ...}} for the ARGV[2] entries
-- from 0-based position ARGV[1] of the board's live set (KEYS[1]). better
-- counts the entries strictly better than the page's first (only when
-- ARGV[3] is '1', Shared ties): a page that starts inside a tie ranks it
-- as the whole board does. A set retired by its conversion to partitions
-- (its meta, KEYS[2], says 'ret') answers 'RETIRED'.
if redis.call('HEXISTS', KEYS[2], 'ret') == 1 then return 'RETIRED' end
local start = tonumber(ARGV[1])
local items = redis.call('ZRANGE', KEYS[1], start, start + tonumber(ARGV[2]) - 1, 'WITHSCORES')
local better = 0
if ARGV[3] == '1' and #items > 0 then better = redis.call('ZCOUNT', KEYS[1], '-inf', '(' .. items[2]) end
return {redis.call('ZCARD', KEYS[1]), better, items}
