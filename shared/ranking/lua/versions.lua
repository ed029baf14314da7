-- Returns {id, member prefix, sorted-set score, version, ...} for each ARGV
-- id that is on the board (live slot); each ID's 2*NL bucket keys follow
-- KEYS[3] in order. A partition being split or merged is copied this way.
local z = Z[live]
local out = {}
for j = 0, #ARGV - 1 do
  local id = ARGV[j + 1]
  local _, cur = find(idBuckets(4 + j * 2 * NL, live), live, 0, id)
  if cur then
    local v, p = decode(cur)
    if p then
      local score = redis.call('ZSCORE', z, p .. id)
      if score then
        out[#out + 1] = id
        out[#out + 1] = p
        out[#out + 1] = score
        out[#out + 1] = string.format('%d', v)
      end
    end
  end
end
return out
