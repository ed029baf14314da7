-- Returns {i, member prefix, score, ...} for each ARGV[i+1] that has a
-- score; each ID's 2*NL bucket keys follow KEYS[3] in order. A retired
-- partition answers 'RETIRED'.
if retired then return 'RETIRED' end
local z = Z[live]
local out = {}
for j = 0, #ARGV - 1 do
  local m = memberOf(live, 4 + j * 2 * NL, ARGV[j + 1])
  if m then
    local score = redis.call('ZSCORE', z, m)
    if score then
      out[#out + 1] = j
      out[#out + 1] = string.sub(m, 1, 8)
      out[#out + 1] = score
    end
  end
end
return out
