-- Applies versioned items to a board. ARGV[1] is '1' for Shared ties;
-- ARGV[2] is '1' to answer {applied, rank, total} for the first item
-- instead of one applied flag per item; ARGV[3] is the layout epoch the
-- caller routed by (0 for an unpartitioned board); then per item: id,
-- member prefix, sorted-set score, version, removed ('1' or '0'). Each
-- item's 2*NL bucket keys follow KEYS[3] in item order. A partition
-- fenced at a later epoch answers 'STALE' (write again by the new layout),
-- and a retired one 'RETIRED' (the write's new partition carries it).
-- An item answers 1 when it applied, 2 when it is the stored version with
-- the stored content (a retry: a conversion's caller finishes it in the
-- partitions), 0 otherwise.
if tonumber(ARGV[3]) < fence then return 'STALE' end
if retired then return 'RETIRED' end
local shared = ARGV[1] == '1'
local out = {}

local function stored(keyOf, id, pfx, zs, vs, removed)
  local _, cur = find(keyOf, live, 0, id)
  if not cur then return false end
  local cv, cp = decode(cur)
  if cv ~= tonumber(vs) then return false end
  if removed or not cp then return removed and not cp end
  return cp == pfx and tonumber(redis.call('ZSCORE', Z[live], cp .. id)) == tonumber(zs)
end

local n = (#ARGV - 3) / 5
for j = 0, n - 1 do
  local a = 4 + j * 5
  local kb = 4 + j * 2 * NL
  local id, pfx, zs, vs, removed = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4] == '1'
  local ok = apply(idBuckets(kb, live), live, 0, id, pfx, zs, vs, removed)
  if stage then apply(idBuckets(kb, stage), stage, 0, id, pfx, zs, vs, removed) end
  if ok then
    out[j + 1] = 1
  elseif stored(idBuckets(kb, live), id, pfx, zs, vs, removed) then
    out[j + 1] = 2
  else
    out[j + 1] = 0
  end
end
saveMeta()
if ARGV[2] ~= '1' then return out end
local z = Z[live]
local rank = 0
local m = memberOf(live, 4, ARGV[4])
if m then
  local score = redis.call('ZSCORE', z, m)
  if score then rank = rankOf(z, m, score, shared) end
end
return {out[1], rank, redis.call('ZCARD', z)}
