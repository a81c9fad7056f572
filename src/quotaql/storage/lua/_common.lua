-- quotaql: one script decides every quota of one key, atomically, in one round trip.
-- It is assembled from _common.lua, one file per algorithm, and driver.lua (in that order).
-- The algorithm files mirror quotaql/policy/algorithms.py operation for operation.

-- A duration rounded up to whole milliseconds, never negative.
local function ms(value)
  return math.max(0, math.ceil(value))
end

-- A number as text that reads back to the same double (Lua's tostring keeps 14 digits):
-- whole numbers as integers (Redis stores those most compactly), others in the short form
-- when it is exact, else with all 17 digits.
local function num(value)
  if value == math.floor(value) and math.abs(value) < 2^53 then
    return string.format('%d', value)
  end
  local text = string.format('%.15g', value)
  if tonumber(text) ~= value then text = string.format('%.17g', value) end
  return text
end

-- The rounding a fit may absorb, as a share of the quota's size (policy.algorithms.SLACK).
local SLACK = 1e-9

-- Store a state with its time to live; a state that no longer matters is deleted.
local function put(key, value, ttl)
  if ttl > 0 then
    redis.call('SET', key, value, 'PX', ttl)
  else
    redis.call('DEL', key)
  end
end
