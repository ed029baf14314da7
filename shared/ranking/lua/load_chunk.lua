-- Writes items into the staging slot of load ARGV[1]. ARGV[2], ARGV[3]
-- are the lowest and highest lookup levels whose buckets the caller passed:
-- per item, levels lo..hi of the staging slot, after KEYS[3]. Then per
-- item: id, member prefix, sorted-set score, version, removed. Stops early
-- if the slot grows past hi. Returns {items done, staging level}, or
-- {-1, 0} when the load was cancelled.
if not stage or build ~= ARGV[1] then return {-1, 0} end
local lo, hi = tonumber(ARGV[2]), tonumber(ARGV[3])
local width = hi - lo + 1
local done = 0
local n = (#ARGV - 3) / 5
for j = 0, n - 1 do
  if lvl[stage] > hi then break end
  local a = 4 + j * 5
  local kb = 4 + j * width
  local keyOf = function(l) return KEYS[kb + l - lo] end
  apply(keyOf, stage, lo, ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4] == '1')
  done = done + 1
end
saveMeta()
return {done, lvl[stage]}
