-- Shared by every script that reads or writes by ID (see keys.go).
-- KEYS[1] is the board's meta hash, KEYS[2] its live sorted set, KEYS[3]
-- the next one (built by a load); the caller passes each ID's lookup
-- buckets after them. Lookup slots are numbered 1 (a) and 2 (b).
local NL = 8
local ZERO = string.rep('\0', 8)
local st = redis.call('HMGET', KEYS[1], 'live', 'la', 'lb', 'na', 'nb', 'build', 'exp', 'fence', 'ret')
local live = 1
if st[1] == 'b' then live = 2 end
-- Z[s] is the sorted set that goes with lookup slot s.
local Z = {}
Z[live] = KEYS[2]
Z[3 - live] = KEYS[3]
local lvl = {tonumber(st[2]) or 0, tonumber(st[3]) or 0}
local cnt = {tonumber(st[4]) or 0, tonumber(st[5]) or 0}
local build = st[6]
local exp = st[7]
-- A partition of a partitioned board (see partition.go) may be fenced:
-- writes routed by an older layout epoch than 'fence' must be routed
-- again, and a retired partition ('ret') is read and written by nobody.
local fence = tonumber(st[8]) or 0
local retired = st[9] ~= false and st[9] ~= nil
-- While a load builds the other slot, writes go to both so the load
-- cannot lose them.
local stage = nil
if build then stage = 3 - live end
local metaChanged = false

-- A lookup value is the entry's 8-byte member prefix followed by its
-- decimal version, or, for a tombstone, the bare decimal version. Prefixes
-- start with a zero byte (ReachedAt < 2^56 ms); digits never do.
local function decode(v)
  if string.byte(v, 1) == 0 then
    return tonumber(string.sub(v, 9)), string.sub(v, 1, 8)
  end
  return tonumber(v), nil
end

local function levelCap(l) return 64 * 8 ^ l end

local function touch(key)
  if exp then redis.call('PEXPIREAT', key, exp) end
end

-- idBuckets returns level -> bucket key in slot s for the ID whose
-- 2*NL bucket keys (slot a's levels, then slot b's) start at KEYS[kb].
local function idBuckets(kb, s)
  local base = kb + (s - 1) * NL
  return function(l) return KEYS[base + l] end
end

-- find returns the level and lookup value of id in slot s, probing from
-- the slot's current level down to lo.
local function find(keyOf, s, lo, id)
  for l = lvl[s], lo, -1 do
    local v = redis.call('HGET', keyOf(l), id)
    if v then return l, v end
  end
  return nil, nil
end

-- apply writes one versioned item into slot s when its version is newer
-- than the stored one; it returns whether it did.
local function apply(keyOf, s, lo, id, pfx, zs, vs, removed)
  local at, cur = find(keyOf, s, lo, id)
  if cur then
    local cv, cp = decode(cur)
    if cv >= tonumber(vs) then return false end
    if cp and (removed or cp ~= pfx) then redis.call('ZREM', Z[s], cp .. id) end
  end
  local val = vs
  if not removed then
    redis.call('ZADD', Z[s], zs, pfx .. id)
    touch(Z[s])
    val = pfx .. vs
  end
  local key = keyOf(at or lvl[s])
  redis.call('HSET', key, id, val)
  touch(key)
  if not at then
    cnt[s] = cnt[s] + 1
    if cnt[s] >= levelCap(lvl[s]) and lvl[s] < NL - 1 then
      lvl[s] = lvl[s] + 1
      cnt[s] = 0
    end
    metaChanged = true
  end
  return true
end

local function saveMeta()
  if metaChanged then
    redis.call('HSET', KEYS[1], 'la', string.format('%d', lvl[1]), 'lb', string.format('%d', lvl[2]),
      'na', string.format('%d', cnt[1]), 'nb', string.format('%d', cnt[2]))
    touch(KEYS[1])
  end
end

-- memberOf returns id's member in slot s, or nil when id is a tombstone.
-- An ID without a lookup entry may still be on a board filled by Sum,
-- whose members all carry the zero prefix; callers check the score.
local function memberOf(s, kb, id)
  local _, cur = find(idBuckets(kb, s), s, 0, id)
  if cur then
    local _, p = decode(cur)
    if p then return p .. id end
    return nil
  end
  return ZERO .. id
end

local function rankOf(z, member, score, shared)
  if shared then return redis.call('ZCOUNT', z, '-inf', '(' .. score) + 1 end
  return redis.call('ZRANK', z, member) + 1
end
